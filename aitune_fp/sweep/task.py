"""One sweep task: one model's tune as a picklable value; the local executor runs tasks in turn."""

from __future__ import annotations

import multiprocessing
import multiprocessing.connection
import os
import platform
import socket
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from aitune_fp.core.config import ProfilingConfig
from aitune_fp.core.report import TuneReport
from aitune_fp.errors import BackendUnavailableError, InvalidStateError
from aitune_fp.events.sending import sinks, to_record
from aitune_fp.events.sweep import TaskFailed, TaskFinished
from aitune_fp.profiling.serving import fork_server
from aitune_fp.profiling.threads import set_threads
from aitune_fp.sweep.spec import BackendChoice, ModelEntry, SweepSpec

#: ``error_type`` of a model whose task was cancelled (Ctrl-C on the driver) before it ended.
CANCELLED = "Cancelled"
#: ``error_type`` of a model whose task ran past its deadline and was killed.
HUNG = "TaskHungError"
#: ``error_type`` of a model whose task's process died before sending its outcome.
CRASHED = "WorkerCrashedError"


@attrs.frozen(kw_only=True)
class SweepTask:
    """One model's tune with the sweep's settings, as a picklable value (a Ray task's only argument)."""

    sweep_id: str
    model: ModelEntry
    spec: SweepSpec
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
    """One task per model of ``spec``, each with its own cache folder and the sweep's deadline."""
    return [
        SweepTask(
            sweep_id=sweep_id,
            model=m,
            spec=spec,
            cache_dir=os.path.join(cache_dir, f"{i:03d}-{safe(m.name)}"),
            task_timeout_s=spec.task_deadline_s(),
        )
        for i, m in enumerate(spec.models)
    ]


def safe(name: str) -> str:
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
    ids = {"run_id": task.sweep_id, "module_name": task.model.name}
    failed = TaskFailed(**ids, error_type=error_type, reason=reason, tune_run_id=run_id, hostname=hostname)  # fmt: skip
    last = to_record(failed.to_event())
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
    """Tune one model on this process's device, events tagged; never raises (failure: outcome)."""
    started, started_mono = time.time(), time.monotonic()
    hostname = socket.gethostname()
    records: list[dict[str, Any]] = []
    try:
        threads = task.spec.profiling.threads
        if task.use_all_cores and task.spec.device == "cpu":  # it holds its node: every CPU
            threads = threads or len(os.sched_getaffinity(0))
        if threads is not None:  # the one code path of ``tune --threads``
            set_threads(threads)
        device, device_name = _device_identity(task.spec.device)
        tags = {"sweep_id": task.sweep_id, "hostname": hostname, "device_name": device_name}
        keep = lambda e: records.append({**to_record(e), **tags})  # noqa: E731
        with sinks(keep, log=False):
            report = _tune(task, device)
    except Exception as exc:
        from aitune_fp.core.messages import one_line

        return failed_outcome(
            task, type(exc).__name__, one_line(exc), records=records, hostname=hostname
        )
    import torch  # the tune loaded it: reading its threads now cannot change them

    finished, finished_mono = time.time(), time.monotonic()
    last = TaskFinished(
        run_id=task.sweep_id,
        module_name=task.model.name,
        tune_run_id=report.run_id,
        outcome=report.outcome or "error",
        hostname=hostname,
        device=device,
        device_name=device_name,
        pid=os.getpid(),
        threads=task.spec.profiling.threads or torch.get_num_threads(),
        started_unix_s=started,
        finished_unix_s=finished,
        started_monotonic_s=started_mono,
        finished_monotonic_s=finished_mono,
        duration_s=max(finished_mono - started_mono, 0.0),
    )
    records.append(to_record(last.to_event()))
    return TaskOutcome(model=task.model.name, records=tuple(records), ok=True)


def _tune(task: SweepTask, device: str) -> TuneReport:
    from aitune_fp.backends import registry
    from aitune_fp.models import at_batch_size, load_model

    model = load_model(task.model.model, input_shape=task.model.input_shape)
    if task.model.batch_size is not None:
        model = at_batch_size(model, task.model.batch_size, name=f"{task.model.name}: batch_size")
    spec = task.spec
    choices = spec.backends or [BackendChoice(name=n) for n in spec.backend_names()]
    backends = [registry.make_backend(b.name, device, dict(b.settings)) for b in choices]
    os.makedirs(task.cache_dir, exist_ok=True)
    isolation = "in_process" if spec.isolation == "in_process" else None
    return tune_model(
        model, task.model.name, backends, spec.strategy, dict(spec.strategy_options), device,
        task.cache_dir, threshold=spec.threshold, profiling=spec.profiling,
        accuracy=dict(spec.accuracy), isolation=isolation,
    )[0]  # fmt: skip


def tune_model(
    model: Any,
    name: str,
    backends: Sequence[Any],
    strategy_name: str,
    options: Mapping[str, Any],
    device: str,
    cache_dir: Any,
    *,
    threshold: float,
    profiling: ProfilingConfig,
    accuracy: Mapping[str, Any],
    isolation: Any,
) -> tuple[TuneReport, Exception | None]:
    """Tune a loaded model (``models.load_model``'s) as ``name`` over ``backends`` (``tune``, a sweep task).

    Returns the report and the ``NoValidBackendError`` of a strategy that found none (first-wins).
    """
    import torch

    from aitune_fp.adapters.validation import validation_of, with_performance_validation
    from aitune_fp.correctness.closeness import Closeness
    from aitune_fp.pipeline.strategy_registry import make_strategy
    from aitune_fp.pipeline.values import NoValidBackendError

    strategy = with_performance_validation(
        make_strategy(strategy_name, backends, **options),
        min_speedup_threshold_percent=threshold,
        profiling_config=profiling,
        closeness=Closeness(**accuracy),
        isolation=isolation,
    )
    error: Exception | None = None
    with torch.no_grad():
        module = model.module.to(device)
        try:
            strategy.tune(module, name, model.graph_spec, [model.sample], device, cache_dir)
        except NoValidBackendError as exc:  # the report has every candidate's reason
            error = exc
    report = validation_of(strategy).last_report
    if report is None:  # pragma: no cover - the wrapper leaves a report for every tune
        raise InvalidStateError("the tune left no report")
    return report, error


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
    """Runs the tasks one after another here; one with a deadline in a child killed at it."""

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
        context = fork_server()
        receive, send = context.Pipe(duplex=False)
        process = context.Process(
            target=_child_main, args=(send, task), name=f"aitune_fp-task-{safe(task.model.name)}"
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
