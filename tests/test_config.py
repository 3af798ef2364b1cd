"""Specs of ProfilingConfig and its narrowing to one batch size."""

from __future__ import annotations

import math

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from aitune_fp.core.config import ProfilingConfig, for_batch_size
from aitune_fp.errors import InvalidTypeError, InvalidValueError


class TestDefaults:
    def test_statistical_by_default(self) -> None:
        """The default decision is statistical: issue 14's six looks, futility stop and guards."""
        cfg = ProfilingConfig()
        assert cfg.decision == "statistical"
        assert cfg.looks == (10, 20, 40, 80, 160, 320)
        assert cfg.max_pairs == 320
        assert (cfg.futility_margin_percent, cfg.futility_error) == (1.0, 0.20)
        assert cfg.guard_serial_correlation and cfg.guard_shift
        assert (cfg.point_warmup_calls, cfg.point_steps) == (10, 20)

    def test_to_dict_is_json_ready(self) -> None:
        """to_dict turns tuples into lists and keeps every field."""
        d = ProfilingConfig(batch_sizes=(1, 2)).to_dict()
        assert d["batch_sizes"] == [1, 2]
        assert set(d) == {a.name for a in attrs.fields(ProfilingConfig)}


class TestFutilityFields:
    @pytest.mark.parametrize("bad", [-0.5, math.nan, math.inf])
    def test_margin_must_be_finite_and_nonnegative(self, bad: float) -> None:
        """A negative or non-finite margin is refused, naming the field."""
        with pytest.raises(InvalidValueError, match="futility_margin_percent"):
            ProfilingConfig(futility_margin_percent=bad)

    @pytest.mark.parametrize("bad", [0.0, 1.0, -0.1, 1.5])
    def test_futility_error_is_a_probability(self, bad: float) -> None:
        """futility_error must lie strictly between 0 and 1."""
        with pytest.raises(InvalidValueError, match="futility_error"):
            ProfilingConfig(futility_error=bad)

    def test_futility_error_must_leave_each_look_below_half(self) -> None:
        """With one look, a futility error of 0.5 or more is no test at all."""
        with pytest.raises(InvalidValueError, match="futility_error"):
            ProfilingConfig(looks=(10,), futility_error=0.6, warmup_max_calls=20)

    def test_guards_must_be_bools(self) -> None:
        """The guard switches refuse truthy non-bools."""
        with pytest.raises(InvalidTypeError, match="guard_shift"):
            ProfilingConfig(guard_shift=1)  # type: ignore[arg-type]


class TestNarrowing:
    @given(st.integers(1, 1 << 20), st.sampled_from([None, True, False]))
    def test_for_batch_size(self, n: int, batching: bool | None) -> None:
        """Narrowing sets one batch size, keeps batching unless given, and changes nothing else."""
        cfg = ProfilingConfig(batch_sizes=(1, 2, 4, 8), batching=False, looks=(8, 16), threads=2)
        narrow = for_batch_size(cfg, n, batching=batching)
        assert narrow is not cfg
        assert narrow.batch_sizes == (n,)
        assert narrow.batching == (cfg.batching if batching is None else batching)
        assert attrs.evolve(narrow, batch_sizes=cfg.batch_sizes, batching=cfg.batching) == cfg

    @pytest.mark.parametrize("bad", [0, -1, True, 2.0])
    def test_bad_batch_size(self, bad: object) -> None:
        """A batch size that is not an int >= 1 is refused by name."""
        with pytest.raises((ValueError, TypeError), match="batch_size"):
            for_batch_size(ProfilingConfig(), bad)  # type: ignore[arg-type]


class TestBadConfig:
    @pytest.mark.parametrize(
        ("field", "bad"),
        [
            ("decision", "two words"),
            ("decision", None),
            ("point_steps", 0),
            ("point_warmup_calls", -1),
            ("warmup_window", 0),
            ("warmup_tolerance", 0.0),
            ("warmup_tolerance", float("nan")),
            ("max_seconds", -1.0),
            ("max_seconds", float("inf")),
            ("confidence", 1.0),
            ("confidence", 0.0),
            ("looks", ()),
            ("looks", (10, 10)),
            ("looks", (1,)),
            ("batch_sizes", (0,)),
            ("threads", 0),
            ("clock", "wall"),
            ("clock", None),
            ("batching", 1),
        ],
    )
    def test_refused_with_name(self, field: str, bad: object) -> None:
        """Zero steps, negative budgets, confidence outside (0,1) and the like raise by name."""
        with pytest.raises((ValueError, TypeError), match=field):
            ProfilingConfig(**{field: bad})

    def test_window_fits_warmup(self) -> None:
        """The steadiness window must fit in the warm-up budget."""
        with pytest.raises(ValueError, match="warmup_window"):
            ProfilingConfig(warmup_window=10, warmup_max_calls=5)
