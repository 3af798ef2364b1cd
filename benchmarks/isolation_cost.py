"""What process isolation costs, side by side with the tune in process, in one run.

1. Hand-over: a call of a worker that does nothing, timed from the parent (the per-call cost
   both arms pay in process mode), through a forked worker and one the fork server started,
   beside a call of the same function in process.
2. Worker start-up: eager's worker for the embedded MLP until it is ready, forked, and started
   from the fork server (the first start includes the server's own; later ones do not).
3. The main job (``aitune-fp tune`` itself, each run a fresh process as a user runs it):
   wall time and verdicts in process isolation at one thread (forked workers, the default)
   beside at torch's threads (``--threads N``: fork-server workers) and in process at torch's
   threads, alternating, and the rebuild of the chosen candidate in the user's process (from
   the tune's own timing).
4. The hand-back of a chosen candidate whose build saves an artefact (AOTInductor's package,
   the ONNX file): loading what the worker built beside building it again.
5. Pair noise: an identical pair of the default MLP's workers timed as the gate times them,
   the judge spinning on each answer (as shipped) beside sleeping on it, and in process.
Usage: python benchmarks/isolation_cost.py [--repeats 3] [--calls 2000]
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import structlog
import torch

import aitune_fp.pipeline.workers as workers_module
import aitune_fp.profiling.workers as worker_module
from aitune_fp.adapters.validation import with_performance_validation
from aitune_fp.backends import registry
from aitune_fp.backends.base import artefact_digest
from aitune_fp.core.results import flat
from aitune_fp.inputs import CopyRing, Sample
from aitune_fp.models import mlp
from aitune_fp.pipeline.strategy_registry import make_strategy
from aitune_fp.pipeline.workers import EagerRecipe
from aitune_fp.profiling.calls import timed_block
from aitune_fp.profiling.interference import WorkerGroup
from aitune_fp.profiling.timers import CpuTimer
from aitune_fp.profiling.workers import Worker

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
    import aitune_fp.pipeline.ending as ending

    ending.adopt = timed  # type: ignore[attr-defined]


def _null(*args: Any) -> None:
    """A call that does nothing (picklable: a worker the fork server starts is sent it)."""


def hand_over(calls: int, threads: int | None) -> tuple[float, float]:
    """Median seconds of a null call through a worker (``threads``: None forks it, a count
    starts it from the fork server), and of the same call in process."""
    worker = Worker(EagerRecipe(_null), name="null", timeout_s=60, threads=threads)
    worker.ready()
    sample = Sample((torch.zeros(1),))
    remote, local = [], []
    for _ in range(calls):
        worker.prepare_block([sample], lead=False)  # untimed, as before every timed call
        start = time.perf_counter_ns()
        worker.run_block(1)
        remote.append(time.perf_counter_ns() - start)
        start = time.perf_counter_ns()
        sample.call(_null)
        local.append(time.perf_counter_ns() - start)
    worker.close()
    return statistics.median(remote) / 1e9, statistics.median(local) / 1e9


def start_up(repeats: int, threads: int | None) -> list[float]:
    """Seconds from start to ready of eager's worker for the embedded MLP, each start in turn
    (``threads``: None forks it, a count starts it from the fork server)."""
    model = mlp()
    eager = model.module.eval()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        worker = Worker(EagerRecipe(eager), name="eager", timeout_s=60, threads=threads)
        worker.ready()
        times.append(time.perf_counter() - start)
        worker.close()
    return times


def _spread(base: list[float], cand: list[float]) -> tuple[float, float]:
    """Median call (s) and the robust spread of the pairs' log ratios (IQR / 1.35)."""
    import numpy as np

    ratios = np.log(np.array(cand) / np.array(base))
    q75, q25 = np.percentile(ratios, [75, 25])
    return float(np.median(base)), float(q75 - q25) / 1.35


def _alternate(arms: list[Any], batch: Sample, pairs: int) -> tuple[float, float]:
    """``pairs`` identical pairs timed as the gate times them (``timed_block`` of one call), the order
    alternating, after 50 untimed-for-the-figure pairs; their median call and spread."""
    rings = [CopyRing(), CopyRing()]
    times: tuple[list[float], list[float]] = ([], [])
    for index in range(pairs + 50):
        for arm in (0, 1) if index % 2 else (1, 0):
            fn, ring = arms[arm], rings[arm]
            times[arm].append(
                timed_block(fn, [batch], CpuTimer(), None, {}, ring=ring, lead=False)[0]
            )
    return _spread(times[0][50:], times[1][50:])


def pair_noise(pairs: int) -> dict[str, tuple[float, float]]:
    """Identical MLP pairs timed through two workers (judge spinning, then sleeping) and in process."""
    model = mlp()
    eager = model.module.eval()
    batch = model.graph_spec.make_batch(model.sample, model.graph_spec.max_batch_size)
    group = WorkerGroup()
    workers = [Worker(lambda say: (eager, {}), name=n, timeout_s=60, group=group) for n in "ab"]
    group.suspect(workers[1])
    for worker in workers:
        worker.ready()
    found: dict[str, tuple[float, float]] = {}
    shipped = worker_module.SPIN_S
    for label, spin in (
        ("workers, judge spins (as shipped)", shipped),
        ("workers, judge sleeps", 0.0),
    ):
        worker_module.SPIN_S = spin
        found[label] = _alternate(workers, batch, pairs)
    worker_module.SPIN_S = shipped
    for worker in workers:
        worker.close()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    with torch.no_grad():
        found["in process, 1 thread"] = _alternate([eager, copy.deepcopy(eager)], batch, pairs)
    torch.set_num_threads(threads)
    return found


def main_job(flags: list[str]) -> tuple[float, dict[str, str], str | None]:
    """``aitune-fp tune`` with ``flags``, in a fresh process as a user runs it (its own compile
    caches cold in memory): wall seconds, each candidate's verdict, the pick."""
    command = [str(Path(sys.executable).with_name("aitune-fp")), "tune", "--format", "json"]
    start = time.perf_counter()
    done = subprocess.run([*command, "--quiet", *flags], capture_output=True, text=True, check=True)
    wall = time.perf_counter() - start
    run = json.loads(done.stdout)["run"]
    verdicts = {
        r["backend_description"]: f"{r['verdict']} {r['estimate']:.2f}x"
        for r in map(flat, run["results"])
    }
    verdicts.update({f["backend_description"]: f"failed at {f['stage']}" for f in run["failures"]})
    return wall, verdicts, run["selected_backend"]


def main() -> None:
    """Print the three parts as Markdown tables."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--pairs", type=int, default=400)
    args = parser.parse_args()
    structlog.configure(
        wrapper_class=structlog.make_filtering_bound_logger(50)
    )  # the tunes' events are not the subject
    threads = torch.get_num_threads()
    served = start_up(args.repeats + 1, threads)  # first: before the tables, the server cold
    forked = start_up(args.repeats, None)
    remote, local = hand_over(args.calls, None)
    remote_served, _ = hand_over(args.calls, threads)
    print("| hand-over (median of", args.calls, "calls) | seconds |\n|---|---|")
    print(f"| null call through a forked worker (1 thread) | {remote * 1e6:.1f} µs |")
    print(
        f"| null call through a fork-server worker ({threads} threads) | {remote_served * 1e6:.1f} µs |"
    )
    print(f"| null call in process | {local * 1e6:.1f} µs |")
    print("\n| eager's worker for the MLP, start to ready | ms |\n|---|---|")
    print(f"| forked (median of {args.repeats}) | {statistics.median(forked) * 1e3:.1f} |")
    print(f"| fork server, first (the server starts too) | {served[0] * 1e3:.1f} |")
    print(
        f"| fork server, later (median of {args.repeats}) | {statistics.median(served[1:]) * 1e3:.1f} |\n"
    )
    noise = pair_noise(args.pairs)
    sleeping = noise["workers, judge sleeps"][1]
    print(
        f"| identical MLP pair ({args.pairs} pairs) | median call | log-ratio spread | pairs needed vs sleeping judge |"
    )
    print("|---|---|---|---|")
    for label, (median, spread) in noise.items():
        print(
            f"| {label} | {median * 1e3:.3f} ms | {spread:.3f} | {(spread / sleeping) ** 2:.2f}x |"
        )
    print()
    arms = {
        "process, 1 thread (forked, the default)": [],
        f"process, --threads {threads} (fork server)": ["--threads", str(threads)],
        "in process, torch's threads": ["--in-process"],
    }
    walls: dict[str, list[float]] = {}
    print("| run | mode | wall s | verdicts | selected |\n|---|---|---|---|---|")
    for repeat in range(args.repeats):
        order = list(arms) if repeat % 2 == 0 else list(reversed(arms))
        for label in order:
            wall, verdicts, selected = main_job(arms[label])
            walls.setdefault(label, []).append(wall)
            shown = "; ".join(f"{k}: {v}" for k, v in verdicts.items())
            print(f"| {repeat} | {label} | {wall:.1f} | {shown} | {selected} |")
    base = statistics.median(walls["process, 1 thread (forked, the default)"])
    print("\n| mode | median wall s | ratio to the default |\n|---|---|---|")
    for label, values in walls.items():
        print(
            f"| {label} | {statistics.median(values):.1f} | {statistics.median(values) / base:.2f}x |"
        )
    print("\n| hand-back of the chosen candidate | build again s | load its artefact s |")
    print("|---|---|---|")
    for name, (build_s, load_s) in hand_back(["aot-inductor", "onnxruntime"]).items():
        print(f"| {name} | {build_s:.2f} | {load_s:.3f} |")
    rebuilds = _rebuilds()
    print(
        f"\nRebuild of the chosen candidate in the user's process (a tune in this process): "
        f"{rebuilds:.2f} s"
    )


def hand_back(names: list[str]) -> dict[str, tuple[float, float]]:
    """Per candidate: seconds to build it, and to load the artefact that build saved."""
    model = mlp()
    found: dict[str, tuple[float, float]] = {}
    with tempfile.TemporaryDirectory() as cache:
        for name in names:
            blueprint = registry.make_candidate(name, "cpu")
            start = time.perf_counter()
            args = (model.module, model.graph_spec, [model.sample], "cpu", cache)
            built = copy.deepcopy(blueprint).build(*args)
            build_s = time.perf_counter() - start
            digest = artefact_digest(built.artefact())
            start = time.perf_counter()
            copy.deepcopy(blueprint).build(*args, load=digest)
            found[name] = (build_s, time.perf_counter() - start)
    return found


def _rebuilds() -> float:
    """Seconds of the chosen candidate's rebuild in a process-isolated tune of the MLP."""
    _instrument()
    model = mlp()
    strategy = with_performance_validation(
        make_strategy("max-throughput", [registry.make_candidate("int8-dynamic", "cpu")])
    )
    with tempfile.TemporaryDirectory() as cache:
        strategy.tune(
            model.module.eval(), model.name, model.graph_spec, [model.sample], "cpu", cache
        )
    return sum(REBUILDS)


if __name__ == "__main__":
    main()
