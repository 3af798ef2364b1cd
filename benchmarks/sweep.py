"""``aitune-fp sweep`` locally and on Ray, on this machine: wall time, Ray's cost per task, verdicts.

The three embedded models × the default CPU backends, with the example file's budget, run
``--reps`` times with each executor, alternating (local, ray, ray, local, ...) so drift in the
machine's load falls on both. One local Ray (2 CPUs, one timing slot) is started once, as
``aitune-fp sweep --ray`` does; its start-up is reported separately.

- wall time per sweep, and the sum of the task durations the tasks report themselves;
- overhead per task = (wall - sum of task durations) / tasks: what the executor adds around a
  task (submission, scheduling, moving the task and its ~100 events back; locally ~0);
- verdicts: per model × backend, the counts of each verdict under each executor, and an exact
  permutation test of "same distribution" (executor labels exchanged within each cell;
  statistic: summed total-variation distance between the two executors' verdict counts).

Usage: python benchmarks/sweep.py [--reps 4] [--threads N] [--json out.json]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import statistics
import tempfile
import time
from collections import Counter
from typing import Any

from aitune_fp.events import ingest
from aitune_fp.sweep.ray_executor import TIMING_RESOURCE, RayExecutor
from aitune_fp.sweep.run import run_sweep
from aitune_fp.sweep.spec import parse_sweep
from aitune_fp.sweep.task import LocalExecutor

VERDICTS = ("faster", "not_faster", "inconclusive", "failed")


THREADS: list[int] = []  # --threads: pin torch's intra-op threads in both executors


def sweep_spec() -> Any:
    """The benchmark's sweep: the embedded models, the CPU defaults, the example's budget."""
    budget: dict[str, Any] = {"looks": [10, 20, 40], "max_seconds": 10.0}
    if THREADS:
        budget["threads"] = THREADS[0]
    return parse_sweep(
        {
            "name": "bench",
            "device": "cpu",
            "budget": budget,
            "models": ["mlp", "convnet", "transformer"],
        }
    )


def one_sweep(executor: Any, folder: str, tag: str) -> dict[str, Any]:
    """Run the sweep once; its wall time, the tasks' own durations and every cell's verdict."""
    log = os.path.join(folder, f"{tag}.jsonl")
    start = time.perf_counter()
    result = run_sweep(sweep_spec(), log_path=log, executor=executor, cache_dir=folder + "/" + tag)
    wall = time.perf_counter() - start
    with open(log, encoding="utf-8") as handle:
        lines = [json.loads(x) for x in handle if x.strip()]
    tasks = [x for x in lines if x["event"] == "aitune_fp.sweep.task_finished"]
    cells: dict[str, str] = {}
    estimates: dict[str, float | None] = {}
    for run in ingest.ingest(log).runs:
        for r in run.results:
            cells[f"{run.module_name} × {r.backend_description}"] = r.verdict or "?"
            estimates[f"{run.module_name} × {r.backend_description}"] = r.estimate
        for f in run.candidate_failures:
            cells[f"{run.module_name} × {f.backend_description}"] = "failed"
    return {
        "executor": executor.name,
        "wall_s": wall,
        "task_s": [x["duration_s"] for x in tasks],
        "pids": sorted({x["pid"] for x in tasks}),
        "threads": sorted({x["threads"] for x in tasks}),
        "failed_models": list(result.failed),
        "cells": cells,
        "estimates": estimates,
    }


def tv_sum(runs: list[dict[str, Any]], labels: list[str]) -> float:
    """Summed over cells: total-variation distance between local's and Ray's verdict counts."""
    total = 0.0
    keys = sorted({k for r in runs for k in r["cells"]})
    for key in keys:
        by = {"local": Counter(), "ray": Counter()}
        for run, label in zip(runs, labels, strict=True):
            by[label][run["cells"].get(key, "missing")] += 1
        n_l, n_r = sum(by["local"].values()), sum(by["ray"].values())
        words = set(by["local"]) | set(by["ray"])
        total += 0.5 * sum(abs(by["local"][w] / n_l - by["ray"][w] / n_r) for w in words)
    return total


def permutation_p(runs: list[dict[str, Any]], n_perm: int = 20000) -> tuple[float, float]:
    """Observed statistic and its permutation p-value (whole sweeps relabelled, seed 0)."""
    labels = [r["executor"] for r in runs]
    observed = tv_sum(runs, labels)
    rng = random.Random(0)
    n_local = labels.count("local")
    combos = list(itertools.combinations(range(len(runs)), n_local))
    if len(combos) <= n_perm:  # exact: every relabelling
        stats = []
        for chosen in combos:
            perm = ["local" if i in chosen else "ray" for i in range(len(runs))]
            stats.append(tv_sum(runs, perm))
    else:
        stats = []
        for _ in range(n_perm):
            perm = labels[:]
            rng.shuffle(perm)
            stats.append(tv_sum(runs, perm))
    p = sum(s >= observed - 1e-12 for s in stats) / len(stats)
    return observed, p


def main() -> None:
    """Run the benchmark and print (and optionally save) its figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=4)
    parser.add_argument("--json", help="save every figure to this file")
    parser.add_argument("--threads", type=int, help="[budget] threads for both (default: torch's)")
    args = parser.parse_args()
    if args.threads:
        THREADS.append(args.threads)

    import ray

    start = time.perf_counter()
    ray.init(
        num_cpus=2, resources={TIMING_RESOURCE: 1}, include_dashboard=False, log_to_driver=False
    )
    ray_init_s = time.perf_counter() - start
    folder = tempfile.mkdtemp(prefix="aitune_fp-bench-sweep-")
    runs: list[dict[str, Any]] = []
    for rep in range(args.reps):
        order = ("local", "ray") if rep % 2 == 0 else ("ray", "local")
        for name in order:
            executor = LocalExecutor() if name == "local" else RayExecutor()
            run = one_sweep(executor, folder, f"{rep}-{name}")
            runs.append(run)
            print(
                f"rep {rep} {name:5s}: wall {run['wall_s']:6.1f}s, tasks "
                f"{sum(run['task_s']):6.1f}s, failed {run['failed_models']}, "
                f"threads {run['threads']}",
                flush=True,
            )
    ray.shutdown()

    print(f"\nRay start-up (ray.init, local, 2 CPUs): {ray_init_s:.1f}s")
    for name in ("local", "ray"):
        mine = [r for r in runs if r["executor"] == name]
        walls = [r["wall_s"] for r in mine]
        overhead = [(r["wall_s"] - sum(r["task_s"])) / len(r["task_s"]) for r in mine]
        task = [t for r in mine for t in r["task_s"]]
        print(
            f"{name:5s}: wall per sweep median {statistics.median(walls):.1f}s "
            f"(min {min(walls):.1f}, max {max(walls):.1f}); task median {statistics.median(task):.1f}s; "
            f"overhead per task median {statistics.median(overhead) * 1000:.0f} ms "
            f"(min {min(overhead) * 1000:.0f}, max {max(overhead) * 1000:.0f})"
        )
    keys = sorted({k for r in runs for k in r["cells"]})
    print("\nVerdicts per cell (local | ray), estimate medians:")
    for key in keys:
        counts = {}
        meds = {}
        for name in ("local", "ray"):
            mine = [r for r in runs if r["executor"] == name]
            c = Counter(r["cells"].get(key, "missing") for r in mine)
            counts[name] = ", ".join(f"{w} {c[w]}" for w in (*VERDICTS, "missing") if c[w])
            est = [r["estimates"].get(key) for r in mine if r["estimates"].get(key) is not None]
            meds[name] = f"{statistics.median(est):.2f}x" if est else "—"
        print(f"  {key}: {counts['local']} ({meds['local']}) | {counts['ray']} ({meds['ray']})")
    observed, p = permutation_p(runs)
    print(
        f"\nSame verdict distribution? summed TV distance {observed:.2f} over {len(keys)} cells; "
        f"permutation p = {p:.3f} (small p: the executors differ)"
    )
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump({"ray_init_s": ray_init_s, "runs": runs, "tv": observed, "p": p}, handle)


if __name__ == "__main__":
    main()
