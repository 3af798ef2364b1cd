"""Specs of the human text: byte-identical to AITune without colour, its ANSI codes with colour."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aitune_fp.core.messages import (
    fmt_baseline_line,
    fmt_baseline_selected,
    fmt_candidate_line,
    fmt_disabled_line,
    fmt_indicator,
    fmt_speedup_msg,
    fmt_speedup_msg_short,
    fmt_throughput_detail,
)
from tests.strategies import speedups, throughputs

ANSI = re.compile(r"\033\[[0-9;]*m")
names = st.text(
    st.characters(blacklist_categories=["Cs"], blacklist_characters="\033"), max_size=30
)


class TestExactFormats:
    def test_detail(self) -> None:
        """The detail is '<baseline> → <throughput> samples/s' with U+2192."""
        assert fmt_throughput_detail(100, 200) == "100.00 → 200.00 samples/s"

    def test_short(self) -> None:
        """The short summary has no module or backend name (reference §2.1 item 25)."""
        msg = fmt_speedup_msg_short(2.0, fmt_throughput_detail(100.0, 200.0))
        assert msg == "⚡ speedup: 2.00x (100.00 → 200.00 samples/s)"
        assert "my_module" not in msg

    def test_full(self) -> None:
        """The full summary names module and backend (reference §2.1 item 24, design §2)."""
        msg = fmt_speedup_msg(2.0, fmt_throughput_detail(100, 200), "mlp", "TorchCompileBackend()")
        assert msg == (
            "⚡ mlp | backend: TorchCompileBackend() | speedup: 2.00x (100.00 → 200.00 samples/s)"
        )

    def test_candidate_line(self) -> None:
        """The per-candidate line matches AITune's (reference §1.14 item 6)."""
        assert fmt_candidate_line("X()", 8, 246.9, 2.0, True) == (
            "📊 X(): batch size=8, throughput=246.90 samples/s, speedup=2.00x (▲ faster)"
        )
        assert fmt_candidate_line("X()", 8, 100.5, 1.005, False).endswith(
            "speedup=1.00x (▼ slower)"
        )

    def test_baseline_line(self) -> None:
        """The baseline line matches AITune's."""
        assert fmt_baseline_line(8, 123.45) == (
            "📊 Eager baseline: batch size=8, throughput=123.45 samples/s"
        )

    def test_baseline_selected(self) -> None:
        """The baseline-selected line carries the throughput when known (reference §2.1 item 27)."""
        assert fmt_baseline_selected("TorchEagerBackend()", 123.0) == (
            "ℹ️ Baseline was selected: TorchEagerBackend() (123.00 samples/s)"
        )
        assert fmt_baseline_selected("TorchEagerBackend()") == (
            "ℹ️ Baseline was selected: TorchEagerBackend()"
        )

    def test_disabled_line(self) -> None:
        """The disabled line is AITune's text."""
        assert "Performance validation against eager baseline is disabled" in fmt_disabled_line()


class TestColour:
    def test_ansi_codes_are_aitunes(self) -> None:
        """With colour, each part carries AITune's ANSI code."""
        msg = fmt_speedup_msg(2.0, "d", "mlp", "B()", color=True)
        assert msg == (
            "\033[94m⚡\033[0m \033[1mmlp\033[0m | backend: \033[96mB()\033[0m | "
            "speedup: \033[92m\033[1m2.00x\033[0m (d)"
        )
        assert fmt_indicator(True, color=True) == "\033[92m▲ faster\033[0m"
        assert fmt_indicator(False, color=True) == "\033[33m▼ slower\033[0m"

    @given(speedups, throughputs, throughputs, names, names, st.booleans())
    def test_colour_only_adds_ansi(
        self, speedup: float, a: float, b: float, name: str, desc: str, passed: bool
    ) -> None:
        """Stripping the ANSI codes from the coloured text gives the plain text."""
        detail = fmt_throughput_detail(a, b)
        for plain, coloured in [
            (
                fmt_speedup_msg(speedup, detail, name, desc),
                fmt_speedup_msg(speedup, detail, name, desc, color=True),
            ),
            (
                fmt_speedup_msg_short(speedup, detail),
                fmt_speedup_msg_short(speedup, detail, color=True),
            ),
            (
                fmt_candidate_line(desc, 4, b, speedup, passed),
                fmt_candidate_line(desc, 4, b, speedup, passed, color=True),
            ),
        ]:
            assert ANSI.sub("", coloured) == plain
            assert "\033" not in plain


class TestNumbersRoundTrip:
    @given(throughputs, throughputs)
    def test_detail_round_trips_at_two_decimals(self, a: float, b: float) -> None:
        """The numbers in the detail parse back to the inputs rounded to 2 decimals."""
        m = re.fullmatch(r"(\S+) → (\S+) samples/s", fmt_throughput_detail(a, b))
        assert m is not None
        assert float(m.group(1)) == pytest.approx(round(a, 2), abs=0.006)
        assert float(m.group(2)) == pytest.approx(round(b, 2), abs=0.006)

    @given(speedups)
    def test_speedup_round_trips(self, s: float) -> None:
        """The speedup in the short line parses back to the input at 2 decimals."""
        m = re.search(r"speedup: (\S+)x", fmt_speedup_msg_short(s, "d"))
        assert m is not None
        assert float(m.group(1)) == pytest.approx(s, abs=0.006)

    @given(throughputs, st.integers(min_value=1, max_value=1 << 20))
    def test_baseline_line_round_trips(self, t: float, bs: int) -> None:
        """Batch size and throughput parse back from the baseline line."""
        m = re.fullmatch(
            r"📊 Eager baseline: batch size=(\d+), throughput=(\S+) samples/s",
            fmt_baseline_line(bs, t),
        )
        assert m is not None
        assert int(m.group(1)) == bs
        assert float(m.group(2)) == pytest.approx(t, abs=0.006)


class TestBadInput:
    @pytest.mark.parametrize("bad", [float("nan"), float("inf"), -1.0, True, "2"])
    def test_formatters_refuse_bad_numbers(self, bad: object) -> None:
        """Formatters name the bad argument instead of printing 'nan' or 'inf'."""
        with pytest.raises((ValueError, TypeError), match="speedup"):
            fmt_speedup_msg_short(bad, "d")  # type: ignore[arg-type]
        with pytest.raises((ValueError, TypeError), match="throughput"):
            fmt_throughput_detail(1.0, bad)  # type: ignore[arg-type]
        with pytest.raises((ValueError, TypeError), match="baseline_throughput"):
            fmt_baseline_selected("X", bad)  # type: ignore[arg-type]

    @pytest.mark.parametrize("bad", [0, -3, 2.5, True])
    def test_batch_size_must_be_positive_int(self, bad: object) -> None:
        """A batch size that is not an int >= 1 is refused."""
        with pytest.raises((ValueError, TypeError), match="batch_size"):
            fmt_baseline_line(bad, 1.0)  # type: ignore[arg-type]
