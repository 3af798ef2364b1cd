"""Run a sweep: one tune task per model, one JSON-lines log for all of them, a summary at the end.

A task (:func:`run_task`) runs in whatever process the executor picks and never raises: its tune's
events come back as records in its :class:`TaskOutcome`, which ends with ``task_finished`` or
``task_failed``. The driver (:func:`run_sweep`) writes each outcome's records to the log as it
arrives, records every model that got no outcome (a dead worker, Ctrl-C) as failed, and reads
``--resume`` state from the same log. :class:`LocalExecutor` runs the tasks one after another,
each in a child process it can kill at the task's deadline; ``aitune_fp.sweep.ray_executor`` runs
them as Ray tasks. A task past its deadline (``task_timeout_s``) is killed and recorded failed
with ``error_type`` :data:`HUNG`; the sweep goes on.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import multiprocessing.connection
import os
import platform
import socket
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import IO, Any, Protocol

import attrs

from aitune_fp import events
from aitune_fp.core.config import ProfilingConfig
from aitune_fp.core.report import TuneReport
from aitune_fp.errors import BackendUnavailableError, InvalidStateError
from aitune_fp.profiling import set_threads
from aitune_fp.sweep.spec import BackendChoice, ModelEntry, SweepSpec

__all__ = [
    "CANCELLED",
    "HUNG",
    "Executor",
    "LocalExecutor",
    "ModelStatus",
    "SweepResult",
    "SweepTask",
    "TaskOutcome",
    "completed_models",
    "failed_outcome",
    "make_tasks",
    "read_sweep_log",
    "run_sweep",
    "run_task",
]

#: ``error_type`` of a model whose task was cancelled (Ctrl-C on the driver) before it ended.
CANCELLED = "Cancelled"
#: ``error_type`` of a model whose task ran past its deadline and was killed.
HUNG = "TaskHungError"
#: ``error_type`` of a model whose task's process died before sending its outcome.
CRASHED = "WorkerCrashedError"


@attrs.frozen(kw_only=True)
class SweepTask:
    """Everything one model's tune needs, as a picklable value (a Ray task's only argument)."""

    sweep_id: str
    model: ModelEntry
    device: str
    backends: tuple[BackendChoice, ...]
    strategy: str
    threshold: float
    profiling: ProfilingConfig
    cache_dir: str
    #: CPU: time with every core this process may use. Ray starts a worker with
    #: ``OMP_NUM_THREADS=num_cpus`` (1); the task holds the whole node, so it takes them all back
    #: as a tune in the driver process would have them: in the environment before torch loads
    #: (OpenMP reads it then; setting threads later measured slower here), then in torch.
    use_all_cores: bool = False
    #: Seconds the task may run before its process is killed and it is recorded as hung (None:
    #: no deadline; the local executor then runs it in this process).
    task_timeout_s: float | None = None


@attrs.frozen(kw_only=True)
class TaskOutcome:
    """What a task sends back: its events as JSON-ready records, the last one saying how it ended."""

    model: str
    records: tuple[Mapping[str, Any], ...]
    ok: bool


def make_tasks(spec: SweepSpec, sweep_id: str, cache_dir: str) -> list[SweepTask]:
    """One task per model of ``spec``, the defaults filled in (each with its own cache folder)."""
    backends = spec.backends or tuple(BackendChoice(name=n) for n in spec.backend_names())
    return [
        SweepTask(
            sweep_id=sweep_id,
            model=m,
            device=spec.device,
            backends=backends,
            strategy=spec.strategy,
            threshold=spec.threshold,
            profiling=spec.profiling,
            cache_dir=os.path.join(cache_dir, f"{i:03d}-{_safe(m.name)}"),
            task_timeout_s=spec.task_deadline_s(),
        )
        for i, m in enumerate(spec.models)
    ]


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)[:60] or "model"


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.partition(":")[2].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "cpu"


def _device_identity(device: str) -> tuple[str, str]:
    """The device string the tune uses and the device's name (GPU model or CPU model)."""
    import torch

    if device == "cuda":
        if not torch.cuda.is_available():
            raise BackendUnavailableError(
                "the sweep asks for device cuda but this worker sees no CUDA device"
            )
        index = torch.cuda.current_device()
        return f"cuda:{index}", str(torch.cuda.get_device_name(index))
    return "cpu", _cpu_name()


def failed_outcome(
    task: SweepTask,
    error_type: str,
    reason: str,
    *,
    records: Sequence[Mapping[str, Any]] = (),
    hostname: str | None = None,
) -> TaskOutcome:
    """The outcome of a task that ended without a report: its records so far, then ``task_failed``."""
    run_id = next((str(r["run_id"]) for r in records if "run_id" in r), None)
    last = events.to_record(
        events.task_failed(
            task.sweep_id,
            task.model.name,
            error_type=error_type,
            reason=reason,
            tune_run_id=run_id,
            hostname=hostname,
        )
    )
    return TaskOutcome(model=task.model.name, records=(*records, last), ok=False)


def hung_outcome(task: SweepTask) -> TaskOutcome:
    """The failed outcome of a task killed at its deadline (``task_timeout_s``)."""
    return failed_outcome(
        task,
        HUNG,
        f"hung: still running {task.task_timeout_s:g} s after it started "
        "(budget.task_timeout_s); its process was killed",
    )


def run_task(task: SweepTask) -> TaskOutcome:
    """Tune one model on this process's device; never raises (a failure is the outcome).

    Loads the model, builds the strategy over the task's backends, runs the validating tune with
    its events collected, and tags every event with the sweep, the host and the device.
    """
    started, started_mono = time.time(), time.monotonic()
    hostname = socket.gethostname()
    records: list[dict[str, Any]] = []
    try:
        threads = _process_threads(task)
        if threads is not None:  # the one code path of ``tune --threads``
            set_threads(threads)
        device, device_name = _device_identity(task.device)
        tags = {"sweep_id": task.sweep_id, "hostname": hostname, "device_name": device_name}
        with events.collecting(lambda r: records.append({**r, **tags})):
            report = _tune(task, device)
    except Exception as exc:
        from aitune_fp.session import one_line

        return failed_outcome(
            task, type(exc).__name__, one_line(exc), records=records, hostname=hostname
        )
    last = events.task_finished(
        task.sweep_id,
        task.model.name,
        tune_run_id=report.run_id,
        outcome=report.outcome or "error",
        hostname=hostname,
        device=device,
        device_name=device_name,
        pid=os.getpid(),
        threads=_threads(task),
        started_unix_s=started,
        finished_unix_s=time.time(),
        started_monotonic_s=started_mono,
        finished_monotonic_s=time.monotonic(),
    )
    records.append(events.to_record(last))
    return TaskOutcome(model=task.model.name, records=tuple(records), ok=True)


def _all_cores(task: SweepTask) -> int:
    """Intra-op threads for a task that holds its node: the budget's ``threads``, else every CPU."""
    return task.profiling.threads or len(os.sched_getaffinity(0))


def _process_threads(task: SweepTask) -> int | None:
    """The threads the task's process runs with (None: leave them), set by ``set_threads``.

    A CPU task that holds its node: :func:`_all_cores`; otherwise the budget's ``threads``
    (as ``tune --threads`` sets them), or nothing.
    """
    if task.use_all_cores and task.device == "cpu":
        return _all_cores(task)
    return task.profiling.threads


def _threads(task: SweepTask) -> int:
    """The intra-op threads the task timed with: the budget's ``threads``, else torch's setting."""
    import torch

    return task.profiling.threads or int(torch.get_num_threads())


def _tune(task: SweepTask, device: str) -> TuneReport:
    import torch

    from aitune_fp.backends import registry
    from aitune_fp.models import load_model
    from aitune_fp.strategies import NoValidBackendError, make_strategy
    from aitune_fp.validation import validation_of, with_performance_validation

    model = load_model(task.model.model, input_shape=task.model.input_shape)
    backends = [registry.make_backend(b.name, device, b.settings_dict()) for b in task.backends]
    strategy = with_performance_validation(
        make_strategy(task.strategy, backends),
        min_speedup_threshold_percent=task.threshold,
        profiling_config=task.profiling,
    )
    os.makedirs(task.cache_dir, exist_ok=True)
    with torch.no_grad():
        module = model.module.to(device)
        # first-wins with nothing passing raises; the report has every candidate's reason
        with contextlib.suppress(NoValidBackendError):
            strategy.tune(
                module, task.model.name, model.graph_spec, [model.sample], device, task.cache_dir
            )
    report = validation_of(strategy).last_report
    if report is None:  # pragma: no cover - the wrapper leaves a report for every tune
        raise InvalidStateError("the tune left no report")
    return report


class Executor(Protocol):
    """Runs tasks and hands each outcome to ``on_outcome`` as it completes (in completion order).

    A Ctrl-C propagates as KeyboardInterrupt after outstanding work is cancelled; the driver
    records every model without an outcome as failed.
    """

    name: str

    def run(self, tasks: Sequence[SweepTask], on_outcome: Callable[[TaskOutcome], None]) -> None:
        """Run ``tasks``; call ``on_outcome`` once per task that ends."""


#: What a child process sends instead of an outcome when a KeyboardInterrupt ended its task.
_INTERRUPTED = "interrupted"


def _child_main(conn: multiprocessing.connection.Connection, task: SweepTask) -> None:
    """A task's child process: run it, send its outcome (or that Ctrl-C stopped it) back."""
    try:
        result: TaskOutcome | str = run_task(task)
    except KeyboardInterrupt:
        result = _INTERRUPTED
    conn.send(result)
    conn.close()


def _stop(process: multiprocessing.process.BaseProcess) -> None:
    """End a child process: SIGTERM, then SIGKILL if it is still there 5 s later."""
    if process.is_alive():
        process.terminate()
        process.join(5.0)
    if process.is_alive():
        process.kill()
    process.join()


class LocalExecutor:
    """Runs the tasks one after another on this machine: no extra dependency, no overlap.

    A task with a deadline (every task a sweep file makes has one) runs in a fresh child process
    (``multiprocessing``, ``spawn``: about 1-1.5 s to start and import torch here) that is killed
    at the deadline, the task then recorded as hung; a task without one, or every task with
    ``in_process=True`` (debugging), runs in this process and cannot be stopped.
    """

    name = "local"

    def __init__(self, *, in_process: bool = False) -> None:
        """``in_process``: run every task in this process, deadlines ignored."""
        self.in_process = in_process

    def run(self, tasks: Sequence[SweepTask], on_outcome: Callable[[TaskOutcome], None]) -> None:
        """Run each task in turn (a Ctrl-C stops at the task in progress, killing its process)."""
        for task in tasks:
            if self.in_process or task.task_timeout_s is None:
                on_outcome(run_task(task))
            else:
                on_outcome(self._in_child(task, task.task_timeout_s))

    @staticmethod
    def _in_child(task: SweepTask, timeout_s: float) -> TaskOutcome:
        context = multiprocessing.get_context("spawn")
        receive, send = context.Pipe(duplex=False)
        process = context.Process(
            target=_child_main, args=(send, task), name=f"aitune_fp-task-{_safe(task.model.name)}"
        )
        try:
            process.start()
            send.close()  # the child holds the only writer: its death reads as end of file
            deadline = time.monotonic() + timeout_s
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    return hung_outcome(task)
                ready = multiprocessing.connection.wait([receive, process.sentinel], left)
                if receive in ready:
                    try:
                        result = receive.recv()
                    except EOFError:
                        break
                    if result == _INTERRUPTED:
                        raise KeyboardInterrupt
                    assert isinstance(result, TaskOutcome)
                    return result
                if process.sentinel in ready and not receive.poll():
                    break
        finally:
            _stop(process)
            send.close()
            receive.close()
        return failed_outcome(
            task,
            CRASHED,
            f"the task's process died unexpectedly (exit code {process.exitcode})",
        )


@attrs.frozen(kw_only=True)
class ModelStatus:
    """How one model of the sweep ended: done (with its tune's run id), failed, or skipped."""

    model: str
    state: str  # "finished", "failed", "skipped" (--resume: finished in an earlier sweep)
    tune_run_id: str | None = None
    error_type: str | None = None
    reason: str | None = None
    hostname: str | None = None


@attrs.frozen(kw_only=True)
class SweepResult:
    """The sweep's outcome per model (file order), its log, and whether Ctrl-C stopped it."""

    sweep_id: str
    log_path: str
    executor: str
    statuses: tuple[ModelStatus, ...]
    duration_s: float
    interrupted: bool = False

    @property
    def failed(self) -> tuple[str, ...]:
        """Models that ended without a report."""
        return tuple(s.model for s in self.statuses if s.state == "failed")


def read_sweep_log(path: str) -> list[Mapping[str, Any]]:
    """The valid ``aitune_fp.sweep.task_*`` events of a log, in order (empty if there is none)."""
    from aitune_fp.ingest import EventLine, read_events

    if not os.path.exists(path):
        return []
    return [
        item.fields
        for item in read_events(path)
        if isinstance(item, EventLine) and item.event in (events.TASK_FINISHED, events.TASK_FAILED)
    ]


def completed_models(path: str) -> dict[str, str]:
    """Models with a finished task in the log at ``path``: model -> its latest tune run id."""
    done: dict[str, str] = {}
    for fields in read_sweep_log(path):
        if fields["event"] == events.TASK_FINISHED:
            done[str(fields["module_name"])] = str(fields["tune_run_id"])
    return done


def _write(handle: IO[str], records: Iterable[Mapping[str, Any]]) -> None:
    for record in records:
        handle.write(json.dumps(record, ensure_ascii=False, allow_nan=False, default=str) + "\n")
    handle.flush()


def _status(outcome: TaskOutcome) -> ModelStatus:
    last = outcome.records[-1] if outcome.records else {}
    if outcome.ok:
        return ModelStatus(
            model=outcome.model,
            state="finished",
            tune_run_id=last.get("tune_run_id"),
            hostname=last.get("hostname"),
        )
    return ModelStatus(
        model=outcome.model,
        state="failed",
        tune_run_id=last.get("tune_run_id"),
        error_type=last.get("error_type"),
        reason=last.get("reason"),
        hostname=last.get("hostname"),
    )


def run_sweep(
    spec: SweepSpec,
    *,
    log_path: str,
    executor: Executor | None = None,
    resume: bool = False,
    cache_dir: str | None = None,
    on_outcome: Callable[[TaskOutcome], None] | None = None,
) -> SweepResult:
    """Run every model of ``spec`` (those already finished in the log skipped with ``resume``).

    Appends to ``log_path``: ``sweep.started``, each task's events as it completes, a
    ``task_failed`` for every model left without an outcome, ``sweep.finished``. Nothing is lost
    on Ctrl-C (``interrupted``) or when the executor itself fails (each model left says why).
    """
    executor = executor or LocalExecutor()
    start = time.time()
    sweep_id = events.new_run_id()
    done = completed_models(log_path) if resume else {}
    todo = [m for m in spec.models if m.name not in done]
    cache = cache_dir or tempfile.mkdtemp(prefix="aitune_fp-sweep-")
    todo_names = {m.name for m in todo}
    tasks = [t for t in make_tasks(spec, sweep_id, cache) if t.model.name in todo_names]
    statuses: dict[str, ModelStatus] = {
        name: ModelStatus(model=name, state="skipped", tune_run_id=run_id)
        for name, run_id in done.items()
        if name in spec.model_names()
    }
    interrupted = False
    with open(log_path, "a", encoding="utf-8") as handle:
        _write(
            handle,
            [
                events.to_record(
                    events.sweep_started(
                        sweep_id,
                        spec.name,
                        executor=executor.name,
                        models=[t.model.name for t in tasks],
                        skipped=sorted(statuses),
                    )
                )
            ],
        )

        def accept(outcome: TaskOutcome) -> None:
            if outcome.model in statuses:
                return  # a second outcome for one model (cannot happen; keep the first)
            _write(handle, outcome.records)
            statuses[outcome.model] = _status(outcome)
            if on_outcome is not None:
                on_outcome(outcome)

        broken: Exception | None = None
        try:
            executor.run(tasks, accept)
        except KeyboardInterrupt:
            interrupted = True
        except Exception as exc:  # the executor itself failed (no cluster, no slot): record it
            broken = exc
        for task in tasks:
            if task.model.name not in statuses:
                if interrupted:
                    kind = CANCELLED
                    why = "cancelled: the sweep was interrupted (Ctrl-C) before this model finished"
                elif broken is not None:
                    kind = type(broken).__name__
                    why = f"the {executor.name} executor failed: {broken}"
                else:
                    kind, why = "Lost", "the executor returned no outcome for this model"
                accept(failed_outcome(task, kind, why))
        ordered = tuple(statuses[m.name] for m in spec.models if m.name in statuses)
        duration = time.time() - start
        _write(
            handle,
            [
                events.to_record(
                    events.sweep_finished(
                        sweep_id,
                        spec.name,
                        finished=[s.model for s in ordered if s.state != "failed"],
                        failed=[s.model for s in ordered if s.state == "failed"],
                        duration_s=duration,
                    )
                )
            ],
        )
    return SweepResult(
        sweep_id=sweep_id,
        log_path=log_path,
        executor=executor.name,
        statuses=ordered,
        duration_s=duration,
        interrupted=interrupted,
    )
