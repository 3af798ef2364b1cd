"""The message helpers take what AITune passes: numpy integers as batch sizes, numpy floats.

AITune's throughputs are ``np.float64`` (mean latency through numpy) and batch sizes can be numpy
integers; the lines must read exactly as with the Python numbers, and bools stay refused.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from aitune_fp.core.messages import (
    fmt_baseline_line,
    fmt_baseline_selected,
    fmt_candidate_line,
    fmt_speedup_msg,
    fmt_speedup_msg_short,
    fmt_throughput_detail,
)
from aitune_fp.errors import InvalidTypeError, InvalidValueError

INTS = (np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64)
FLOATS = (np.float16, np.float32, np.float64)

sizes = st.integers(min_value=1, max_value=120)
amounts = st.floats(min_value=0, max_value=60_000, allow_nan=False, allow_infinity=False, width=16)


@given(
    size=sizes, int_type=st.sampled_from(INTS), value=amounts, ratio=amounts, passed=st.booleans()
)
def test_numpy_numbers_read_as_python_numbers(
    size: int, int_type: type, value: float, ratio: float, passed: bool
) -> None:
    for float_type in FLOATS:
        v, r = float_type(value), float_type(ratio)
        plain_v, plain_r = float(v), float(r)
        assert fmt_candidate_line("X()", int_type(size), v, r, passed) == fmt_candidate_line(
            "X()", size, plain_v, plain_r, passed
        )
        assert fmt_baseline_line(int_type(size), v) == fmt_baseline_line(size, plain_v)
        assert fmt_throughput_detail(v, r) == fmt_throughput_detail(plain_v, plain_r)
        assert fmt_speedup_msg_short(r, "d") == fmt_speedup_msg_short(plain_r, "d")
        assert fmt_speedup_msg(r, "d", "m", "X()") == fmt_speedup_msg(plain_r, "d", "m", "X()")
        assert fmt_baseline_selected("X()", v) == fmt_baseline_selected("X()", plain_v)


def test_aitune_style_values() -> None:
    line = fmt_candidate_line("X()", np.int64(8), np.float64(246.9), np.float64(2.0), np.True_)
    assert line == "📊 X(): batch size=8, throughput=246.90 samples/s, speedup=2.00x (▲ faster)"


@pytest.mark.parametrize("bad", [np.bool_(True), True, "8", np.float64(8.0)])
def test_a_batch_size_must_still_be_an_integer(bad: object) -> None:
    with pytest.raises(InvalidTypeError):
        fmt_baseline_line(bad, 1.0)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [np.float64("nan"), np.float32("inf"), np.float64(-1.0)])
def test_numpy_floats_are_still_checked(bad: object) -> None:
    with pytest.raises(InvalidValueError):
        fmt_baseline_line(8, bad)  # type: ignore[arg-type]


def test_numpy_batch_size_must_still_be_positive() -> None:
    with pytest.raises(InvalidValueError):
        fmt_baseline_line(np.int64(0), 1.0)
    with pytest.raises(InvalidTypeError):
        fmt_speedup_msg_short(np.bool_(False), "d")  # type: ignore[arg-type]
