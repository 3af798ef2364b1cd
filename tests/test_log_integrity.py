"""Logs and reports lose nothing and misplace nothing (issue 32).

Spec: a run is its id and its content (a run appended twice counts once, in ``ingest`` as in
``report``; two runs sharing an id stay two); a run with no ``finished`` is named incomplete with
its last phase; a log with no tune event is exit 2; every writer starts on a fresh line and
``--resume`` names a cut line; names from sweep files never leave their folder.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aitune_fp.cli import main
from aitune_fp.errors import InvalidValueError
from aitune_fp.events.ingest import ingest
from aitune_fp.events.sending import open_log
from aitune_fp.events.sweep import (
    SWEEP_STARTED,
    SweepStarted,
    TaskFinished,
)
from aitune_fp.events.validation import PhaseEntered
from aitune_fp.sweep.run import completed_models
from aitune_fp.sweep.spec import parse_sweep
from tests.factories import event_line, fake_log, fake_result, write_log


def _sweep_lines(sweep: str = "s1") -> list[str]:
    return [
        event_line(
            SweepStarted(
                run_id=sweep,
                module_name="nightly",
                executor="local",
                models=["mlp"],
                skipped_models=[],
            ).to_event()
        )
    ]


class TestRunIdentity:
    def test_a_run_appended_twice_counts_once_in_the_library(self) -> None:
        """``ingest`` on a log holding one run twice: one run, its results once, the repeat said."""
        once = fake_log(results=(fake_result("A()"), fake_result("B()")))
        report = ingest(once + once)
        (run,) = report.runs
        assert len(run.results) == 2
        assert run.n_events == len(once)
        assert report.repeats == (("r1", len(once)),)

    def test_two_runs_sharing_an_id_stay_two(self) -> None:
        """Same run id, other content (another time, other figures): two runs, nothing dropped."""
        first = fake_log(results=(fake_result("A()"),))
        second = [
            line.replace("2025-01-02T12:00", "2025-01-03T08:30")
            for line in fake_log(results=(fake_result("C()"),), baseline=600.0)
        ]
        report = ingest(first + second)
        assert [r.run_id for r in report.runs] == ["r1", "r1"]
        assert [r.results[0].backend_description for r in report.runs] == ["A()", "C()"]
        assert [r.started_at for r in report.runs] == [
            "2025-01-02T12:00:00.5Z",
            "2025-01-03T08:30:00.5Z",
        ]
        assert report.repeats == ()

    def test_an_id_shared_by_runs_is_named_by_the_library(self) -> None:
        """``shared_run_ids``: each id that more than one run carries, with how many; not repeats."""
        first = fake_log(results=(fake_result("A()"),))
        second = [line.replace("12:00:", "13:00:") for line in fake_log(outcome="error")]
        third = [line.replace("12:00:", "14:00:") for line in fake_log()]
        other = [line.replace('"r1"', '"r2"') for line in first]
        report = ingest(first + other + second + first + third + other)
        assert [r.run_id for r in report.runs] == ["r1", "r2", "r1", "r1"]
        assert report.shared_run_ids == (("r1", 3),)
        assert ingest(first + first + other).shared_run_ids == ()  # a repeat is one run

    @pytest.mark.parametrize("fmt", ["table", "json", "markdown"])
    def test_report_names_an_id_shared_by_runs(
        self, tmp_path: Path, fmt: str, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """Two runs under one id: ``report`` says so on stderr in every format, and in its JSON."""
        first = fake_log(results=(fake_result("A()"),))
        second = [line.replace("12:00:", "13:00:") for line in fake_log(outcome="error")]
        path = write_log(tmp_path, first + second)
        assert main(["report", str(path), "--format", fmt]) == 0
        captured = capsys.readouterr()
        assert (
            "warning: run id r1 is shared by 2 different runs in the log (started "
            "2025-01-02 12:00:00 UTC, 2025-01-02 13:00:00 UTC); each is shown on its own"
        ) in captured.err
        assert "appears more than once" not in captured.err  # no repeat here
        if fmt == "json":
            assert json.loads(captured.out)["shared_run_ids"] == [{"run_id": "r1", "n_runs": 2}]
        assert main(["report", str(write_log(tmp_path, first + first)), "--format", fmt]) == 0
        assert "shared by" not in capsys.readouterr().err

    @given(copies=st.integers(1, 4), n_results=st.integers(0, 3))
    def test_any_number_of_copies_is_one_run(self, copies: int, n_results: int) -> None:
        """k copies of one run, whole: one run, (k - 1) x its events left out."""
        once = fake_log(results=tuple(fake_result(f"B{i}()") for i in range(n_results)))
        report = ingest(once * copies)
        (run,) = report.runs
        assert len(run.results) == n_results
        assert dict(report.repeats).get("r1", 0) == (copies - 1) * len(once)

    def test_report_and_ingest_agree(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """The CLI shows what the library reads: both runs of one id, each with its own start."""
        first = fake_log(results=(fake_result("A()"),))
        second = [line.replace("12:00:", "13:00:") for line in fake_log(outcome="error")]
        path = write_log(tmp_path, first + second + first)
        assert main(["report", str(path), "--format", "json"]) == 0
        captured = capsys.readouterr()
        doc = json.loads(captured.out)
        assert len(doc["runs"]) == len(ingest(path).runs) == 2
        assert "run r1 appears more than once" in captured.err
        assert main(["report", str(path)]) == 0
        out = capsys.readouterr().out
        assert "started 2025-01-02 12:00:00 UTC" in out
        assert "started 2025-01-02 13:00:00 UTC" in out


class TestIncompleteRuns:
    def _cut(self) -> list[str]:
        lines = fake_log(results=(fake_result("A()"),))[:-2]  # no selected, no finished
        phase = PhaseEntered(
            run_id="r1", module_name="mlp", backend_description="Compiled()", phase="measure"
        ).to_event()
        return [*lines, event_line(phase)]

    def test_a_run_without_finished_is_incomplete_with_its_last_phase(self) -> None:
        """The library says so: not complete, and where it stopped."""
        (run,) = ingest(self._cut()).runs
        assert not run.complete
        assert run.last_phase == "measure of Compiled()"
        assert run.to_dict()["complete"] is False
        (whole,) = ingest(fake_log()).runs
        assert whole.complete

    @pytest.mark.parametrize("fmt", ["table", "json", "markdown"])
    def test_report_names_it(
        self, tmp_path: Path, fmt: str, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """Never "No backend was selected." for a run that has not ended."""
        assert main(["report", str(write_log(tmp_path, self._cut())), "--format", fmt]) == 0
        out = capsys.readouterr().out
        assert "No backend was selected" not in out
        if fmt == "json":
            (run,) = json.loads(out)["runs"]
            assert run["complete"] is False
            assert run["last_phase"] == "measure of Compiled()"
        else:
            assert "Incomplete run" in out
            assert "measure of Compiled()" in out

    def test_a_log_of_sweep_events_only_exits_2(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """A sweep's own events make no run: nothing to report is an input error."""
        assert main(["report", str(write_log(tmp_path, _sweep_lines()))]) == 2
        assert "no tune events" in capsys.readouterr().err


class TestCutLines:
    def test_a_writer_starts_on_a_fresh_line(self, tmp_path: Path) -> None:
        """After a cut last line, the next record is on its own line and reads back whole."""
        path = tmp_path / "log.jsonl"
        whole = fake_log()
        path.write_text("\n".join(whole) + "\n" + whole[0][:40], encoding="utf-8")
        with open_log(path) as handle:
            handle.write(_sweep_lines()[0] + "\n")
        lines = path.read_text(encoding="utf-8").splitlines()
        assert lines[-2] == whole[0][:40]
        assert json.loads(lines[-1])["event"] == SWEEP_STARTED
        with open_log(path) as handle:  # a whole last line: nothing added
            handle.write("x\n")
        assert path.read_text(encoding="utf-8").splitlines()[-2:] == [lines[-1], "x"]

    def test_resume_skips_and_names_a_cut_line(self, tmp_path: Path) -> None:
        """The finished model is found; the cut line is skipped and named by its number."""
        finished = TaskFinished(
            run_id="s1",
            module_name="mlp",
            tune_run_id="r1",
            outcome="baseline",
            hostname="h",
            device="cpu",
            device_name="cpu",
            pid=1,
            threads=1,
            started_unix_s=1.0,
            finished_unix_s=2.0,
            started_monotonic_s=1.0,
            finished_monotonic_s=2.0,
            duration_s=max(2.0 - 1.0, 0.0),
        ).to_event()
        path = tmp_path / "log.jsonl"
        path.write_text(event_line(finished) + "\n" + event_line(finished)[:30], encoding="utf-8")
        skipped: list[tuple[int, str]] = []
        assert completed_models(str(path), skipped) == {"mlp": "r1"}
        assert [n for n, _ in skipped] == [2]


class TestSweepNames:
    @pytest.mark.parametrize("bad", ["../../escape", "a/b", "..", "a\\b", "", " "])
    def test_names_that_leave_the_folder_are_refused(self, bad: str) -> None:
        """The sweep's name and each model's name become file names: no path in them."""
        with pytest.raises(InvalidValueError, match=r"plain name|empty"):
            parse_sweep({"name": bad, "models": ["mlp"]})
        with pytest.raises(InvalidValueError, match=r"models\[0\]\.name"):
            parse_sweep({"models": [{"model": "mlp", "name": bad}]})

    def test_the_cli_refuses_before_writing(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """``name = "../../x"``: exit 2, and no log written anywhere."""
        folder = tmp_path / "a" / "b"
        folder.mkdir(parents=True)
        sweep = folder / "s.toml"
        sweep.write_text('name = "../../x"\nmodels = ["mlp"]\n', encoding="utf-8")
        monkeypatch.chdir(folder)
        assert main(["sweep", str(sweep)]) == 2
        assert "plain name" in capsys.readouterr().err
        assert not list(tmp_path.rglob("*.jsonl"))
