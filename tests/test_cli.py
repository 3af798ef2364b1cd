"""The ``aitune-fp`` command line, end to end through ``python -m aitune_fp`` and in-process."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from aitune_fp.cli import main
from aitune_fp.cli._shared import escape_control
from aitune_fp.cli.check import parse_times
from aitune_fp.events.candidates import CandidateMeasured
from aitune_fp.events.ingest import event_schema
from tests.cli_checks import usage_error
from tests.factories import flat_result

ENV = {**os.environ, "NO_COLOR": "1", "PYTHONIOENCODING": "utf-8"}
ENV.pop("FORCE_COLOR", None)
#: The smallest real tune: eager against eager (nothing to compile), two short looks.
TINY = ["--backends", "eager", "--max-seconds", "5", "--looks", "10,20"]


def _run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "aitune_fp", *args],
        capture_output=True,
        text=True,
        env=ENV,
        cwd=cwd,
        timeout=300,
        check=False,
    )


@pytest.fixture(scope="module")
def tune_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One table-format and one JSON-format tune on the default model, each with a JSON log."""
    base = tmp_path_factory.mktemp("tune")
    table_log, json_log = base / "table.jsonl", base / "json.jsonl"
    table = _run("tune", *TINY, "--json-log", str(table_log), "--cache-dir", str(base / "c1"))
    as_json = _run(
        "tune",
        *TINY,
        "--json-log",
        str(json_log),
        "--format",
        "json",
        "--cache-dir",
        str(base / "c2"),
    )
    return {"table": table, "json": as_json, "table_log": table_log, "json_log": json_log}


@pytest.mark.slow
class TestTune:
    def test_table_and_final_line(self, tune_runs: dict[str, Any]) -> None:
        """The default model tunes; stdout has the baseline, the table and the final line."""
        proc = tune_runs["table"]
        assert proc.returncode == 0, proc.stderr
        lines = proc.stdout.strip().splitlines()
        assert lines[0].startswith("Eager baseline: TorchEagerBackend(), batch size 32; ")
        assert any(
            line.startswith("Backend") and "Verdict" in line and "Reason" in line for line in lines
        )
        assert any(line.startswith("TorchEagerBackend()") for line in lines)
        assert lines[-1].startswith(("ℹ️ Baseline was selected: ", "⚡ mlp | backend: "))

    def test_progress_goes_to_stderr_only(self, tune_runs: dict[str, Any]) -> None:
        """Progress and event summaries are on stderr (plain lines: not a TTY), not on stdout."""
        proc = tune_runs["table"]
        assert "📊 Eager baseline: batch size=32" in proc.stderr
        assert "⏳" in proc.stderr
        assert "\r" not in proc.stderr
        assert "📊" not in proc.stdout
        assert "\033[" not in proc.stdout  # NO_COLOR

    def test_json_stdout_is_one_document(self, tune_runs: dict[str, Any]) -> None:
        """--format json: stdout is exactly one JSON document with the run's results."""
        proc = tune_runs["json"]
        assert proc.returncode == 0, proc.stderr
        doc = json.loads(proc.stdout)
        assert doc["command"] == "tune"
        run = doc["run"]
        assert run["module_name"] == "mlp"
        assert [r["backend_description"] for r in run["results"]] == ["TorchEagerBackend()"]
        assert run["selected_backend"] is not None

    @pytest.mark.parametrize("which", ["table_log", "json_log"])
    def test_json_log_lines_validate(self, tune_runs: dict[str, Any], which: str) -> None:
        """Every --json-log line is an event that validates, with an ISO UTC timestamp and level."""
        validator = jsonschema.Draft202012Validator(event_schema())
        lines = Path(tune_runs[which]).read_text(encoding="utf-8").splitlines()
        names = set()
        for line in lines:
            event = json.loads(line)
            validator.validate(event)
            assert event["timestamp"].endswith("Z")
            assert event["level"] in {"debug", "info", "warning", "error"}
            names.add(event["event"].rsplit(".", 1)[-1])
        assert {
            "started",
            "baseline_measured",
            "candidate_measured",
            "selected",
            "finished",
        } <= names
        assert len({json.loads(line)["run_id"] for line in lines}) == 1

    def test_report_reproduces_results(self, tune_runs: dict[str, Any]) -> None:
        """report on the JSON log gives the same results and selection as tune's JSON document."""
        proc = _run("report", str(tune_runs["json_log"]), "--format", "json")
        assert proc.returncode == 0, proc.stderr
        report = json.loads(proc.stdout)
        tuned = json.loads(tune_runs["json"].stdout)["run"]
        (run,) = report["runs"]
        assert run["results"] == tuned["results"]
        for key in ("run_id", "selected_backend", "selected_is_baseline", "baseline_throughput"):
            assert run[key] == tuned[key], key
        assert report["bad_lines"] == []

    def test_report_table_matches_tune_table(self, tune_runs: dict[str, Any]) -> None:
        """report's table for the table run's log repeats tune's table lines and final line."""
        proc = _run("report", str(tune_runs["table_log"]))
        assert proc.returncode == 0, proc.stderr
        tuned = tune_runs["table"].stdout.strip().splitlines()
        reported = proc.stdout.strip().splitlines()
        assert reported[1:] == tuned

    def test_user_model_from_file(self, tmp_path: Path) -> None:
        """--model file.py:factory with --input-shape tunes the user's module."""
        path = tmp_path / "mine.py"
        path.write_text("import torch\ndef make():\n    return torch.nn.Linear(64, 64)\n")
        proc = _run(
            "tune",
            "--model",
            f"{path}:make",
            "--input-shape",
            "8,64",
            *TINY,
            "--format",
            "json",
            "-q",
        )
        assert proc.returncode == 0, proc.stderr
        run = json.loads(proc.stdout)["run"]
        assert run["module_name"] == "make"
        assert run["batch_size"] == 8

    def test_broken_user_model_exits_2(self, tmp_path: Path) -> None:
        """A user model file that does not import: exit 2, one readable line, no traceback."""
        path = tmp_path / "broken.py"
        path.write_text("def make(:\n")
        proc = _run("tune", "--model", f"{path}:make", "--input-shape", "1,4", *TINY)
        assert proc.returncode == 2
        assert "Traceback" not in proc.stderr
        (line,) = proc.stderr.strip().splitlines()
        assert line.startswith("aitune-fp: error: importing model file")
        assert "SyntaxError" in line
        assert proc.stdout == ""


@pytest.mark.slow
class TestModelThatCannotRun:
    def test_eager_failure_exits_2(self, tmp_path: Path) -> None:
        """A model eager cannot run on the given input: exit 2 and a line saying so, not success."""
        path = tmp_path / "mine.py"
        path.write_text("import torch\ndef make():\n    return torch.nn.Linear(64, 64)\n")
        proc = _run(
            "tune",
            "--model",
            f"{path}:make",
            "--input-shape",
            "8,32",
            *TINY,
            "-q",
            "--cache-dir",
            str(tmp_path / "cache"),
        )
        assert proc.returncode == 2, proc.stderr
        assert "the eager baseline failed on this model and input" in proc.stderr
        assert "Baseline was selected" not in proc.stdout
        assert "Traceback" not in proc.stderr


class TestTuneUsageErrors:
    @pytest.mark.parametrize(
        ("args", "match"),
        [
            (["--backends", "warp-drive"], "unknown backend 'warp-drive'"),
            (["--backends", "eager", "--looks", "20,10"], "strictly increasing"),
            (["--backends", "eager", "--threshold", "-150"], "> -100"),
            (["--model", "nonsense"], "--model must be one of"),
            (["--model", "mlp", "--input-shape", "2,2"], "only to a user model"),
            (["--strategy", "one", "--backends", "eager,compile"], "exactly one backend"),
            (["--device", "tpu"], "--device must be"),
            (["--model", "x.py:f", "--input-shape", "8,x"], "--input-shape must look like"),
            (["--model", "x.py:f", "--input-shape", "8,,256"], "--input-shape must look like"),
        ],
    )
    def test_usage_errors_exit_2(
        self, args: list[str], match: str, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """Bad tune options exit 2 with a one-line message naming the problem."""
        assert match in usage_error(["tune", *args], capsys)


class TestCheck:
    @pytest.mark.parametrize(
        ("candidate", "code"), [("112", 0), ("105", 0), ("104.9", 1), ("50", 1)]
    )
    def test_throughputs(
        self, candidate: str, code: int, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """--baseline/--candidate: exit 0 when the threshold is met (boundary included), else 1."""
        argv = ["check", "--baseline", "100", "--candidate", candidate, "--threshold", "5"]
        assert main(argv) == code
        first = capsys.readouterr().out.splitlines()[0]
        assert first.startswith("⚡ speedup: ")
        assert f"(100.00 → {float(candidate):.2f} samples/s)" in first

    def test_throughputs_through_entry_point(self) -> None:
        """The real entry point prints the AITune speedup line and exits 0."""
        proc = _run("check", "--baseline", "100", "--candidate", "112", "--threshold", "5")
        assert proc.returncode == 0
        assert proc.stdout.splitlines()[0] == "⚡ speedup: 1.12x (100.00 → 112.00 samples/s)"

    @pytest.mark.parametrize(
        ("base", "cand", "code", "verdict"),
        [
            (
                [0.010, 0.011, 0.0105, 0.0102, 0.0101, 0.0108],
                [0.005, 0.0051, 0.0052, 0.0049, 0.005, 0.0053],
                0,
                "faster",
            ),
            (
                [0.005, 0.0051, 0.0052, 0.0049, 0.005, 0.0053],
                [0.010, 0.011, 0.0105, 0.0102, 0.0101, 0.0108],
                1,
                "not_faster",
            ),
            ([0.010, 0.011, 0.0105, 0.0102], [0.0101, 0.0108, 0.0103, 0.0104], 3, "inconclusive"),
        ],
    )
    def test_latency_files(
        self,
        tmp_path: Path,
        base: list[float],
        cand: list[float],
        code: int,
        verdict: str,
        capsys: pytest.CaptureFixture[str],
    ) -> None:
        """Latency files give the statistical verdict with its interval: exit 0 / 1 / 3."""
        b, c = tmp_path / "b.txt", tmp_path / "c.json"
        b.write_text("# eager\n" + "\n".join(map(str, base)) + "\n")
        c.write_text(json.dumps(cand))
        argv = ["check", "--baseline-times", str(b), "--candidate-times", str(c), "--unpaired"]
        assert main(argv) == code
        out = capsys.readouterr().out
        assert out.startswith("warning: unpaired recordings")
        assert f"\nverdict: {verdict} (" in out
        assert "95% CI [" in out
        assert "ruled out at 97.5%" in out or "too few timings" in out  # not rounded to 98%

    def test_latency_files_must_say_how_they_were_recorded(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """Neither --paired nor --unpaired: exit 2 naming both flags and the risk; both: a
        conflict."""
        b, c = tmp_path / "b.txt", tmp_path / "c.txt"
        b.write_text("0.01\n0.011\n0.0105\n")
        c.write_text("0.005\n0.0051\n0.0052\n")
        argv = ["check", "--baseline-times", str(b), "--candidate-times", str(c)]
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert "--paired" in err and "--unpaired" in err and "drift" in err
        assert main([*argv, "--paired", "--unpaired"]) == 2
        assert "--paired and --unpaired conflict" in capsys.readouterr().err

    def test_unpaired_json_carries_the_warning(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """The JSON document of an unpaired check has the warning; a paired one has none."""
        b, c = tmp_path / "b.txt", tmp_path / "c.txt"
        b.write_text("\n".join(str(0.01 + i * 1e-4) for i in range(12)))
        c.write_text("\n".join(str(0.005 + i * 1e-4) for i in range(12)))
        argv = ["check", "--baseline-times", str(b), "--candidate-times", str(c)]
        main([*argv, "--unpaired", "--format", "json"])
        assert "not timed interleaved" in json.loads(capsys.readouterr().out)["warning"]
        main([*argv, "--paired", "--format", "json"])
        doc = json.loads(capsys.readouterr().out)
        assert doc["warning"] is None
        assert doc["guarantee"] == pytest.approx(0.975)
        assert "ruled out" in doc["ruled_out"]

    def test_paired_files_are_checked_for_a_ratio_shift(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """A paired recording whose ratio moved mid-run is flagged; the later pairs veto 'faster'."""
        rng = random.Random(4)
        base = [0.01 * rng.uniform(0.98, 1.02) for _ in range(80)]
        cand = [b / (1.3 if i < 40 else 1.0) * rng.uniform(0.98, 1.02) for i, b in enumerate(base)]
        b, c = tmp_path / "b.txt", tmp_path / "c.txt"
        b.write_text("\n".join(map(str, base)))
        c.write_text("\n".join(map(str, cand)))
        argv = ["check", "--baseline-times", str(b), "--candidate-times", str(c), "--paired"]
        assert main(argv) != 0
        out = capsys.readouterr().out
        assert "quality: ratio shift" in out

    def test_paired(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """--paired uses the signed-rank interval."""
        b, c = tmp_path / "b.txt", tmp_path / "c.txt"
        b.write_text("\n".join(str(0.01 + i * 1e-4) for i in range(12)))
        c.write_text("\n".join(str(0.005 + i * 1e-4) for i in range(12)))
        argv = ["check", "--baseline-times", str(b), "--candidate-times", str(c), "--paired"]
        assert main(argv) == 0
        assert "wilcoxon_signed_rank_hl" in capsys.readouterr().out

    @pytest.mark.parametrize(
        ("argv", "match"),
        [
            (["--baseline", "nan", "--candidate", "1"], "finite"),
            (["--baseline", "0", "--candidate", "1"], "--baseline must be > 0"),
            (["--baseline", "abc", "--candidate", "1"], "invalid float value"),
            (["--baseline", "1"], "go together"),
            ([], "give either"),
            (
                ["--baseline-times", "/nonexistent/x", "--candidate-times", "/nonexistent/y"],
                "cannot read",
            ),
        ],
    )
    def test_bad_input_exits_2(
        self, argv: list[str], match: str, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """Bad numbers and unreadable files exit 2 with a clear one-line message."""
        assert main(["check", *argv]) == 2
        err = capsys.readouterr().err
        assert match in err
        assert len(err.strip().splitlines()) == 1

    @pytest.mark.parametrize(
        "text", ["0.1\nfast\n", "[0.1, true]", "[0.1, NaN]", "0.1\ninf\n", '{"a": 1}', "[0.1, -1]"]
    )
    def test_bad_latency_files_exit_2(
        self, tmp_path: Path, text: str, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """Latency files with non-numbers, non-finite or non-positive values exit 2."""
        bad, good = tmp_path / "bad.txt", tmp_path / "good.txt"
        bad.write_text(text)
        good.write_text("0.1\n0.2\n0.3\n")
        assert main(["check", "--baseline-times", str(bad), "--candidate-times", str(good)]) == 2
        assert "aitune-fp: error:" in capsys.readouterr().err

    def test_check_does_not_import_torch(self) -> None:
        """check runs without importing torch (fast in CI scripts)."""
        code = (
            "import sys; from aitune_fp.cli import main; "
            "rc = main(['check', '--baseline', '1', '--candidate', '2']); "
            "assert 'torch' not in sys.modules, 'torch imported'; sys.exit(rc)"
        )
        proc = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, env=ENV, check=False
        )
        assert proc.returncode == 0, proc.stderr


def _event_line(**fields: Any) -> str:

    result = flat_result(
        fields.get("desc", "B()"),
        120.0,
        100.0,
        1.2,
        True,
        estimate=1.2,
        ci_low=1.1,
        ci_high=1.3,
        required_speedup=1.01,
        verdict="faster",
    )
    event = CandidateMeasured(
        run_id=fields.get("run", "r"), module_name="m", result=result, duration_s=1.0
    ).to_event()
    return json.dumps({"event": event.name, **event.fields})


class TestReport:
    def test_bad_lines_reported_never_crash(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """Garbage, binary and foreign lines are listed by number on stderr; exit 0."""
        path = tmp_path / "log.jsonl"
        path.write_bytes(
            b"\x00\xff garbage\n"
            + _event_line().encode()
            + b'\n{"event": "other"}\n'
            + b'{"__reduce__": "os.system"}\n'
        )
        assert main(["report", str(path)]) == 0
        captured = capsys.readouterr()
        assert "3 of 4 lines were not aitune_fp events" in captured.err
        assert "line 1: not UTF-8" in captured.err
        assert "line 3:" in captured.err
        assert "B()" in captured.out

    def test_control_characters_are_escaped(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """A backend description with terminal escapes is printed escaped."""
        path = tmp_path / "log.jsonl"
        path.write_text(_event_line(desc="Evil\x1b[2J()") + "\n")
        assert main(["report", str(path)]) == 0
        out = capsys.readouterr().out
        assert "\x1b" not in out
        assert "Evil\\x1b[2J()" in out

    def test_missing_file_exits_2(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """An unreadable log is a one-line error with exit 2."""
        assert main(["report", str(tmp_path / "absent.jsonl")]) == 2
        assert "cannot read" in capsys.readouterr().err

    def test_plot_without_matplotlib_exits_2(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """--plot without matplotlib says how to install it and exits 2."""
        monkeypatch.setitem(sys.modules, "matplotlib", None)
        path = tmp_path / "log.jsonl"
        path.write_text(_event_line() + "\n")
        assert main(["report", str(path), "--plot", str(tmp_path / "p.png")]) == 2
        assert "aitune-fp[plot]" in capsys.readouterr().err

    def test_plot_bad_suffix_exits_2(self, tmp_path: Path) -> None:
        """--plot refuses a file type it cannot write."""
        path = tmp_path / "log.jsonl"
        path.write_text(_event_line() + "\n")
        assert main(["report", str(path), "--plot", str(tmp_path / "p.txt")]) == 2

    @pytest.mark.parametrize("suffix", [".png", ".svg"])
    def test_plot_is_written(self, tmp_path: Path, suffix: str) -> None:
        """--plot draws the speedups with error bars into a PNG or SVG file."""
        path = tmp_path / "log.jsonl"
        path.write_text(_event_line(run="a") + "\n" + _event_line(run="b", desc="C()") + "\n")
        target = tmp_path / f"plot{suffix}"
        assert main(["report", str(path), "--plot", str(target)]) == 0
        data = target.read_bytes()
        assert data.startswith(b"\x89PNG") if suffix == ".png" else b"<svg" in data


class TestUnexpectedFailure:
    def test_exit_70_with_saved_traceback(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """An unexpected exception exits 70 (EX_SOFTWARE) and prints the path of the saved traceback."""

        def boom(*args: object) -> None:
            raise RuntimeError("kaboom")

        monkeypatch.setattr("aitune_fp.events.ingest.summarize", boom)
        path = tmp_path / "log.jsonl"
        path.write_text("")
        assert main(["report", str(path)]) == 70
        err = capsys.readouterr().err
        assert "RuntimeError: kaboom" in err
        saved = err.rsplit("traceback saved to ", 1)[1].rstrip(")\n")
        text = Path(saved).read_text()
        assert "Traceback" in text
        assert "kaboom" in text
        Path(saved).unlink()


class TestHelpers:
    @pytest.mark.parametrize(
        ("text", "expected"),
        [
            ("plain", "plain"),
            ("a\x1b[31mb", "a\\x1b[31mb"),
            ("line\nbreak\ttab\r", "line\\nbreak\\ttab\\r"),
            ("\x7f\x9b", "\\x7f\\x9b"),
            ("rtl\u202eevil", "rtl\\u202eevil"),
            ("⚡ ok → é", "⚡ ok → é"),
        ],
    )
    def test_escape_control(self, text: str, expected: str) -> None:
        """Control, C1 and bidi-override characters are escaped; printable Unicode is kept."""
        assert escape_control(text) == expected

    def test_parse_times(self) -> None:
        """Latencies: one per line with comments, or a JSON array."""
        assert parse_times("0.1\n\n# c\n0.2  # x\n") == [0.1, 0.2]
        assert parse_times(" [1, 2.5] ") == [1.0, 2.5]


class TestNegativeThreshold:
    def test_warns(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """A negative threshold is allowed but said out loud: it accepts slower candidates."""
        main(["tune", "--backends", "warp-drive", "--threshold", "-3"])
        err = capsys.readouterr().err
        assert "accepts candidates up to 3 % slower than eager" in err
