"""Specs of issue 12, finding by finding: what a user reads agrees with the verdict; clean exits.

Synthetic event logs are built with the library's own event builders, so ``report`` reads what
``tune --json-log`` writes. Pipes are real subprocesses whose reader is gone before they write.
"""

from __future__ import annotations

import json
import math
import os
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aitune_fp.cli import main
from aitune_fp.cli.rendering import final_line, measured_line, render_run
from aitune_fp.core.messages import (
    fmt_apart,
    fmt_headline,
    fmt_verdict_reason,
    headline_speedup,
)
from aitune_fp.core.report import TuneReport
from tests.factories import fake_log, fake_result, flat_result, write_log

ENV = {**os.environ, "NO_COLOR": "1", "PYTHONIOENCODING": "utf-8"}
ENV.pop("FORCE_COLOR", None)
PACKAGE = Path(__file__).resolve().parent.parent / "aitune_fp"


def _closed_pipe(*args: str) -> subprocess.CompletedProcess[bytes]:
    """Run the CLI with a stdout whose reader is already gone (as ``| head -0`` leaves it)."""
    read, write = os.pipe()
    os.close(read)
    try:
        return subprocess.run(
            [sys.executable, "-m", "aitune_fp", *args],
            stdout=write,
            stderr=subprocess.PIPE,
            env=ENV,
            timeout=120,
            check=False,
        )
    finally:
        os.close(write)


class TestHeadline:
    """1. One figure per result, the one the verdict was decided on, everywhere it is read."""

    def test_statistical_headline_is_the_estimate_with_its_interval(self) -> None:
        """The estimate and its bounds, never the mean ratio next to an interval it is not in."""
        r = fake_result()
        assert headline_speedup(r) == 0.95
        assert fmt_headline(r) == "0.95x [0.892, 0.999]"
        assert "1.37" not in measured_line(r)
        assert "0.95x [0.892, 0.999] → not_faster" in measured_line(r)

    def test_point_mode_shows_aitunes_figure(self) -> None:
        """Point mode has no interval: AITune's mean-latency speedup is the figure."""
        r = fake_result(estimate=None, ci_low=None, ci_high=None, confidence=None, decision="point")
        assert headline_speedup(r) == 1.37
        assert fmt_headline(r) == "1.37x"

    def test_no_decision_shows_no_figure(self) -> None:
        """A statistical result settled by no look (budget spent) shows no speedup at all."""
        r = fake_result(estimate=None, ci_low=None, ci_high=None, verdict="inconclusive")
        assert headline_speedup(r) is None
        assert fmt_headline(r) == "—"

    def test_report_table_and_selected_line_use_the_estimate(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """The table row and the ⚡ line show the estimate; 1.37x only as the mean ratio beside it."""
        fast = fake_result("F()", estimate=1.52, ci_low=1.44, ci_high=1.61, verdict="faster")
        path = write_log(
            tmp_path,
            fake_log(results=(fake_result(), fast), selected="F()", outcome="candidate"),
        )
        assert main(["report", str(path)]) == 0
        out = capsys.readouterr().out
        assert out.count("1.37x") == 1 and "1.37x by mean throughput)" in out
        assert "0.95x [0.892, 0.999]" in out
        last = out.strip().splitlines()[-1]
        assert last.startswith("⚡ mlp | backend: F() | speedup: 1.52x [1.440, 1.610] (98% CI;")
        assert last.endswith(", 1.37x by mean throughput)")  # outside the interval: said

    def test_json_keeps_the_mean_ratio_as_speedup(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """JSON keeps AITune's ``speedup`` (mean ratio) and the ``estimate`` beside it."""
        path = write_log(tmp_path, fake_log(results=(fake_result(),)))
        assert main(["report", str(path), "--format", "json"]) == 0
        (result,) = json.loads(capsys.readouterr().out)["runs"][0]["results"]
        assert (result["speedup"], result["decided"]["estimate"]) == (1.37, 0.95)


class TestBaselineFigure:
    """2. The eager figure quoted for the selected baseline is the one timed with the rows."""

    def test_selected_line_quotes_eager_timed_alongside(self) -> None:
        """Up-front 518 samples/s, rows 4,061: the final line quotes 4,061 and says so."""
        report = TuneReport(
            run_id="r",
            module_name="m",
            baseline_throughput=518.0,
            results=(fake_result(),),
            selected_backend="TorchEagerBackend()",
            selected_is_baseline=True,
        )
        line = final_line(report).plain
        assert "eager timed alongside the candidates: 4,061 samples/s" in line
        assert "518" not in line

    def test_without_rows_the_upfront_figure_is_labelled_with_its_time(self) -> None:
        """No measured candidate: the up-front figure, labelled as such, with its time."""
        report = TuneReport(
            run_id="r",
            module_name="m",
            baseline_throughput=518.0,
            selected_backend="TorchEagerBackend()",
            selected_is_baseline=True,
        )
        line = final_line(report, baseline_at="2025-01-02 12:00:01 UTC").plain
        assert line.endswith("(up-front check at 2025-01-02 12:00:01 UTC: 518 samples/s)")

    @pytest.mark.parametrize("decision", ["statistical", "point"])
    def test_header_quotes_one_eager_rate(self, decision: str) -> None:
        """Issue 47: the statistical header leaves out the up-front mean-latency rate (8,889
        samples/s) the budget's median call (870 µs) contradicts; point mode, whose rows compare
        with that very figure, keeps it."""
        report = TuneReport(
            run_id="r",
            module_name="m",
            batch_size=32,
            baseline_throughput=8889.0,
            decision=decision,
            budget_plan="eager 870 µs a call in blocks of 14 calls: enough"
            if decision == "statistical"
            else None,
        )
        head = render_run(report, baseline_at="2025-01-02 12:00:01 UTC")[0].plain  # type: ignore[union-attr]
        assert head.startswith("Eager baseline: eager, batch size 32; up-front check at 2025-01-02")
        assert ("8,889" in head) == (decision == "point")


class TestWhatTheVerdictIsAbout:
    """The header says the quantity each row's verdict was decided on, as the result records it."""

    @pytest.mark.parametrize(
        ("quantity", "block", "said"),
        [
            ("throughput", 17, "throughput, timed in blocks of up to 17 calls"),
            ("throughput", 1, "throughput, timed one call a block (a long call)"),
            ("typical", 1, "the typical call, timed one call at a time"),
            (None, 17, "throughput, timed in blocks of up to 17 calls"),  # a version-3 log
            (None, 1, "the typical call, timed one call at a time"),
        ],
    )
    def test_header_names_the_recorded_quantity(
        self, quantity: str | None, block: int, said: str
    ) -> None:
        """A long call has one-call blocks and its verdict is still about throughput: the block
        size alone said "the typical call" for it; only logs without the quantity infer it."""
        result = fake_result(quantity=quantity, latencies_block=block)
        report = TuneReport(run_id="r", module_name="m", decision="statistical", results=(result,))
        text = "\n".join(x.plain for x in render_run(report) if hasattr(x, "plain"))
        assert f"decided on ({said})" in text, text


@pytest.mark.slow
class TestEagerFailureStopsTheTune:
    """3. A bad input that reaches the model: one line, exit 2, no candidate built."""

    def test_one_line_and_no_candidate(
        self,
        tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str],
    ) -> None:
        """--input-shape 8,255 for a 256-wide model stops before any candidate is made."""
        from aitune_fp.backends import registry

        def no_candidates(*args: object) -> None:
            raise AssertionError("a candidate was built after eager failed")

        monkeypatch.setattr(registry, "make_backend", no_candidates)
        path = tmp_path / "mine.py"
        path.write_text("import torch\ndef make():\n    return torch.nn.Linear(256, 256)\n")
        argv = ["tune", "--model", f"{path}:make", "--input-shape", "8,255"]
        assert main([*argv, "--cache-dir", str(tmp_path / "c")]) == 2
        captured = capsys.readouterr()
        (line,) = captured.err.strip().splitlines()
        assert line.startswith("aitune-fp: error: the eager baseline failed on this model")
        assert "--input-shape 8,255" in line
        assert "8x255" in line
        assert f"(log under {tmp_path / 'c'})" in line  # where the build log went
        assert captured.out == ""


class TestBrokenPipe:
    """4. A reader that goes away is not an error: exit 141, nothing on stderr, no error log."""

    def test_report_into_closed_pipe(self, tmp_path: Path) -> None:
        """``report x.jsonl | head -0``: 141, quiet."""
        path = write_log(tmp_path, fake_log(results=(fake_result(),)))
        proc = _closed_pipe("report", str(path))
        assert proc.returncode == 141
        assert proc.stderr == b""

    @pytest.mark.parametrize("fmt", ["table", "json"])
    def test_check_into_closed_pipe_is_not_not_met(self, fmt: str) -> None:
        """``check ... | head -0`` never exits 1 (which means "not met" for check)."""
        proc = _closed_pipe("check", "--baseline", "100", "--candidate", "50", "--format", fmt)
        assert proc.returncode == 141
        assert proc.stderr == b""


class TestFailuresReadable:
    """5. Long reasons wrap inside the table; each failure's text is shown once."""

    def test_long_reason_wrapped_and_shown_once(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """A 400-character reason: no line over the table width, the strategy not a row."""
        reason = "torch._dynamo failed: " + " ".join(["something went wrong"] * 19)
        lines = fake_log(
            failures=(("C()", reason), ("S", "NoValidBackendError: no candidate passed")),
            selected=None,
            outcome="error",
        )
        assert main(["report", str(write_log(tmp_path, lines))]) == 0
        out = capsys.readouterr().out
        assert max(len(line) for line in out.splitlines()) <= 160
        assert out.count("torch._dynamo failed") == 1
        rows = out.split("Failed candidates:")[1].splitlines()
        assert not any(row.startswith("S ") for row in rows)
        assert out.strip().splitlines()[-1].startswith("❌ No backend was selected: the strategy")

    def test_error_message_first_line_only(self) -> None:
        """NoValidBackendError's multi-line text (every candidate again) is shown by its head."""
        report = TuneReport(run_id="r", module_name="m")
        text = final_line(report, error="no valid backend for m\n  C(): failed at build").plain
        assert text == (
            "❌ No backend was selected: no valid backend for m "
            "(each candidate's reason is in the tables above)"
        )


class TestQualityFlags:
    """6. Measurement-quality flags reach the table and stderr, in words."""

    def test_table_has_quality_column(self, capsys: pytest.CaptureFixture[str]) -> None:
        """warmup_not_steady and a level shift are named in the Quality column."""
        from aitune_fp.cli._shared import make_console
        from aitune_fp.cli.plain import print_parts

        r = fake_result(flags=("warmup_not_steady", "level_shift_after_pair_12"))
        report = TuneReport(run_id="r", module_name="m", results=(r,))
        print_parts(make_console(sys.stdout), render_run(report))
        out = capsys.readouterr().out
        assert "Quality" not in out and "1 row has quality flags" in out  # behind -v
        print_parts(make_console(sys.stdout), render_run(report, verbose=True))
        out = capsys.readouterr().out
        assert "Quality" in out
        assert "warm-up not steady" in out
        assert "level shift at pair 12" in out
        assert "quality: warm-up not steady, level shift at pair 12" in measured_line(r)

    def test_a_machine_that_moved_is_named(self) -> None:
        """Issue 36's flags in words: the machine busy, changed at a pair, slowed; carry-over."""
        from aitune_fp.cli.rows import fmt_flags

        flags = ("machine_busy", "machine_changed_at_pair_40", "machine_slowed", "carryover")
        assert fmt_flags(flags) == (
            "machine busy, machine changed at pair 40, machine slowed, carryover"
        )
        assert fmt_flags(("retimed_7",)) == "7 pairs timed again (another process had a core)"


class TestNumericEdges:
    """7. Extreme numbers: one line and exit 2, or a correct answer; never a crash or 300 digits."""

    def test_overflowing_throughputs(self, capsys: pytest.CaptureFixture[str]) -> None:
        """1e308 / 1e-320 overflows: exit 2 naming the flags."""
        assert main(["check", "--baseline", "1e-320", "--candidate", "1e308"]) == 2
        (line,) = capsys.readouterr().err.strip().splitlines()
        assert "--candidate / --baseline" in line

    def test_huge_latencies_decide(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """Latency files of 1e308 values are compared like any other (scale-free decision)."""
        (tmp_path / "b.txt").write_text("1e308\n1.1e308\n0.9e308\n1e308\n")
        (tmp_path / "c.txt").write_text("5e307\n5.5e307\n4.5e307\n5e307\n")
        argv = ["--baseline-times", str(tmp_path / "b.txt")]
        argv += ["--candidate-times", str(tmp_path / "c.txt"), "--unpaired"]
        assert main(["check", *argv]) in (0, 3)
        assert "\nverdict: " in capsys.readouterr().out

    def test_span_beyond_float_range(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """1e-320 next to 1e308: exit 2 with one line."""
        (tmp_path / "b.txt").write_text("1e-320\n1e308\n")
        (tmp_path / "c.txt").write_text("1\n2\n")
        argv = ["--baseline-times", str(tmp_path / "b.txt")]
        assert main(["check", *argv, "--candidate-times", str(tmp_path / "c.txt")]) == 2
        assert len(capsys.readouterr().err.strip().splitlines()) == 1

    def test_huge_threshold_is_short(self, capsys: pytest.CaptureFixture[str]) -> None:
        """--threshold 1e300 is refused (no candidate could pass), named in scientific notation."""
        assert main(["check", "--baseline", "1", "--candidate", "2", "--threshold", "1e300"]) == 2
        err = capsys.readouterr().err
        assert "--threshold 1e+300" in err
        assert "0" * 20 not in err

    @pytest.mark.parametrize(
        ("value", "other", "expected"),
        [
            (1.0096, 1.01, ("1.0096", "1.0100")),
            (0.958, 1.01, ("0.958", "1.010")),
            (1.01, 1.01, ("1.010", "1.010")),
        ],
    )
    def test_compared_numbers_read_differently(
        self, value: float, other: float, expected: tuple[str, str]
    ) -> None:
        """ "upper bound 1.010x is below required 1.010x" cannot be printed any more."""
        assert fmt_apart(value, other) == expected


class TestFlagsAndInputs:
    """8. Messages name flags; no flag silently ignored; check --format json; BOM; plots."""

    @pytest.mark.parametrize(
        ("argv", "match"),
        [
            (["--max-seconds", "0"], "--max-seconds"),
            (["--decision", "point", "--steps", "0"], "--steps"),
            (["--steps", "5"], "--steps applies to --decision point only"),
            (["--warmup-calls", "5"], "--warmup-calls applies to --decision point only"),
            (["--decision", "point", "--looks", "10,20"], "--looks applies to --decision"),
            (["--decision", "point", "--max-pairs", "20"], "--max-pairs applies to"),
            (["--looks", "10,20", "--max-pairs", "40"], "--max-pairs 40 (an old name"),
            (["--batch-size", "0"], "--batch-size must be an integer from 1"),
            (["--confidence", "1.5"], "--confidence"),
        ],
    )
    def test_tune_flags_named(
        self, argv: list[str], match: str, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """A bad or inapplicable tune flag: exit 2, one line naming the flag, no field name."""
        assert main(["tune", "--backends", "eager", *argv]) == 2
        (line,) = capsys.readouterr().err.strip().splitlines()
        assert match in line
        for field in ("max_seconds", "point_steps", "point_warmup_calls"):
            assert field not in line

    @pytest.mark.parametrize("flag", [["--paired"], ["--confidence", "0.9"]])
    def test_check_refuses_flags_for_latencies_with_throughputs(
        self, flag: list[str], capsys: pytest.CaptureFixture[str]
    ) -> None:
        """--paired and --confidence do nothing with plain numbers: refused."""
        assert main(["check", "--baseline", "1", "--candidate", "2", *flag]) == 2
        assert f"{flag[0]} applies to --baseline-times" in capsys.readouterr().err

    def test_too_few_latencies_names_flag_and_file(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """One latency: the message names --baseline-times and the file, not baseline_times."""
        (tmp_path / "one.txt").write_text("0.01\n")
        (tmp_path / "two.txt").write_text("0.01\n0.02\n")
        argv = ["--baseline-times", str(tmp_path / "one.txt")]
        assert main(["check", *argv, "--candidate-times", str(tmp_path / "two.txt")]) == 2
        err = capsys.readouterr().err
        assert "--baseline-times" in err and "one.txt" in err and "baseline_times" not in err

    def test_check_json(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """check --format json: one document, for throughputs and for latency files."""
        assert main(["check", "--baseline", "100", "--candidate", "112", "--format", "json"]) == 0
        doc = json.loads(capsys.readouterr().out)
        assert (doc["command"], doc["met"], doc["speedup"]) == ("check", True, 1.12)
        (tmp_path / "b.txt").write_text("\n".join(str(0.01 + i * 1e-4) for i in range(12)))
        (tmp_path / "c.txt").write_text("\n".join(str(0.005 + i * 1e-4) for i in range(12)))
        argv = ["--baseline-times", str(tmp_path / "b.txt")]
        argv += ["--candidate-times", str(tmp_path / "c.txt"), "--paired", "--format", "json"]
        assert main(["check", *argv]) == 0
        doc = json.loads(capsys.readouterr().out)
        assert doc["verdict"] == "faster"
        assert doc["method"] == "wilcoxon_signed_rank_hl"

    def test_bom_accepted(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """A UTF-8 BOM (Windows editors) in a latency file and in an event log is fine."""
        (tmp_path / "b.txt").write_bytes(b"\xef\xbb\xbf0.010\n0.011\n0.0105\n0.0102\n")
        (tmp_path / "c.txt").write_bytes(b"\xef\xbb\xbf[0.005, 0.0051, 0.0052, 0.0049]")
        argv = ["--baseline-times", str(tmp_path / "b.txt")]
        argv += ["--unpaired"]
        assert main(["check", *argv, "--candidate-times", str(tmp_path / "c.txt")]) != 2
        log = tmp_path / "bom.jsonl"
        log.write_bytes(b"\xef\xbb\xbf" + "\n".join(fake_log()).encode())
        assert main(["report", str(log)]) == 0
        assert "were not aitune_fp events" not in capsys.readouterr().err

    def test_report_on_a_non_log_exits_2_without_plot(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """A file with no aitune_fp event: exit 2, one line, no (empty) plot written."""
        path = tmp_path / "notes.txt"
        path.write_text("hello\nworld\n")
        target = tmp_path / "p.png"
        assert main(["report", str(path), "--plot", str(target)]) == 2
        (line,) = capsys.readouterr().err.strip().splitlines()
        assert "no aitune_fp events" in line
        assert not target.exists()
        (tmp_path / "empty.jsonl").write_text("")
        assert main(["report", str(tmp_path / "empty.jsonl")]) == 2

    def test_plot_of_many_runs_stays_narrow(self, tmp_path: Path) -> None:
        """Ten runs: rows grow downwards, one panel per module; the PNG is not 2760 px wide."""
        lines = [
            line
            for i in range(10)
            for line in fake_log(f"run{i}", results=(fake_result("A()"), fake_result("B()")))
        ]
        target = tmp_path / "many.png"
        assert main(["report", str(write_log(tmp_path, lines)), "--plot", str(target)]) == 0
        width, height = struct.unpack(">II", target.read_bytes()[16:24])
        assert width <= 1000
        assert height >= 20 * 30  # twenty labelled rows, each readable


class TestReportInputs:
    """9. report: integral floats, non-JSON numbers, control characters, a run seen twice."""

    def test_integral_floats(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """``"batch_size": 32.0`` (schema-valid) is read as 32 in the table and in JSON."""
        lines = [line.replace('"batch_size": 32', '"batch_size": 32.0') for line in fake_log()]
        assert any('"batch_size": 32.0' in line for line in lines)
        path = write_log(tmp_path, lines)
        assert main(["report", str(path)]) == 0
        assert "batch size 32;" in capsys.readouterr().out
        assert main(["report", str(path), "--format", "json"]) == 0
        assert json.loads(capsys.readouterr().out)["runs"][0]["batch_size"] == 32

    def test_overflowing_number_is_a_bad_line_and_json_stays_json(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """1e400 is refused as a bad line; --format json never writes Infinity."""
        lines = fake_log()
        lines[-1] = lines[-1].replace('"duration_s": 2.0', '"duration_s": 1e400')
        assert main(["report", str(write_log(tmp_path, lines)), "--format", "json"]) == 0
        captured = capsys.readouterr()
        assert "Infinity" not in captured.out

        def strict(name: str) -> None:
            raise ValueError(name)

        json.loads(captured.out, parse_constant=strict)
        assert "beyond float range" in captured.err

    @pytest.mark.parametrize("fmt", ["table", "json"])
    def test_control_characters_escaped(
        self, tmp_path: Path, fmt: str, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """U+202E, U+009B and ESC from a log never reach the terminal raw, in either format."""
        evil = "Evil\u202e\x9b\x1b[2J()"
        path = write_log(tmp_path, fake_log(results=(fake_result(evil),), selected=None))
        assert main(["report", str(path), "--format", fmt]) == 0
        out = capsys.readouterr().out
        for ch in ("\u202e", "\x9b", "\x1b"):
            assert ch not in out
        if fmt == "json":
            doc = json.loads(out)
            assert doc["runs"][0]["results"][0]["backend_description"] == evil

    def test_run_seen_twice(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """The same run appended twice: a warning on stderr and its results counted once."""
        once = fake_log(results=(fake_result(),))
        path = write_log(tmp_path, once + once)
        assert main(["report", str(path), "--format", "json"]) == 0
        captured = capsys.readouterr()
        (run,) = json.loads(captured.out)["runs"]
        assert len(run["results"]) == 1
        assert "appears more than once" in captured.err
        assert f"{len(once)} repeated events left out" in captured.err


class TestPackage:
    """11. The CLI is a small package on rich: no module over ~400 lines, no hand-made ANSI."""

    def test_modules_small_and_without_ansi(self) -> None:
        """Every module of aitune_fp/cli is under 400 lines and writes no escape codes itself."""
        for path in sorted((PACKAGE / "cli").glob("*.py")):
            text = path.read_text(encoding="utf-8")
            assert len(text.splitlines()) < 400, path.name
            assert "\\033[" not in text and "\\x1b[" not in text, path.name

    def test_library_never_imports_rich(self) -> None:
        """``import aitune_fp`` and the pure API load neither rich nor torch; only cli/ names rich.

        (structlog loads rich on its own when it is installed; the library's modules never ask.)
        """
        code = (
            "import sys, aitune_fp\n"
            "from aitune_fp import compute_speedup, decide_speedup, fmt_speedup_msg_short\n"
            "import aitune_fp.core.messages\n"
            "assert 'rich' not in sys.modules, 'rich imported'\n"
            "assert 'torch' not in sys.modules, 'torch imported'\n"
        )
        proc = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=False
        )
        assert proc.returncode == 0, proc.stderr
        for path in PACKAGE.rglob("*.py"):
            if "cli" not in path.relative_to(PACKAGE).parts:
                text = path.read_text(encoding="utf-8")
                assert "import rich" not in text and "from rich" not in text, path

    @pytest.mark.parametrize(
        ("env", "coloured"),
        [({"FORCE_COLOR": "1"}, True), ({"NO_COLOR": "1", "FORCE_COLOR": "1"}, False), ({}, False)],
    )
    def test_colour_follows_rich(self, env: dict[str, str], coloured: bool) -> None:
        """FORCE_COLOR colours a pipe, NO_COLOR wins, a plain pipe gets none (rich decides)."""
        base = {k: v for k, v in ENV.items() if k not in ("NO_COLOR", "FORCE_COLOR")}
        proc = subprocess.run(
            [sys.executable, "-m", "aitune_fp", "check", "--baseline-times", "/dev/null"],
            capture_output=True,
            text=True,
            env={**base, **env},
            check=False,
        )
        assert proc.returncode == 2  # usage errors stay plain
        code = (
            "import sys\nfrom aitune_fp.cli.plain import print_parts\n"
            "from aitune_fp.cli._shared import make_console\nfrom rich.text import Text\n"
            "print_parts(make_console(sys.stdout), [Text('x', style='red')])\n"
        )
        proc = subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            env={**base, **env},
            check=False,
        )
        assert proc.returncode == 0, proc.stderr
        assert ("\x1b[" in proc.stdout) is coloured


class TestNarrowTerminal:
    @pytest.mark.parametrize("verbose", [False, True])
    @pytest.mark.parametrize("width", [80, 100, 130])
    def test_the_results_table_wraps_instead_of_cropping(self, width: int, verbose: bool) -> None:
        """Every word of a reason (-v: the long one) is printed whole, at any terminal width."""
        import io

        from rich.console import Console

        from aitune_fp.cli.plain import print_parts
        from aitune_fp.cli.rendering import render_run
        from aitune_fp.core.report import TuneReport

        reason = "lower bound 1.323x clears required 1.010x at 10 pairs"
        result = flat_result(
            "TorchEagerBackend(dtype=torch.bfloat16)",
            35242.0,
            24330.0,
            1.45,
            True,
            estimate=1.45,
            ci_low=1.323,
            ci_high=1.594,
            confidence=0.98,
            n_baseline=10,
            n_candidate=10,
            batch_size=32,
            required_speedup=1.01,
            verdict="faster",
            decision="statistical",
            reason=reason,
            flags=("warmup_not_steady",),
        )
        run = TuneReport(run_id="r", module_name="mlp", results=(result,), decision="statistical")
        buf = io.StringIO()
        console = Console(file=buf, width=width, force_terminal=True, color_system=None)
        print_parts(console, render_run(run, verbose=verbose))
        lines = buf.getvalue().splitlines()
        assert max(len(line) for line in lines) <= width
        words = {w for line in lines for w in line.split()}
        shown = reason if verbose else fmt_verdict_reason(result)
        assert set(shown.split()) <= words


class TestHeadAndFinalLine:
    def _render(self, run: Any, error: str | None = None) -> str:
        import io

        from rich.console import Console

        from aitune_fp.cli.plain import print_parts
        from aitune_fp.cli.rendering import render_run

        buf = io.StringIO()
        console = Console(file=buf, width=160, force_terminal=False, color_system=None)
        print_parts(console, render_run(run, error=error))
        return buf.getvalue()

    def test_point_mode_says_eager_was_measured_once(self) -> None:
        """In point mode the head does not claim eager was timed alongside each candidate."""
        from aitune_fp.core.report import TuneReport

        result = flat_result(
            "X()", 200.0, 100.0, 2.0, True, batch_size=8, verdict="faster", decision="point"
        )
        text = self._render(
            TuneReport(run_id="r", module_name="m", results=(result,), decision="point")
        )
        assert "measured once up front" in text
        assert "timed alongside" not in text

    def test_the_gate_line_says_under_what_its_level_holds(self) -> None:
        """The wrong-accept level holds for independent or moderately correlated timings (as
        docs/guarantees.md's simulations show): the header says so and where."""
        from aitune_fp.core.report import TuneReport

        result = fake_result("X()", guarantee=0.95, required_speedup=1.01)
        run = TuneReport(
            run_id="r",
            module_name="m",
            results=(result,),
            decision="statistical",
            required_speedup=1.01,
            min_speedup_threshold_percent=1.0,
        )
        text = " ".join(self._render(run).split())  # the header wraps
        gate = text.split("Gate:", 1)[1].split("Each row", 1)[0]
        assert (
            "at most 5% over all looks for independent or moderately correlated timings: "
            "docs/guarantees.md" in gate
        )

    def test_no_backend_line_does_not_end_on_a_colon(self) -> None:
        """FirstWins' multi-line error: the final line says where the reasons are."""
        from aitune_fp.core.report import TuneReport

        error = "There is no valid backend for module 'm':\n- A(): build: boom"
        text = self._render(TuneReport(run_id="r", module_name="m", outcome="error"), error=error)
        line = next(x for x in text.splitlines() if "No backend was selected" in x)
        assert not line.rstrip().endswith(":")
        assert "reason is in the tables above" in line


class TestMeanApart:
    """The ⚡ line says the throughput ratio when it lies outside the typical-call interval."""

    def _line(self, **fields: Any) -> str:
        base: dict[str, Any] = {
            "passed": True,
            "verdict": "faster",
            "baseline_throughput": 2144.0,
            "throughput": 2518.0,
            "speedup": 2518.0 / 2144.0,
            "estimate": 3.39,
            "ci_low": 1.182,
            "ci_high": 14.282,
            "reason": "lower bound 1.182x clears required 1.010x at 20 pairs",
        }
        report = TuneReport(
            run_id="r",
            module_name="m",
            results=(fake_result("B()", **{**base, **fields}),),
            selected_backend="B()",
        )
        return final_line(report).plain

    def test_a_ratio_below_the_interval_is_named_beside_it(self) -> None:
        """3.39x [1.182, 14.282] beside 2,144 → 2,518: the line also says 1.17x by mean."""
        line = self._line()
        assert "speedup: 3.39x [1.182, 14.282] (98% CI; eager 2,144 → 2,518 samples/s" in line
        assert line.endswith(", 1.17x by mean throughput)")

    def test_a_ratio_inside_the_interval_adds_nothing(self) -> None:
        """When the figures agree the line is as before."""
        assert "by mean" not in self._line(speedup=1.5, throughput=2144.0 * 1.5)


@given(
    ratio=st.floats(0.01, 100.0),
    low=st.floats(0.01, 100.0),
    width=st.floats(0.0, 100.0) | st.just(math.inf),
)
def test_mean_apart_speaks_exactly_when_outside(ratio: float, low: float, width: float) -> None:
    """Non-empty exactly when the ratio is below ``low`` or above ``high``, and it names it."""
    from aitune_fp.core.messages import fmt_mean_apart

    high = low + width
    text = fmt_mean_apart(ratio, low, high)
    assert bool(text) == (ratio < low or ratio > high)
    if text:
        assert text == f", {ratio:.2f}x by mean throughput"
    assert fmt_mean_apart(ratio, None, None) == ""
