"""A verdict read in one glance (issue 50): by default each row is the verdict, the decided
speedup with its interval, a one-line reason and the throughput pair; levels, flags and the
long reason are behind ``-v``; the ⚡ line shows the row's figure and interval."""

from __future__ import annotations

import argparse
import io
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from rich.console import Console

from aitune_fp.cli import main
from aitune_fp.cli.plain import print_parts
from aitune_fp.cli.rendering import final_line, markdown_run, render_run
from aitune_fp.cli.tune_args import add_arguments
from aitune_fp.core.messages import fmt_headline, fmt_verdict_reason
from aitune_fp.core.report import TuneReport
from aitune_fp.core.results import PerformanceValidationResult
from tests.factories import fake_log, fake_result, write_log

#: A reason as long as the real ones (the docs' compile row had 15 lines of it).
LONG_REASON = (
    "no verdict from pairs taken across a change of the machine (320 pairs); faster than "
    "0.998x and slower than 0.943x are ruled out at 95% (one-sided each) (interval widened "
    "for serial correlation (lag-1 0.39)) (eager's own latency moved by more than 15% at pair "
    "308 (the machine changed under the measurement))"
)


def _stat(desc: str, **overrides: Any) -> PerformanceValidationResult:
    fields: dict[str, Any] = {
        "throughput": 13105.0,
        "baseline_throughput": 10548.0,
        "speedup": 13105.0 / 10548.0,
        "estimate": 1.28,
        "ci_low": 1.134,
        "ci_high": 1.372,
        "confidence": 0.9917,
        "guarantee": 0.95,
        "futility_high": 1.36,
        "futility_level": 1 - 0.2 / 6,
        "futility_margin_percent": 1.0,
        "n_baseline": 20,
        "n_candidate": 20,
        "verdict": "faster",
        "reason": "lower bound 1.134x (typical call) clears required 1.010x at 20 pairs",
    }
    return fake_result(desc, **{**fields, **overrides})


def _docs_run() -> TuneReport:
    """The three rows of docs/cli.md's example: different levels, flags, a long reason."""
    compile_row = _stat(
        "TorchCompileBackend()",
        throughput=9962.0,
        baseline_throughput=10213.0,
        speedup=9962.0 / 10213.0,
        estimate=0.97,
        ci_low=0.943,
        ci_high=0.998,
        confidence=0.9694,
        futility_high=0.998,
        verdict="inconclusive",
        flags=("serial_correlation", "machine_changed_at_pair_308", "machine_slowed"),
        reason=LONG_REASON,
        n_baseline=12,
        n_candidate=12,
        latencies_from=308,
    )
    int8 = _stat(
        "Int8DynamicBackend()",
        throughput=22314.0,
        baseline_throughput=9875.0,
        speedup=22314.0 / 9875.0,
        estimate=2.26,
        ci_low=1.783,
        ci_high=2.703,
        confidence=0.9972,
        futility_high=2.6,
        n_baseline=10,
        n_candidate=10,
        reason="lower bound 1.783x (typical call) clears required 1.010x at 10 pairs",
    )
    results = (compile_row, _stat("TorchEagerBackend(dtype=torch.bfloat16)"), int8)
    return TuneReport(
        run_id="r",
        module_name="mlp",
        results=results,
        decision="statistical",
        required_speedup=1.01,
        min_speedup_threshold_percent=1.0,
        selected_backend="Int8DynamicBackend()",
    )


def _text(run: TuneReport, *, verbose: bool = False, width: int = 200) -> str:
    buf = io.StringIO()
    console = Console(file=buf, width=width, force_terminal=False, color_system=None)
    print_parts(console, render_run(run, verbose=verbose))
    return buf.getvalue()


def _table_lines(text: str) -> list[str]:
    """The results table: its header line up to the blank line or the note under it."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("Backend"))
    end = next(i for i in range(start, len(lines)) if not lines[i] or "quality flags" in lines[i])
    return lines[start:end]


class TestDefaultTable:
    def test_one_line_per_candidate_and_no_per_row_level(self) -> None:
        """Three candidates, three rows of one line each: no "at 96.94%", no Quality column."""
        lines = _table_lines(_text(_docs_run()))
        header, _, *rows = lines
        assert len(rows) == 3, lines
        assert "Speedup [95% overall]" in header
        assert "Quality" not in header and "level shown" not in header
        assert not any(re.search(r"\bat \d+(\.\d+)?%", line) for line in lines)
        assert rows[0].startswith("TorchCompileBackend()")
        assert "0.97x [0.943, 0.998]" in rows[0] and "inconclusive" in rows[0]

    def test_the_reason_is_the_short_one(self) -> None:
        """Each row carries the one-line reason, never the long one or its flags."""
        run = _docs_run()
        text = _text(run)
        for r in run.results:
            assert fmt_verdict_reason(r) in text
        assert "serial correlation" not in text and "lag-1" not in text
        assert "lower bound 1.783x clears 1.010x" in text

    def test_throughput_pair_and_verdict_are_shown(self) -> None:
        (_, _, row) = _table_lines(_text(_docs_run()))[2:]
        assert "9,875" in row and "22,314" in row and "faster" in row

    def test_hidden_flags_are_announced(self) -> None:
        """A row has quality flags: one line below the table says -v shows them."""
        text = _text(_docs_run())
        assert "1 row has quality flags" in text and "-v" in text
        clean = TuneReport(run_id="r", module_name="m", results=(_stat("A()"),))
        assert "-v" not in _text(clean)

    def test_records_on_a_narrow_console_carry_the_same_fields(self) -> None:
        """On 80 columns each candidate is a block: the short reason, no quality line."""
        text = _text(_docs_run(), width=80)
        assert "reason: lower bound 1.783x clears 1.010x" in text
        assert "quality:" not in text
        assert "at 96.94%" not in text


class TestVerbose:
    def test_levels_flags_and_full_reason(self) -> None:
        """-v: the per-row levels, the Quality column and the long reason, as before."""
        text = _text(_docs_run(), verbose=True)
        assert "Speedup [accept at the level shown] 95% overall" in text
        assert "0.97x [0.943, 0.998] at 96.94%" in text
        assert "Quality" in text and "machine changed at pair" in text
        words = {w for line in text.splitlines() for w in line.split()}
        assert set(LONG_REASON.split()) <= words
        assert "quality flags" not in text  # nothing hidden: no pointer to -v

    def test_markdown_follows_the_same_split(self) -> None:
        run = _docs_run()
        short, full = markdown_run(run), markdown_run(run, verbose=True)
        assert "| Quality |" not in short and "lower bound 1.783x clears 1.010x" in short
        assert "| Quality |" in full and "lag-1 0.39" in full

    def test_tune_has_the_flag_in_its_output_group(self) -> None:
        parser: argparse.ArgumentParser = add_arguments(argparse.ArgumentParser().add_subparsers())
        (group,) = [g for g in parser._action_groups if g.title == "output"]
        flags = {s for a in group._group_actions for s in a.option_strings}
        assert {"-v", "--verbose"} <= flags
        assert parser.parse_args(["-v"]).verbose is True
        assert parser.parse_args([]).verbose is False

    @pytest.mark.parametrize("command", ["report", "sweep"])
    def test_report_and_sweep_take_it_too(self, command: str) -> None:
        from aitune_fp.cli import build_parser

        argv = [command, "x.jsonl" if command == "report" else "s.toml", "--verbose"]
        assert build_parser().parse_args(argv).verbose is True

    def test_report_shows_the_levels_only_with_v(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        fast = _stat("F()", confidence=0.9694)
        results = (_stat("A()"), fast)
        log = write_log(tmp_path, fake_log(results=results, selected="F()", outcome="candidate"))
        assert main(["report", str(log)]) == 0
        assert "at 96.94%" not in capsys.readouterr().out
        assert main(["report", str(log), "-v"]) == 0
        assert "at 96.94%" in capsys.readouterr().out


class TestLightningLine:
    def test_the_line_shows_the_rows_figure_and_interval(self) -> None:
        """The ⚡ line's speedup is the row's cell, figure and interval, with the same level."""
        run = _docs_run()
        (_, _, row) = _table_lines(_text(run))[2:]
        line = final_line(run).plain
        cell = fmt_headline(run.results[-1])
        assert cell in row
        assert f"| speedup: {cell} (95% overall; eager 9,875 → 22,314 samples/s)" in line
        assert line.count("x") == cell.count("x")  # no second speedup figure

    def test_point_mode_shows_aitunes_figure_on_both(self) -> None:
        r = fake_result(
            "P()",
            estimate=None,
            ci_low=None,
            ci_high=None,
            confidence=None,
            decision="point",
            verdict="faster",
        )
        run = TuneReport(run_id="r", module_name="m", results=(r,), selected_backend="P()")
        assert "| speedup: 1.37x (eager 4,061 → 5,631 samples/s)" in final_line(run).plain
        assert "1.37x" in _text(run)

    @given(
        estimate=st.floats(1.02, 50.0),
        below=st.floats(0.0, 0.5),
        above=st.floats(0.0, 5.0),
        level=st.sampled_from([0.9, 0.95, 0.99]),
    )
    def test_any_faster_row_reads_the_same_on_the_line(
        self, estimate: float, below: float, above: float, level: float
    ) -> None:
        low = max(1.011, estimate - below)
        r = _stat(
            "F()",
            estimate=max(estimate, low),
            ci_low=low,
            ci_high=max(estimate, low) + above,
            guarantee=level,
        )
        run = TuneReport(run_id="r", module_name="m", results=(r,), selected_backend="F()")
        line = final_line(run).plain
        assert f"| speedup: {fmt_headline(r)} (" in line
        assert fmt_headline(r) in _text(run)
