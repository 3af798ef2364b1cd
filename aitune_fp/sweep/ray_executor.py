"""Sweep tasks as Ray tasks (Ray imported here only), each holding a whole device."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import attrs
import structlog

from aitune_fp.errors import InvalidStateError
from aitune_fp.sweep.task import SweepTask, TaskOutcome, failed_outcome, hung_outcome, run_task

_log = structlog.get_logger("aitune_fp.sweep")

#: The per-node custom resource a CPU timing task holds (each node has exactly one unit).
TIMING_RESOURCE = "aitune_fp_timing_slot"
#: How often (seconds) the driver checks running tasks against their deadlines.
POLL_S = 1.0


class _Starts:
    """A Ray actor that counts each task's starts (a retry starts again), for the deadlines."""

    def __init__(self) -> None:
        self._starts: dict[str, int] = {}

    def started(self, model: str) -> None:
        """The task of ``model`` has started (once more)."""
        self._starts[model] = self._starts.get(model, 0) + 1

    def snapshot(self) -> dict[str, int]:
        """Every task that has started: model -> how many times."""
        return dict(self._starts)


def _run_reporting_start(task: SweepTask, starts: Any) -> TaskOutcome:
    """The Ray task: say it has started (when it has a deadline), then :func:`run_task`."""
    if starts is not None:
        starts.started.remote(task.model.name)
    return run_task(task)


def import_ray() -> Any:
    """``import ray``, or an error that says which extra to install."""
    try:
        import ray
    except ImportError as exc:
        raise InvalidStateError(
            "the Ray executor needs Ray: pip install 'aitune-fp[ray]' (or pip install ray)"
        ) from exc
    return ray


def task_options(device: str, max_retries: int) -> dict[str, Any]:
    """The Ray options of one sweep task: a whole GPU on CUDA, the node's timing slot on CPU.

    ``max_retries`` re-runs only a task whose worker or node died, never an application error.
    """
    options: dict[str, Any] = {"max_retries": max_retries, "retry_exceptions": False}
    if device == "cuda":
        options.update(num_gpus=1, num_cpus=1)
    else:
        options.update(num_cpus=1, resources={TIMING_RESOURCE: 1})
    return options


class RayExecutor:
    """Runs each task as a Ray task on the Ray at ``address``, or a local one (``address=None``)."""

    name = "ray"

    def __init__(
        self,
        address: str | None = None,
        *,
        device: str = "cpu",
        max_retries: int = 0,
        num_cpus: int | None = None,
    ) -> None:
        """Keep where to connect and how tasks ask for devices; nothing starts until ``run``."""
        self.address = address
        self.device = device
        self.max_retries = max_retries
        self.num_cpus = num_cpus
        #: Pending task -> (starts seen, when the driver first saw the latest), for deadlines.
        self._started: dict[Any, tuple[int, float]] = {}

    def _connect(self, ray: Any) -> bool:
        """Initialise Ray unless it already is; True when this call started it."""
        if ray.is_initialized():
            return False
        if self.address is None:
            ray.init(
                num_cpus=self.num_cpus,
                resources={TIMING_RESOURCE: 1},
                include_dashboard=False,
                log_to_driver=False,
            )
        else:
            ray.init(address=self.address, log_to_driver=False)
        return True

    def _check_cluster(self, ray: Any) -> None:
        need = "GPU" if self.device == "cuda" else TIMING_RESOURCE
        if ray.cluster_resources().get(need, 0) < 1:
            how = (
                "no GPU in the Ray cluster"
                if need == "GPU"
                else f"no node declares the custom resource {TIMING_RESOURCE!r}: start each CPU "
                f"node with ray start --resources='{{\"{TIMING_RESOURCE}\": 1}}'"
            )
            raise InvalidStateError(f"the sweep cannot place its timing tasks: {how}")

    def run(self, tasks: Sequence[SweepTask], on_outcome: Callable[[TaskOutcome], None]) -> None:
        """Submit every task, then hand outcomes over as they complete; Ctrl-C cancels the rest."""
        ray = import_ray()
        self._started = {}
        started_here = self._connect(ray)
        try:
            self._check_cluster(ray)
            remote = ray.remote(_run_reporting_start).options(
                **task_options(self.device, self.max_retries)
            )
            starts = self._starts_actor(ray) if any(t.task_timeout_s for t in tasks) else None
            cpu = self.device == "cpu"
            by_ref = {
                remote.remote(attrs.evolve(task, use_all_cores=True) if cpu else task, starts): task
                for task in tasks
            }
            pending = list(by_ref)
            try:
                while pending:
                    done, pending = ray.wait(
                        pending, num_returns=1, timeout=POLL_S if starts is not None else None
                    )
                    for ref in done:
                        on_outcome(self._outcome(ray, ref, by_ref[ref]))
                    if starts is not None:
                        for ref in self._past_deadline(ray, starts, pending, by_ref):
                            ray.cancel(ref, force=True)
                            pending.remove(ref)
                            _log.warning("sweep task hung", model=by_ref[ref].model.name)
                            on_outcome(hung_outcome(by_ref[ref]))
            except KeyboardInterrupt:
                for ref in pending:
                    ray.cancel(ref, force=True)
                _log.warning("sweep interrupted", cancelled=len(pending))
                raise
            finally:
                if starts is not None:
                    ray.kill(starts)
        finally:
            if started_here:
                ray.shutdown()

    @staticmethod
    def _starts_actor(ray: Any) -> Any:
        """The start-counting actor, on the driver's node (it outlives any worker node)."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=True)
        return ray.remote(num_cpus=0, scheduling_strategy=here)(_Starts).remote()

    def _past_deadline(
        self, ray: Any, starts: Any, pending: Sequence[Any], by_ref: dict[Any, SweepTask]
    ) -> list[Any]:
        """The pending tasks running longer than their ``task_timeout_s`` since their last start."""
        try:
            counts: dict[str, int] = ray.get(starts.snapshot.remote(), timeout=30.0)
        except (ray.exceptions.RayError, TimeoutError) as exc:  # no deadlines this round
            _log.warning("sweep deadlines unchecked", error=type(exc).__name__)
            return []
        now = time.monotonic()
        late = []
        for ref in pending:
            task = by_ref[ref]
            count = counts.get(task.model.name, 0)
            if count == 0 or task.task_timeout_s is None:
                continue
            seen = self._started.get(ref)
            if seen is None or seen[0] != count:  # first seen running, or retried
                self._started[ref] = (count, now)
            elif now - seen[1] > task.task_timeout_s:
                late.append(ref)
        return late

    def _outcome(self, ray: Any, ref: Any, task: SweepTask) -> TaskOutcome:
        """The task's own outcome, or a failed one naming the Ray error that ended it."""
        try:
            outcome: TaskOutcome = ray.get(ref)
        except ray.exceptions.RayError as exc:
            retried = f" (after {self.max_retries} retries)" if self.max_retries else ""
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            return failed_outcome(task, type(exc).__name__, f"{first}{retried}"[:500])
        return outcome
