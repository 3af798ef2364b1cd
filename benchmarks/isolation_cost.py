"""What process isolation costs, side by side with the tune in process, in one run.

1. Hand-over: a call of a worker that does nothing, timed from the parent (the per-call cost
   both arms pay in process mode), beside a call of the same function in process.
2. Worker start-up: forking eager's worker for the embedded MLP until it is ready.
3. The main job (``aitune-fp tune``'s default candidates on the embedded MLP, max-throughput):
   wall time and verdicts in process mode beside in process at the same thread count (1) and
   in process at torch's default threads (the main job before isolation), alternating, and the
   rebuild of the chosen candidate in the user's process (from the tune's own timing).
Usage: python benchmarks/isolation_cost.py [--repeats 3] [--calls 2000]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from typing import Any

import structlog
import torch

import aitune_fp.session.workers as workers_module
from aitune_fp import ProfilingConfig
from aitune_fp.backends import registry
from aitune_fp.inputs import Sample
from aitune_fp.models import mlp
from aitune_fp.profiling.workers import Worker
from aitune_fp.strategies import make_strategy
from aitune_fp.validation import validation_of, with_performance_validation

REBUILDS: list[float] = []


def _instrument() -> None:
    """Time each rebuild of a chosen candidate in the user's process."""
    adopt = workers_module.adopt

    def timed(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return adopt(*args, **kwargs)
        finally:
            REBUILDS.append(time.perf_counter() - start)

    workers_module.adopt = timed  # type: ignore[assignment]
    import aitune_fp.session.ending as ending

    ending.adopt = timed  # type: ignore[attr-defined]


def hand_over(calls: int) -> tuple[float, float]:
    """Median seconds of a null call through a worker, and of the same call in process."""
    worker = Worker(lambda say: ((lambda *a: None), {}), name="null", timeout_s=30)
    worker.ready()
    sample = Sample((torch.zeros(1),))
    handle = worker.stage(sample)
    remote, local = [], []
    fn = lambda *a: None  # noqa: E731
    for _ in range(calls):
        start = time.perf_counter_ns()
        worker.run(handle)
        remote.append(time.perf_counter_ns() - start)
        start = time.perf_counter_ns()
        sample.call(fn)
        local.append(time.perf_counter_ns() - start)
    worker.close()
    return statistics.median(remote) / 1e9, statistics.median(local) / 1e9


def start_up(repeats: int) -> float:
    """Median seconds from fork to ready of eager's worker for the embedded MLP."""
    model = mlp()
    eager = model.module.eval()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        worker = Worker(lambda say: (eager, {}), name="eager", timeout_s=60)
        worker.ready()
        times.append(time.perf_counter() - start)
        worker.close()
    return statistics.median(times)


def main_job(mode: str, threads: int | None) -> tuple[float, dict[str, str], str | None]:
    """One tune as ``aitune-fp tune`` runs it: wall seconds, each candidate's verdict, the pick."""
    model = mlp()
    names = registry.default_backends("cpu")
    backends = [registry.make_candidate(n, "cpu") for n in names]
    strategy = with_performance_validation(
        make_strategy("max-throughput", backends),
        profiling_config=ProfilingConfig(threads=threads),
        isolation=mode,  # type: ignore[arg-type]
    )
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as cache:
        strategy.tune(
            model.module.eval(), model.name, model.graph_spec, [model.sample], "cpu", cache
        )
    wall = time.perf_counter() - start
    report = validation_of(strategy).last_report
    assert report is not None
    verdicts = {r.backend_description: f"{r.verdict} {r.speedup:.2f}x" for r in report.results}
    verdicts.update({f.backend_description: f"failed at {f.stage}" for f in report.failures})
    return wall, verdicts, report.selected_backend


def main() -> None:
    """Print the three parts as Markdown tables."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--calls", type=int, default=2000)
    args = parser.parse_args()
    structlog.configure(
        wrapper_class=structlog.make_filtering_bound_logger(50)
    )  # the tunes' events are not the subject
    _instrument()
    remote, local = hand_over(args.calls)
    print("| hand-over (median of", args.calls, "calls) | seconds |\n|---|---|")
    print(f"| null call through a worker | {remote * 1e6:.1f} µs |")
    print(f"| null call in process | {local * 1e6:.1f} µs |")
    print(
        f"\n| eager's worker for the MLP, fork to ready (median of {args.repeats}) | "
        f"{start_up(args.repeats) * 1e3:.1f} ms |\n"
    )
    arms = [("process", None), ("in_process", 1), ("in_process", None)]
    walls: dict[str, list[float]] = {}
    print("| run | mode | threads | wall s | verdicts | selected |\n|---|---|---|---|---|---|")
    for repeat in range(args.repeats):
        order = arms if repeat % 2 == 0 else list(reversed(arms))
        for mode, threads in order:
            label = f"{mode} / {threads or 'default'}"
            wall, verdicts, selected = main_job(mode, threads)
            walls.setdefault(label, []).append(wall)
            shown = "; ".join(f"{k}: {v}" for k, v in verdicts.items())
            print(
                f"| {repeat} | {mode} | {threads or 'default'} | {wall:.1f} | {shown} | "
                f"{selected} |"
            )
    print("\n| mode / threads | median wall s | ratio to in_process / default |\n|---|---|---|")
    base = statistics.median(walls["in_process / default"])
    for label, values in walls.items():
        print(
            f"| {label} | {statistics.median(values):.1f} | "
            f"{statistics.median(values) / base:.2f}x |"
        )
    if REBUILDS:
        print(
            f"\nRebuilds of the chosen candidate in the user's process: "
            f"{', '.join(f'{r:.2f} s' for r in REBUILDS)}"
        )


if __name__ == "__main__":
    main()
