"""``aitune-fp sweep`` without Ray: the file's checks, the local executor, the log, resume, Ctrl-C."""

from __future__ import annotations

import io
import json
import os
import socket
import sys
import time
from pathlib import Path
from typing import Any

import attrs
import jsonschema
import pytest
from hypothesis import given
from hypothesis import strategies as st

from aitune_fp.cli import main
from aitune_fp.cli._shared import EXIT_PARTIAL
from aitune_fp.core.config import ProfilingConfig
from aitune_fp.errors import InvalidTypeError, InvalidValueError
from aitune_fp.events import ingest
from aitune_fp.events.ingest import event_schema
from aitune_fp.sweep.ray_executor import TIMING_RESOURCE, task_options
from aitune_fp.sweep.run import completed_models, run_sweep, summarize_sweep
from aitune_fp.sweep.spec import SweepSpec, check_models, load_sweep, parse_sweep
from aitune_fp.sweep.task import CANCELLED, HUNG, LocalExecutor, TaskOutcome, make_tasks, run_task

from .strategies import threshold_percents
from .sweep_models import tiny_and_broken_toml

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "sweep.toml"
MODELS_FILE = Path(__file__).resolve().parent / "sweep_models.py"
#: Real timings, kept short: a tiny model decides (or runs out) within a second or two.
TINY_BUDGET = {"looks": [10, 20], "max_seconds": 5.0, "warmup_max_calls": 10}
VALIDATOR = jsonschema.Draft202012Validator(event_schema())


def sweep_data(*models: str, **overrides: Any) -> dict[str, Any]:
    """A sweep of the given ``sweep_models.py`` factories against eager, with a tiny budget."""
    data: dict[str, Any] = {
        "name": "t",
        "device": "cpu",
        "strategy": "max-throughput",
        "budget": dict(TINY_BUDGET),
        "models": [{"name": m, "model": f"{MODELS_FILE}:{m.split('-')[0]}"} for m in models],
        "backends": ["eager"],
    }
    data.update(overrides)
    return data


def read_log(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text("utf-8").splitlines() if line.strip()]


# ---- the file ---------------------------------------------------------------------------------


class TestSpec:
    def test_example_file_parses(self) -> None:
        """README's example: three models, two CPU backends, its log next to it."""
        spec = load_sweep(EXAMPLE)
        assert tuple(m.name for m in spec.models) == ("mlp", "convnet", "tiny-linear")
        assert spec.backend_names() == ("eager-bf16", "int8-dynamic")
        assert spec.models[2].model == f"{EXAMPLE.parent / 'tiny_model.py'}:make"
        assert spec.models[2].input_shape == (16, 64)
        assert spec.log == str(EXAMPLE.parent / "sweep-events.jsonl")
        assert spec.profiling.looks == (10, 20, 40) and spec.max_retries == 1

    def test_defaults(self) -> None:
        """Only models given: CPU, max-throughput, 1 %, statistical, the registry's defaults."""
        spec = parse_sweep({"models": ["mlp"]})
        assert (spec.device, spec.strategy, spec.threshold) == ("cpu", "max-throughput", 1.0)
        assert spec.profiling == ProfilingConfig()
        assert spec.backends == () and "int8-dynamic" in spec.backend_names()

    def test_task_timeout_default_and_set(self) -> None:
        """No deadline in the file: the watchdog's bounds for eager and each candidate + 600 s."""
        spec = parse_sweep({"models": ["mlp"], "backends": ["eager", "compile"]})
        assert spec.task_timeout_s is None
        assert spec.task_deadline_s() == 600 + 3 * (1800 + 2 * (60 + 30))
        assert (
            parse_sweep(
                {"models": ["mlp"], "decision": "point", "budget": {"task_timeout_s": 2.5}}
            ).task_deadline_s()
            == 2.5
        )
        tasks = make_tasks(spec, "s", "/tmp/x")
        assert tasks[0].task_timeout_s == spec.task_deadline_s()

    def test_backend_settings(self) -> None:
        """A registry backend's settings are kept, checked and shown in its label."""
        spec = parse_sweep(
            {"models": ["mlp"], "backends": [{"name": "compile", "settings": {"mode": "default"}}]}
        )
        assert dict(spec.backends[0].settings) == {"mode": "default"}
        assert spec.backends[0].label() == "compile(mode=default)"

    @pytest.mark.parametrize(
        ("data", "error", "words"),
        [
            ({}, InvalidValueError, "missing 'models'"),
            ({"models": []}, InvalidValueError, "at least one"),
            ({"models": ["resnet"]}, InvalidValueError, "models[0].model"),
            ({"models": [{"name": "x"}]}, InvalidValueError, "models[0]: missing 'model'"),
            ({"models": ["mlp", "mlp"]}, InvalidValueError, "models[1].name 'mlp' repeats"),
            ({"models": [{"model": "mlp", "input_shape": [8]}]}, InvalidValueError, "input_shape"),
            ({"models": [{"model": "f.py:g", "input_shape": [0, 3]}]}, InvalidValueError, "[0, 3]"),
            ({"models": [{"model": "f.py:g", "shape": [3]}]}, InvalidValueError, "'shape'"),
            ({"models": [3]}, InvalidTypeError, "models[0] must be a table"),
            ({"models": ["mlp"], "device": "tpu"}, InvalidValueError, "device"),
            ({"models": ["mlp"], "threshold": "5"}, InvalidTypeError, "threshold"),
            ({"models": ["mlp"], "threshold": -100}, InvalidValueError, "threshold"),
            ({"models": ["mlp"], "strategy": "best"}, InvalidValueError, "strategy"),
            ({"models": ["mlp"], "decision": "vibes"}, InvalidValueError, "decision"),
            ({"models": ["mlp"], "backends": ["warp"]}, InvalidValueError, "backends[0]"),
            ({"models": ["mlp"], "backends": ["cuda-graphs"]}, InvalidValueError, "cuda only"),
            (
                {"models": ["mlp"], "backends": [{"name": "eager", "settings": {"mode": "x"}}]},
                InvalidValueError,
                "backends[0]: backend 'eager' has no setting 'mode'",
            ),
            (
                {"models": ["mlp"], "backends": [{"name": "compile", "settings": {"mode": "x"}}]},
                InvalidValueError,
                "setting 'mode' must be one of",
            ),
            ({"models": ["mlp"], "backends": ["eager", "eager"]}, InvalidValueError, "twice"),
            (
                {"models": ["mlp"], "strategy": "one", "backends": ["eager", "compile"]},
                InvalidValueError,
                "exactly one",
            ),
            ({"models": ["mlp"], "budget": {"looks": [20, 10]}}, InvalidValueError, "budget.looks"),
            ({"models": ["mlp"], "budget": {"max_pairs": 3}}, InvalidValueError, "'max_pairs'"),
            (
                {"models": ["mlp"], "decision": "point", "budget": {"max_seconds": 3.0}},
                InvalidValueError,
                "budget.max_seconds applies to decision statistical only",
            ),
            ({"models": ["mlp"], "ray": {"max_retries": -1}}, InvalidValueError, "max_retries"),
            (
                {"models": ["mlp"], "budget": {"task_timeout_s": 0}},
                InvalidValueError,
                "budget.task_timeout_s must be > 0",
            ),
            (
                {"models": ["mlp"], "budget": {"task_timeout_s": "1h"}},
                InvalidTypeError,
                "budget.task_timeout_s must be a number",
            ),
            ({"models": ["mlp"], "modles": []}, InvalidValueError, "unknown key 'modles'"),
        ],
    )
    def test_bad_input_names_the_field(self, data: dict[str, Any], error: type, words: str) -> None:
        """Every problem is refused up front, naming the entry and field."""
        with pytest.raises(error) as info:
            parse_sweep(data)
        assert words in str(info.value)

    def test_invalid_toml(self, tmp_path: Path) -> None:
        """A file that is not TOML names the file."""
        path = tmp_path / "bad.toml"
        path.write_text("models = [", "utf-8")
        with pytest.raises(InvalidValueError, match=r"bad\.toml"):
            load_sweep(path)

    @given(
        names=st.lists(st.sampled_from(["a", "b", "c", "d"]), min_size=1, max_size=6),
        threshold=threshold_percents,
    )
    def test_names_unique_or_refused(self, names: list[str], threshold: float) -> None:
        """Labels parse in order when unique; the first repeat is refused by its index."""
        data = {"models": [{"name": n, "model": "mlp"} for n in names], "threshold": threshold}
        if len(set(names)) == len(names):
            spec = parse_sweep(data)
            assert (
                tuple(m.name for m in spec.models) == tuple(names) and spec.threshold == threshold
            )
        else:
            first = next(i for i, n in enumerate(names) if n in names[:i])
            with pytest.raises(InvalidValueError, match=rf"models\[{first}\]\.name"):
                parse_sweep(data)

    @given(
        st.dictionaries(
            st.sampled_from(["looks", "max_seconds", "confidence", "point_steps"]),
            st.one_of(
                st.integers(-5, 200),
                st.floats(allow_nan=True),
                st.lists(st.integers(-2, 50), max_size=4),
                st.text(max_size=3),
            ),
            max_size=3,
        )
    )
    def test_budget_is_a_profiling_config_or_refused(self, budget: dict[str, Any]) -> None:
        """Any budget table gives the ProfilingConfig those fields give, or an error naming one."""
        data = {"models": ["mlp"], "budget": budget}
        errors: list[str] = []
        try:
            spec = parse_sweep(data)
        except (ValueError, TypeError) as exc:
            errors.append(str(exc))
        if errors:
            assert "budget" in errors[0]
            return
        assert "point_steps" not in budget  # statistical mode refuses it
        for key, value in budget.items():
            got = getattr(spec.profiling, key)
            assert got == (tuple(value) if isinstance(value, list) else value)


def test_task_options_hold_a_whole_device() -> None:
    """A CUDA task takes a whole GPU; a CPU task the node's one timing slot; no app retries."""
    assert task_options("cuda", 2) == {
        "max_retries": 2,
        "retry_exceptions": False,
        "num_gpus": 1,
        "num_cpus": 1,
    }
    cpu = task_options("cpu", 0)
    assert cpu["resources"] == {TIMING_RESOURCE: 1} and "num_gpus" not in cpu


# ---- the local executor ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def local_sweep(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    """One local sweep of two tiny models and a broken one (shared by the read-only checks)."""
    log = tmp_path_factory.mktemp("sweep") / "events.jsonl"
    spec = parse_sweep(sweep_data("tiny", "broken", "tiny-2"))
    return log, run_sweep(spec, log_path=str(log), executor=LocalExecutor())


class TestLocalSweep:
    def test_every_model_ends_recorded(self, local_sweep: tuple[Path, Any]) -> None:
        """Good models finish, the broken one is failed with its reason; the sweep goes on."""
        _, result = local_sweep
        states = {s.model: s.state for s in result.statuses}
        assert states == {"tiny": "finished", "broken": "failed", "tiny-2": "finished"}
        broken = next(s for s in result.statuses if s.model == "broken")
        assert broken.error_type == "UserModelError"
        assert "broken on purpose" in (broken.reason or "")
        assert result.failed == ("broken",) and not result.interrupted

    def test_log_is_one_valid_event_stream(self, local_sweep: tuple[Path, Any]) -> None:
        """Every line validates; sweep events frame the runs; each tune event says where it ran."""
        log, result = local_sweep
        lines = read_log(log)
        for line in lines:
            VALIDATOR.validate(line)
        names = [line["event"] for line in lines]
        assert names[0] == "aitune_fp.sweep.started"
        assert names[-1] == "aitune_fp.sweep.finished"
        assert lines[-1]["failed_models"] == ["broken"]
        tune_events = [x for x in lines if x["event"].startswith("aitune_fp.validation.")]
        assert {x["run_id"] for x in tune_events} == {
            s.tune_run_id for s in result.statuses if s.state == "finished"
        }
        for x in tune_events:
            assert x["sweep_id"] == result.sweep_id
            assert x["hostname"] == socket.gethostname() and x["device_name"]
        finished = [x for x in lines if x["event"] == "aitune_fp.sweep.task_finished"]
        assert len(finished) == 2  # each in its own child process (it has a deadline)
        assert all(x["pid"] != os.getpid() for x in finished)
        assert finished[0]["pid"] != finished[1]["pid"]

    def test_ingest_and_report_read_it_unchanged(
        self, local_sweep: tuple[Path, Any], capsys: pytest.CaptureFixture[str]
    ) -> None:
        """ingest finds the two tune runs; ``aitune-fp report`` prints them with no bad line."""
        log, _result = local_sweep
        report = ingest.ingest(str(log))
        assert report.bad_lines == ()
        assert sorted(r.module_name for r in report.runs) == ["tiny", "tiny-2"]
        assert all(r.results and r.results[0].verdict for r in report.runs)
        assert main(["report", str(log)]) == 0
        out = capsys.readouterr()
        assert out.out.count("Run ") == 2 and "not aitune_fp events" not in out.err

    def test_summary_has_a_cell_per_model_and_backend(self, local_sweep: tuple[Path, Any]) -> None:
        """Both tiny models have a verdict with an estimate for eager; broken is listed failed."""
        log, result = local_sweep
        reports = {r.run_id: r for r in ingest.ingest(str(log)).runs}
        summary = summarize_sweep(result.statuses, reports)
        assert summary.models == ("tiny", "broken", "tiny-2")
        assert summary.backends == ("TorchEagerBackend()",)
        for model in ("tiny", "tiny-2"):
            cell = summary.cell(model, "TorchEagerBackend()")
            assert cell is not None and cell.verdict in ("faster", "not_faster", "inconclusive")
        assert [s.model for s in summary.failed] == ["broken"]


class TestResumeAndInterrupt:
    def test_resume_skips_finished_models_only(self, tmp_path: Path) -> None:
        """A second run with resume re-runs only the failed model; the first results stay."""
        log = tmp_path / "events.jsonl"
        spec = parse_sweep(sweep_data("tiny", "broken"))
        first = run_sweep(spec, log_path=str(log))
        done = completed_models(str(log))
        assert list(done) == ["tiny"]
        ran: list[str] = []
        second = run_sweep(
            spec, log_path=str(log), resume=True, on_outcome=lambda o: ran.append(o.model)
        )
        assert ran == ["broken"]
        states = {s.model: (s.state, s.tune_run_id) for s in second.statuses}
        assert states["tiny"] == ("skipped", first.statuses[0].tune_run_id)
        started = [x for x in read_log(log) if x["event"] == "aitune_fp.sweep.started"]
        assert started[1]["skipped_models"] == ["tiny"] and started[1]["models"] == ["broken"]

    def test_builds_go_to_one_temp_folder_and_none_when_nothing_is_left(
        self, tmp_path: Path
    ) -> None:
        """A sweep says where its builds went; a resume with nothing to run makes no folder."""
        import tempfile

        made = lambda: set(Path(tempfile.gettempdir()).glob("aitune_fp-sweep-*"))  # noqa: E731
        before = made()
        log = tmp_path / "events.jsonl"
        spec = parse_sweep(sweep_data("tiny"))
        first = run_sweep(spec, log_path=str(log))
        assert first.cache_dir is not None and {Path(first.cache_dir)} == made() - before
        again = run_sweep(spec, log_path=str(log), resume=True)
        assert again.cache_dir is None and made() - before == {Path(first.cache_dir)}
        assert [s.state for s in again.statuses] == ["skipped"]

    def test_ctrl_c_keeps_what_finished_and_records_the_rest(self, tmp_path: Path) -> None:
        """Ctrl-C after the first model: it stays in the log, the others are recorded cancelled."""
        log = tmp_path / "events.jsonl"
        spec = parse_sweep(sweep_data("tiny", "tiny-2", "tiny-3"))

        seen: list[str] = []

        def interrupt(outcome: TaskOutcome) -> None:
            seen.append(outcome.model)
            if len(seen) == 1:
                raise KeyboardInterrupt

        result = run_sweep(spec, log_path=str(log), on_outcome=interrupt)
        assert result.interrupted
        assert [(s.model, s.state) for s in result.statuses] == [
            ("tiny", "finished"),
            ("tiny-2", "failed"),
            ("tiny-3", "failed"),
        ]
        assert {s.error_type for s in result.statuses[1:]} == {CANCELLED}
        assert seen == ["tiny", "tiny-2", "tiny-3"]  # the cancelled ones are reported too
        lines = read_log(log)
        assert lines[-1]["event"] == "aitune_fp.sweep.finished"
        assert [r.module_name for r in ingest.ingest(str(log)).runs] == ["tiny"]
        assert list(completed_models(str(log))) == ["tiny"]


@pytest.mark.slow  # a real deadline or process: seconds of waiting
def test_a_hung_task_is_killed_and_the_sweep_goes_on(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A factory stuck in native code (deadline 3 s; a forked tiny task takes ~0.2 s): hung."""
    path = tmp_path / "s.toml"
    path.write_text(
        f'backends = ["eager"]\n[budget]\nlooks = [10, 20]\nmax_seconds = 5.0\n'
        f"warmup_max_calls = 10\ntask_timeout_s = 3\n"
        f'[[models]]\nmodel = "{MODELS_FILE}:hanger"\n[[models]]\nmodel = "{MODELS_FILE}:tiny"\n',
        "utf-8",
    )
    log = tmp_path / "e.jsonl"
    start = time.monotonic()
    assert main(["sweep", str(path), "--json-log", str(log)]) == EXIT_PARTIAL
    assert time.monotonic() - start < 60  # not the factory's 1000 s
    captured = capsys.readouterr()
    out = captured.out
    assert "builds kept in " in captured.err  # no --cache-dir: the temp folder is named
    assert "1 model failed: hanger" in out and "hung" in out and HUNG in out
    lines = read_log(log)
    for line in lines:
        VALIDATOR.validate(line)
    ended = {
        x["module_name"]: x
        for x in lines
        if x["event"] in ("aitune_fp.sweep.task_finished", "aitune_fp.sweep.task_failed")
    }
    assert ended["hanger"]["event"] == "aitune_fp.sweep.task_failed"
    assert ended["hanger"]["error_type"] == HUNG
    assert "task_timeout_s" in ended["hanger"]["reason"]
    assert ended["tiny"]["event"] == "aitune_fp.sweep.task_finished"
    assert lines[-1]["failed_models"] == ["hanger"]
    assert [r.module_name for r in ingest.ingest(str(log)).runs] == ["tiny"]


def test_in_process_local_executor_ignores_deadlines(tmp_path: Path) -> None:
    """``LocalExecutor(in_process=True)``: tasks run in this process (debugging)."""
    log = tmp_path / "e.jsonl"
    spec = parse_sweep(sweep_data("tiny", budget={**TINY_BUDGET, "task_timeout_s": 1e-3}))
    result = run_sweep(spec, log_path=str(log), executor=LocalExecutor(in_process=True))
    assert [s.state for s in result.statuses] == ["finished"]
    finished = [x for x in read_log(log) if x["event"] == "aitune_fp.sweep.task_finished"]
    assert [x["pid"] for x in finished] == [os.getpid()]


class _BreaksAfterOne:
    """An executor that runs one task, then fails as a lost cluster connection would."""

    name = "flaky"

    def run(self, tasks: Any, on_outcome: Any) -> None:
        on_outcome(run_task(tasks[0]))
        raise ConnectionError("lost the cluster")


def test_an_executor_failure_is_recorded_per_model(tmp_path: Path) -> None:
    """The executor itself failing leaves no model unrecorded: each says why, the log closes."""
    log = tmp_path / "events.jsonl"
    result = run_sweep(
        parse_sweep(sweep_data("tiny", "tiny-2")), log_path=str(log), executor=_BreaksAfterOne()
    )
    assert [(s.model, s.state) for s in result.statuses] == [
        ("tiny", "finished"),
        ("tiny-2", "failed"),
    ]
    assert result.statuses[1].error_type == "ConnectionError"
    assert "lost the cluster" in (result.statuses[1].reason or "")
    assert read_log(log)[-1]["failed_models"] == ["tiny-2"]


class TestCommand:
    def test_bad_file_is_a_usage_error_naming_the_field(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """Exit 2 with one line naming the entry and field; nothing runs, no log written."""
        path = tmp_path / "s.toml"
        path.write_text('[[models]]\nmodel = "mlp"\ninput_shape = [8]\n', "utf-8")
        assert main(["sweep", str(path), "--log", str(tmp_path / "e.jsonl")]) == 2
        err = capsys.readouterr().err
        assert "models[0].input_shape applies only to a user model" in err
        assert not (tmp_path / "e.jsonl").exists()

    def test_ray_missing_address_form(self, capsys: pytest.CaptureFixture[str]) -> None:
        """``--ray`` takes an optional address; ``sweep`` with no file is a usage error."""
        assert main(["sweep"]) == 2
        assert "sweep" in capsys.readouterr().err

    def test_exit_1_when_a_model_fails(self, tmp_path: Path) -> None:
        """The table lists every model; the failed one is named on the last line."""
        path = tmp_path / "s.toml"
        path.write_text(tiny_and_broken_toml("two"), "utf-8")
        out, err = io.StringIO(), io.StringIO()
        saved = sys.stdout, sys.stderr
        sys.stdout, sys.stderr = out, err
        try:
            code = main(["sweep", str(path), "--log", str(tmp_path / "e.jsonl"), "-q"])
        finally:
            sys.stdout, sys.stderr = saved
        assert code == EXIT_PARTIAL
        text = out.getvalue()
        assert "Sweep two (local" in text and "TorchEagerBackend()" in text
        assert "failed: UserModelError" in text
        assert "1 model failed: broken" in text

        out = io.StringIO()
        sys.stdout, sys.stderr = out, err
        try:
            args = ["sweep", str(path), "--log", str(tmp_path / "e.jsonl"), "-q", "--resume"]
            code = main([*args, "--format", "json"])
        finally:
            sys.stdout, sys.stderr = saved
        assert code == EXIT_PARTIAL
        doc = json.loads(out.getvalue())
        assert [(s["model"], s["state"]) for s in doc["statuses"]] == [
            ("tiny", "skipped"),
            ("broken", "failed"),
        ]
        assert doc["summary"]["backends"] == ["TorchEagerBackend()"]
        assert [r["module_name"] for r in doc["runs"]] == ["tiny"]

    def test_ctrl_c_exits_130_with_every_model_recorded(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """Ctrl-C while the third of six models loads: exit 130, the log closed, none lost.

        The third factory raises KeyboardInterrupt in the driver, exactly where a Ctrl-C would
        surface; an asynchronous interrupt of the main thread raced the sweep's end on a fast
        machine and was not always delivered before it.
        """
        names = ["tiny", "tiny", "interrupter", "tiny", "tiny", "tiny"]
        models = "".join(
            f'[[models]]\nname = "m{i}"\nmodel = "{MODELS_FILE}:{name}"\n'
            for i, name in enumerate(names)
        )
        path = tmp_path / "s.toml"
        path.write_text(
            'backends = ["eager"]\n[budget]\nlooks = [10, 20]\nmax_seconds = 5.0\n'
            "warmup_max_calls = 10\n" + models,
            "utf-8",
        )
        log = tmp_path / "e.jsonl"
        code = main(["sweep", str(path), "--log", str(log), "-q"])
        assert code == 130
        assert "interrupted: what finished is in" in capsys.readouterr().err
        lines = read_log(log)
        assert lines[-1]["event"] == "aitune_fp.sweep.finished"
        ended = {
            x["module_name"]: x["event"].rsplit(".", 1)[-1]
            for x in lines
            if x["event"] in ("aitune_fp.sweep.task_finished", "aitune_fp.sweep.task_failed")
        }
        assert sorted(ended) == [f"m{i}" for i in range(6)]
        assert "task_failed" in ended.values()
        cancelled = [x for x in lines if x.get("error_type") == CANCELLED]
        assert {x["module_name"] for x in cancelled} == {
            m for m, e in ended.items() if e == "task_failed"
        }

    @pytest.mark.slow
    def test_example_file_runs_locally_with_a_tiny_budget(self, tmp_path: Path) -> None:
        """README's example sweep, budget cut to one look: every model × backend has a cell."""
        spec = load_sweep(EXAMPLE)
        tiny = attrs.evolve(
            spec,
            profiling=ProfilingConfig(looks=(10,), max_seconds=2.0, warmup_max_calls=8),
            log=None,
        )
        assert isinstance(tiny, SweepSpec)
        result = run_sweep(tiny, log_path=str(tmp_path / "e.jsonl"))
        assert [s.state for s in result.statuses] == ["finished"] * 3
        reports = {r.run_id: r for r in ingest.ingest(str(tmp_path / "e.jsonl")).runs}
        summary = summarize_sweep(result.statuses, reports)
        assert summary.failed == ()
        for model in summary.models:
            for backend in ("TorchEagerBackend(dtype=torch.bfloat16)", "Int8DynamicBackend()"):
                assert summary.cell(model, backend) is not None, (model, backend)


# ---- every model's file and factory resolved before the first task ----------------------------


class TestModelsResolvedUpFront:
    def _file(self, tmp_path: Path, *models: str) -> Path:
        path = tmp_path / "s.toml"
        entries = "".join(f'[[models]]\nmodel = "{m}"\n' for m in models)
        path.write_text(f'backends = ["eager"]\n{entries}', "utf-8")
        return path

    @pytest.mark.parametrize(
        ("entry", "words"),
        [
            (f"{MODELS_FILE}:tinyy", "models[1].model: model file"),
            (f"{MODELS_FILE}:tinyy", "has no factory named 'tinyy'"),
            ("absent_model.py:make", "models[1].model: model file not found"),
            ("aitune_fp_no_such_pkg.models:make", "models[1].model: cannot import module"),
        ],
    )
    def test_load_sweep_names_the_entry(self, tmp_path: Path, entry: str, words: str) -> None:
        """A wrong factory, a missing file or module: an error naming the entry, at load time."""
        path = self._file(tmp_path, f"{MODELS_FILE}:tiny", entry)
        with pytest.raises(InvalidValueError) as info:
            load_sweep(path)
        assert words in str(info.value)

    def test_parse_sweep_stays_pure(self) -> None:
        """parse_sweep imports nothing: a missing file passes it, and check_models finds it."""
        spec = parse_sweep({"models": ["mlp", "absent_model.py:make"]})
        with pytest.raises(InvalidValueError, match=r"models\[1\]\.model: model file not found"):
            check_models(spec)

    def test_module_entry_is_kept_as_a_module_name(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """``package.module:factory`` is not made a path against the sweep file's folder."""
        (tmp_path / "zoo_sweep_mod.py").write_text("def make():\n    pass\n")
        monkeypatch.syspath_prepend(str(tmp_path))
        spec = load_sweep(self._file(tmp_path, "zoo_sweep_mod:make"))
        assert spec.models[0].model == "zoo_sweep_mod:make"
        assert spec.models[0].name == "make"
        sys.modules.pop("zoo_sweep_mod", None)

    def test_command_exits_2_before_the_first_task(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """The first model is fine and the second's factory is wrong: nothing runs, exit 2."""
        path = self._file(tmp_path, f"{MODELS_FILE}:tiny", f"{MODELS_FILE}:tinyy")
        assert main(["sweep", str(path), "--log", str(tmp_path / "e.jsonl"), "-q"]) == 2
        (line,) = capsys.readouterr().err.strip().splitlines()
        assert "models[1].model" in line and "'tinyy'" in line
        assert not (tmp_path / "e.jsonl").exists()
