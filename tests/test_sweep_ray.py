"""``aitune-fp sweep --ray`` on a local Ray started here (2 CPUs, one timing slot).

Skipped outside CI when Ray is not installed (the ``ray`` extra); in CI, which installs it, a
missing Ray fails the run instead. One Ray for the module; tiny models, eager only, short budget.
"""

from __future__ import annotations

import itertools
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import ray  # the ray extra: in the development install (README) and CI

from aitune_fp.events import ingest
from aitune_fp.sweep.ray_executor import TIMING_RESOURCE, RayExecutor
from aitune_fp.sweep.run import run_sweep, summarize_sweep
from aitune_fp.sweep.spec import parse_sweep
from aitune_fp.sweep.task import CANCELLED, HUNG, TaskOutcome

from .sweep_models import tiny_and_broken_toml
from .test_sweep import TINY_BUDGET, VALIDATOR, read_log, sweep_data

pytestmark = pytest.mark.ray


@pytest.fixture(scope="module", autouse=True)
def local_ray() -> Iterator[None]:
    """A local Ray on 2 CPUs with one timing slot, as the executor's own local start declares."""
    os.environ["AITUNE_FP_TEST_DRIVER_PID"] = str(os.getpid())  # killer() spares this process
    ray.init(
        num_cpus=2,
        resources={TIMING_RESOURCE: 1},
        include_dashboard=False,
        log_to_driver=False,
    )
    try:
        yield
    finally:
        ray.shutdown()


def _finished(log: Path) -> list[dict[str, Any]]:
    return [x for x in read_log(log) if x["event"] == "aitune_fp.sweep.task_finished"]


def test_timings_never_overlap_on_the_node(tmp_path: Path) -> None:
    """Four tasks on 2 CPUs: the timing slot runs them one at a time, in worker processes."""
    log = tmp_path / "events.jsonl"
    spec = parse_sweep(sweep_data("tiny", "tiny-2", "tiny-3", "tiny-4"))
    result = run_sweep(spec, log_path=str(log), executor=RayExecutor())
    assert [s.state for s in result.statuses] == ["finished"] * 4
    # monotonic: one host's clock that no NTP step can move (these VMs' wall clocks do jump)
    spans = sorted((x["started_monotonic_s"], x["finished_monotonic_s"]) for x in _finished(log))
    assert len(spans) == 4
    for (_, end), (start, _) in itertools.pairwise(spans):
        assert start >= end, f"two timings overlapped: {spans}"
    assert all(x["pid"] != os.getpid() for x in _finished(log))  # ran in Ray workers
    assert all(x["threads"] == len(os.sched_getaffinity(0)) for x in _finished(log))
    for line in read_log(log):
        VALIDATOR.validate(line)
    assert len(ingest.ingest(str(log)).runs) == 4


def test_failing_model_and_killed_worker_are_recorded(tmp_path: Path) -> None:
    """A factory that raises and a worker killed with SIGKILL: both failed, the others finish."""
    log = tmp_path / "events.jsonl"
    spec = parse_sweep(sweep_data("tiny", "broken", "killer", "tiny-2"))
    result = run_sweep(spec, log_path=str(log), executor=RayExecutor(max_retries=0))
    states = {s.model: s for s in result.statuses}
    assert states["tiny"].state == states["tiny-2"].state == "finished"
    assert states["broken"].state == "failed" and states["broken"].error_type == "UserModelError"
    assert "broken on purpose" in (states["broken"].reason or "")
    killed = states["killer"]
    assert killed.state == "failed"
    assert killed.error_type == "WorkerCrashedError"
    assert "worker died" in (killed.reason or "")
    last = read_log(log)[-1]
    assert last["event"] == "aitune_fp.sweep.finished"
    assert sorted(last["failed_models"]) == ["broken", "killer"]


def test_ctrl_c_cancels_outstanding_tasks_then_resume_finishes(tmp_path: Path) -> None:
    """Ctrl-C after the first outcome: the rest are cancelled and recorded; --resume runs them."""
    log = tmp_path / "events.jsonl"
    spec = parse_sweep(sweep_data("tiny", "tiny-2", "tiny-3", "tiny-4"))
    fired = threading.Event()

    def interrupt_once(outcome: TaskOutcome) -> None:
        if not fired.is_set():
            fired.set()
            # Ctrl-C surfacing in the driver while it handles the first outcome (raised here,
            # not via _thread.interrupt_main, whose delivery raced the end of the sweep)
            raise KeyboardInterrupt

    result = run_sweep(spec, log_path=str(log), executor=RayExecutor(), on_outcome=interrupt_once)
    assert result.interrupted
    finished = [s.model for s in result.statuses if s.state == "finished"]
    cancelled = [s.model for s in result.statuses if s.error_type == CANCELLED]
    assert finished and cancelled
    assert sorted(finished + cancelled) == ["tiny", "tiny-2", "tiny-3", "tiny-4"]
    assert [r.module_name for r in ingest.ingest(str(log)).runs] == finished

    again = run_sweep(spec, log_path=str(log), executor=RayExecutor(), resume=True)
    assert not again.interrupted
    states = {s.model: s.state for s in again.statuses}
    assert {m: states[m] for m in finished} == dict.fromkeys(finished, "skipped")
    assert {m: states[m] for m in cancelled} == dict.fromkeys(cancelled, "finished")
    assert sorted(r.module_name for r in ingest.ingest(str(log)).runs) == sorted(states)


def test_command_with_ray(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``aitune-fp sweep FILE --ray`` (on the Ray already started) prints the summary, exit 4 (a model failed)."""
    from aitune_fp.cli import main

    path = tmp_path / "s.toml"
    path.write_text(tiny_and_broken_toml("on-ray"), "utf-8")
    log = tmp_path / "e.jsonl"
    assert main(["sweep", str(path), "--ray", "--json-log", str(log)]) == 4  # a model failed
    out, err = capsys.readouterr()
    assert "Sweep on-ray (ray" in out and "1 model failed: broken" in out
    assert "✅ tiny: baseline" in err or "✅ tiny: candidate" in err
    assert "❌ broken: UserModelError" in err
    assert main(["report", str(log)]) == 0


def test_a_cluster_that_cannot_place_the_tasks_fails_every_model_with_why(tmp_path: Path) -> None:
    """No GPU in the cluster for a CUDA sweep: nothing is submitted, each model says why."""
    log = tmp_path / "events.jsonl"
    spec = parse_sweep(sweep_data("tiny", "tiny-2", device="cuda"))
    result = run_sweep(spec, log_path=str(log), executor=RayExecutor(device="cuda"))
    assert [s.state for s in result.statuses] == ["failed", "failed"]
    assert {s.error_type for s in result.statuses} == {"InvalidStateError"}
    assert all("no GPU in the Ray cluster" in (s.reason or "") for s in result.statuses)
    assert read_log(log)[-1]["failed_models"] == ["tiny", "tiny-2"]


def test_a_hung_task_is_cancelled_and_the_rest_finish(tmp_path: Path) -> None:
    """A factory stuck in native code, deadline 12 s: its worker killed, recorded hung; tiny tunes.

    The deadline leaves a tiny tune room for its workers' fork server (a Ray task runs every core).
    """
    log = tmp_path / "events.jsonl"
    budget = {**TINY_BUDGET, "task_timeout_s": 12}
    spec = parse_sweep(sweep_data("hanger", "tiny", budget=budget))
    start = time.monotonic()
    result = run_sweep(spec, log_path=str(log), executor=RayExecutor())
    assert time.monotonic() - start < 60  # not the factory's 1000 s
    states = {s.model: s for s in result.statuses}
    assert states["tiny"].state == "finished"
    hung = states["hanger"]
    assert hung.state == "failed" and hung.error_type == HUNG
    assert "hung" in (hung.reason or "") and "task_timeout_s" in (hung.reason or "")
    lines = read_log(log)
    for line in lines:
        VALIDATOR.validate(line)
    assert lines[-1]["failed_models"] == ["hanger"]
    summary = summarize_sweep(result.statuses, {r.run_id: r for r in ingest.ingest(str(log)).runs})
    assert [(s.model, s.error_type) for s in summary.failed] == [("hanger", HUNG)]
