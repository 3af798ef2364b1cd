"""The candidate pipeline's stages are functions of values: spec of ``aitune_fp.pipeline.stages``.

A stage takes the tune's :class:`Arena` (or plain values) and returns a value; it never reads
the session, which only sequences the stages and records what they return or report.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aitune_fp.backends.base import BUILD_LOG_NAME
from aitune_fp.core.config import ProfilingConfig
from aitune_fp.core.report import STAGES
from aitune_fp.errors import BackendUnavailableError, CandidateHungError, InvalidStateError
from aitune_fp.pipeline import stages, vetting
from aitune_fp.pipeline.stages import Step, build_failure, build_here, call_deadline, failure_of
from aitune_fp.pipeline.tune import TuneSession
from aitune_fp.pipeline.values import PROFILING_LOG_NAME, ModelChangedError, StageError, TuneTarget
from aitune_fp.profiling.calls import SpotCheckError
from aitune_fp.profiling.interference import InterferenceError
from aitune_fp.profiling.workers import WorkerError
from tests.validation_helpers import Pruned, make_case

_EXCEPTIONS = [
    CandidateHungError("late"),
    InterferenceError("ran meanwhile"),
    SpotCheckError("wrong", call=3),
    WorkerError("died"),
    ModelChangedError("weights"),
    RuntimeError("boom"),
]


@pytest.mark.parametrize(
    "module", ["baseline", "choosing", "ending", "stages", "vetting", "workers"]
)
def test_no_stage_reads_the_session(module: str) -> None:
    """A stage names no TuneSession: what it may touch is what it is handed (an Arena, values)."""
    path = Path(stages.__file__).with_name(f"{module}.py")
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    names |= {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    names |= {n.arg for n in ast.walk(tree) if isinstance(n, ast.arg)}
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names}
    assert "TuneSession" not in names | imported and "session" not in names


@pytest.mark.parametrize(
    ("exc", "step", "stage", "log"),
    [
        (CandidateHungError("late"), "timing", "hung", BUILD_LOG_NAME),
        (InterferenceError("x"), "timing", "interference", BUILD_LOG_NAME),
        (SpotCheckError("x", call=3), "timing", "correctness", BUILD_LOG_NAME),
        (ModelChangedError("x"), "timing", "correctness", BUILD_LOG_NAME),
        (RuntimeError("x"), "timing", "profiling", PROFILING_LOG_NAME),
        (RuntimeError("x"), "correctness", "correctness", BUILD_LOG_NAME),
        (CandidateHungError("late"), "correctness", "hung", BUILD_LOG_NAME),
        (CandidateHungError("late"), "recheck", "correctness", BUILD_LOG_NAME),
    ],
)
def test_each_failure_has_one_stage_and_log(
    exc: Exception, step: Step, stage: str, log: str
) -> None:
    failure = failure_of(exc, step)
    assert (failure.stage, failure.log_name) == (stage, log)
    assert failure.heading.startswith("Backend")


def test_a_worker_error_caused_by_a_missed_deadline_is_hung_in_the_check() -> None:
    """In a worker the deadline's error arrives as the cause of the worker's."""
    error = WorkerError("the call did not answer")
    error.__cause__ = CandidateHungError("late")
    assert failure_of(error, "correctness").stage == "hung"


@given(exc=st.sampled_from(_EXCEPTIONS), step=st.sampled_from(["correctness", "timing", "recheck"]))
def test_every_failure_lands_on_a_known_stage(exc: Exception, step: Step) -> None:
    assert failure_of(exc, step).stage in STAGES


@given(
    latencies=st.lists(st.floats(1e-6, 10.0), min_size=1, max_size=20),
    grace=st.floats(0.01, 60.0),
)
def test_a_calls_deadline_is_twenty_times_eagers_slowest_at_least_the_grace(
    latencies: list[float], grace: float
) -> None:
    config = ProfilingConfig(hang_grace_s=grace)
    deadline, note = call_deadline(config, tuple(latencies))
    assert deadline == max(20 * max(latencies), grace)
    assert "20x eager's slowest call" in note


def test_without_eagers_timings_the_deadline_is_the_budget_and_the_grace() -> None:
    config = ProfilingConfig(max_seconds=7.0, hang_grace_s=3.0)
    assert call_deadline(config, None)[0] == call_deadline(config, ())[0] == 10.0


def test_a_builds_failure_is_recorded_at_the_stage_it_names() -> None:
    """In process and from a worker alike: one table for where a build's failure lands."""
    cause = ValueError("AITune's own check")
    assert build_failure(StageError("correctness", cause)) == ("correctness", cause)
    late = CandidateHungError("late")
    assert build_failure(late) == ("hung", late)
    missing = BackendUnavailableError("no onnxruntime")
    assert build_failure(missing) == ("unavailable", missing)
    sorted_there = WorkerError("x", stage="unavailable")  # sorted in the worker by this table
    assert build_failure(sorted_there) == ("unavailable", sorted_there)
    unknown = WorkerError("x", stage="not-a-stage")
    assert build_failure(unknown) == ("build", unknown)
    assert build_failure(RuntimeError("boom"))[0] == "build"


def test_the_build_stage_builds_a_copy_or_runs_the_drivers_own_step(tmp_path: Path) -> None:
    """The blueprint stays reusable; a driver's build step gets the blueprint itself."""
    module, spec, data = make_case()
    target = TuneTarget(module, "m", spec, data, "cpu", tmp_path)
    blueprint = Pruned()
    built = build_here(target, blueprint, None)
    assert built is not blueprint and built.is_active and not blueprint.is_active
    assert build_here(target, blueprint, lambda b: ("driver's", b)) == ("driver's", blueprint)


def test_an_arena_before_the_tune_is_open_has_nothing_to_time(tmp_path: Path) -> None:
    module, spec, data = make_case()
    session = TuneSession(TuneTarget(module, "m", spec, data, "cpu", tmp_path), None, strategy="")
    with pytest.raises(InvalidStateError, match="not open"):
        session.arena().timing()


def test_a_held_out_draw_that_fails_is_the_candidates_recorded_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Arena is made inside the correctness step: the tune goes on, the failure is recorded."""
    import aitune_fp.pipeline.tune as tune

    def broken(*args: object, **kwargs: object) -> tuple[()]:
        raise RuntimeError("held-out draw broke")

    monkeypatch.setattr(tune, "checked_inputs", broken)
    module, spec, data = make_case()
    session = TuneSession(TuneTarget(module, "m", spec, data, "cpu", tmp_path), None, strategy="")
    outcome = session.try_candidate(Pruned())
    assert not outcome.ok and outcome.stage == "correctness"
    assert "held-out draw broke" in (outcome.reason or "")


def test_ranking_a_candidate_on_its_own_leaves_the_tunes_batch_alone(tmp_path: Path) -> None:
    """A plain session times each candidate on a batch of its own; the session's stays unset."""
    module, spec, data = make_case()
    session = TuneSession(TuneTarget(module, "m", spec, data, "cpu", tmp_path), None, strategy="")
    outcome = session.try_candidate(Pruned())
    assert outcome.ok and outcome.result is None
    rank = vetting.rank(session.arena(), outcome)
    assert rank is not None and rank > 0
    assert session.arena().opened is None
