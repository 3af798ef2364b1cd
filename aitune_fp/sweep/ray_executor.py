"""Run sweep tasks as Ray tasks, each holding a whole device (``pip install 'aitune-fp[ray]'``).

Ray is imported here only, when an executor runs. On CUDA a task asks for ``num_gpus=1``; on
CPU it asks for one unit of :data:`TIMING_RESOURCE`, a custom resource each node declares once,
so two timings never share a node. A driver that starts its own local Ray declares it; a cluster
operator starts every CPU node with ``ray start --resources='{"aitune_fp_timing_slot": 1}'``.
Outcomes come back to the driver in completion order; a task whose worker or node died (after
``max_retries``) becomes a failed outcome naming Ray's error.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import attrs
import structlog

from aitune_fp.errors import InvalidStateError
from aitune_fp.sweep.run import SweepTask, TaskOutcome, failed_outcome, run_task

__all__ = ["TIMING_RESOURCE", "RayExecutor", "import_ray", "task_options"]

_log = structlog.get_logger("aitune_fp.sweep")

#: The per-node custom resource a CPU timing task holds (each node has exactly one unit).
TIMING_RESOURCE = "aitune_fp_timing_slot"


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

    Application errors are never retried (a task returns them as its outcome); ``max_retries``
    re-runs a task whose worker process or node died.
    """
    options: dict[str, Any] = {"max_retries": max_retries, "retry_exceptions": False}
    if device == "cuda":
        options.update(num_gpus=1, num_cpus=1)
    else:
        options.update(num_cpus=1, resources={TIMING_RESOURCE: 1})
    return options


class RayExecutor:
    """Runs each task as a Ray task; connects to ``address`` or starts a local Ray.

    ``address=None`` starts a local Ray with ``num_cpus`` CPUs and one timing slot (or uses the
    Ray this process already initialised); any other value is passed to ``ray.init``.
    """

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
        started_here = self._connect(ray)
        try:
            self._check_cluster(ray)
            remote = ray.remote(run_task).options(**task_options(self.device, self.max_retries))
            cpu = self.device == "cpu"
            by_ref = {
                remote.remote(attrs.evolve(task, use_all_cores=True) if cpu else task): task
                for task in tasks
            }
            pending = list(by_ref)
            try:
                while pending:
                    done, pending = ray.wait(pending, num_returns=1)
                    for ref in done:
                        on_outcome(self._outcome(ray, ref, by_ref[ref]))
            except KeyboardInterrupt:
                for ref in pending:
                    ray.cancel(ref, force=True)
                _log.warning("sweep interrupted", cancelled=len(pending))
                raise
        finally:
            if started_here:
                ray.shutdown()

    def _outcome(self, ray: Any, ref: Any, task: SweepTask) -> TaskOutcome:
        """The task's own outcome, or a failed one naming the Ray error that ended it."""
        try:
            outcome: TaskOutcome = ray.get(ref)
        except ray.exceptions.RayError as exc:
            retried = f" (after {self.max_retries} retries)" if self.max_retries else ""
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            return failed_outcome(task, type(exc).__name__, f"{first}{retried}"[:500])
        return outcome
