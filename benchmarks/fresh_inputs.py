"""Honest candidates' speedups before and after fresh inputs per timed pair (issue 31).

Commit 584ed29 gave every timed pair its own held-out values (drawn per tune and pair, outside
the timed region); its parent times the same recorded batches in turn. Both already give every
timed call its own copy of its batch and time each candidate in a worker process, so the only
difference between the two trees is the values (and the drawing of them between pairs).

How: the two commits are checked out as detached worktrees in a temporary folder (removed at
the end). For each repeat and each embedded model, the main job runs as a user runs it,
``python -m aitune_fp tune --model M --backends ... --format json``, in a fresh subprocess with
``PYTHONPATH`` set to one tree, then to the other (the order alternates between repeats:
before/after, after/before, ...), so both trees see the same machine conditions. Every run uses
one intra-op thread (``--threads 1``) and one planned look at a fixed number of pairs
(``--looks P --max-pairs P``), so that each estimate rests on the same number of pairs in both
trees (the default looks stop at 10 or 20 pairs with intervals too wide to compare); its
``--max-seconds`` is set high enough not to bind (the pairs each run reached are reported).
The load average is read before and after each run (the machine is shared).

The table gives, per model and candidate and for each tree: the median estimate (Hodges-Lehmann
of the paired ratios) over repeats, the median interval, the verdicts, the median pairs, and
the spread of the estimates over repeats (min-max); then the ratio after/before (median of the
per-repeat ratios, the runs of one repeat being adjacent, with its min-max).

Usage: python benchmarks/fresh_inputs.py [--repeats 6] [--pairs 80] [--models mlp,convnet]
       [--out raw.json]; python benchmarks/fresh_inputs.py --summarise raw.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from aitune_fp.core.results import flat

REPO = Path(__file__).resolve().parent.parent

#: Honest CPU candidates that exist in both trees, per embedded model (int8-dynamic does not
#: build for the transformer; channels-last only means something for the convnet).
CANDIDATES: dict[str, tuple[str, ...]] = {
    "mlp": ("compile", "eager-bf16", "int8-dynamic"),
    "convnet": ("compile", "eager-bf16", "int8-dynamic", "channels-last"),
    "transformer": ("compile", "eager-bf16"),
}

TREES = ("before", "after")


def add_worktrees(revs: dict[str, str], root: Path) -> dict[str, Path]:
    """Check each revision out as a detached worktree under ``root``."""
    paths: dict[str, Path] = {}
    for tree, rev in revs.items():
        path = root / tree
        subprocess.run(
            ["git", "-C", str(REPO), "worktree", "add", "--detach", str(path), rev],
            check=True,
            capture_output=True,
        )
        paths[tree] = path
    return paths


def remove_worktrees(paths: dict[str, Path]) -> None:
    """Remove the worktrees made by :func:`add_worktrees`."""
    for path in paths.values():
        subprocess.run(
            ["git", "-C", str(REPO), "worktree", "remove", "--force", str(path)],
            check=False,
            capture_output=True,
        )


def tune(
    tree: Path,
    model: str,
    backends: Sequence[str],
    pairs: int,
    max_seconds: float,
    *,
    in_process: bool = False,
) -> dict[str, Any]:
    """One main job in a fresh process on ``tree``'s code: its results, wall time and load."""
    cache = Path(tempfile.mkdtemp(prefix="fresh_inputs_cache_"))
    cmd = [
        sys.executable,
        "-m",
        "aitune_fp",
        "tune",
        "--model",
        model,
        "--backends",
        ",".join(backends),
        "--format",
        "json",
        "--threads",
        "1",
        "--max-seconds",
        str(max_seconds),
        "--looks",
        str(pairs),
        "--max-pairs",
        str(pairs),
        "--selection-seconds",
        "3",
        "--cache-dir",
        str(cache),
        "-q",
        *(["--in-process"] if in_process else []),
    ]
    env = {**os.environ, "PYTHONPATH": str(tree)}
    load_before = os.getloadavg()
    start = time.perf_counter()
    try:
        proc = subprocess.run(cmd, env=env, cwd=tree, capture_output=True, text=True, check=False)
    finally:
        wall = time.perf_counter() - start
        load_after = os.getloadavg()
        shutil.rmtree(cache, ignore_errors=True)
    if proc.returncode != 0 or not proc.stdout.strip():
        raise RuntimeError(f"tune failed ({proc.returncode}): {proc.stderr[-2000:]}")
    run = json.loads(proc.stdout)["run"]
    results = [
        {
            "name": r["backend_description"],
            "verdict": r.get("verdict"),
            "estimate": r.get("estimate"),
            "ci_low": r.get("ci_low"),
            "ci_high": r.get("ci_high"),
            "pairs": r.get("n_baseline"),
            "eager_throughput": r.get("baseline_throughput"),
            "throughput": r.get("throughput"),
            "flags": r.get("flags"),
        }
        for r in map(flat, run["results"])
    ]
    return {
        "wall_s": wall,
        "load_before": load_before[0],
        "load_after": load_after[0],
        "baseline_throughput": run.get("baseline_throughput"),
        "selected": run.get("selected_backend"),
        "results": results,
    }


def _fmt_spread(values: Sequence[float]) -> str:
    return f"{min(values):.3f}-{max(values):.3f}"


def _median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def summarise(runs: list[dict[str, Any]]) -> list[str]:
    """The side-by-side markdown tables (speedups, then throughputs in the pairs) from raw runs."""
    lines = [
        "| model | candidate | tree | median estimate | median bounds | verdicts | pairs "
        "| spread (min-max) | after/before (min-max) | after lower |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    speeds = [
        "| model | candidate | eager before | eager after | candidate before | candidate after |",
        "|---|---|---|---|---|---|",
    ]
    models = list(dict.fromkeys(r["model"] for r in runs))
    for model in models:
        of_model = [r for r in runs if r["model"] == model]
        names = list(dict.fromkeys(x["name"] for r in of_model for x in r["results"]))
        for name in names:
            per_tree: dict[str, dict[int, dict[str, Any]]] = {t: {} for t in TREES}
            for r in of_model:
                for x in r["results"]:
                    if x["name"] == name and x["estimate"] is not None:
                        per_tree[r["tree"]][r["repeat"]] = x
            paired = [k for k in per_tree["before"] if k in per_tree["after"]]
            ratios = [
                per_tree["after"][k]["estimate"] / per_tree["before"][k]["estimate"] for k in paired
            ]
            for tree in TREES:
                xs = list(per_tree[tree].values())
                if not xs:
                    continue
                est = [x["estimate"] for x in xs]
                low = statistics.median(x["ci_low"] for x in xs)
                high = statistics.median(x["ci_high"] for x in xs)
                verdicts = ", ".join(
                    f"{v} {n}" for v, n in sorted(Counter(x["verdict"] for x in xs).items())
                )
                pairs = statistics.median(x["pairs"] for x in xs)
                ratio = lower = ""
                if tree == "after" and ratios:
                    ratio = f"{statistics.median(ratios):.3f}x ({_fmt_spread(ratios)})"
                    lower = f"{sum(q < 1 for q in ratios)} of {len(ratios)}"
                lines.append(
                    f"| {model} | {name} | {tree} | {statistics.median(est):.3f}x "
                    f"| [{low:.3f}, {high:.3f}] | {verdicts} | {pairs:g} "
                    f"| {_fmt_spread(est)} | {ratio} | {lower} |"
                )
            cells = [
                f"{_median([x[field] for x in per_tree[tree].values() if x[field]]):.0f}"
                for field in ("eager_throughput", "throughput")
                for tree in TREES
            ]
            speeds.append(f"| {model} | {name} | {' | '.join(cells)} |")
    return [*lines, "", "Samples/s in the timed pairs (medians over repeats):", "", *speeds]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", default="584ed29^", help="revision before fresh inputs")
    parser.add_argument("--after", default="584ed29", help="revision with fresh inputs")
    parser.add_argument("--repeats", type=int, default=6)
    parser.add_argument("--pairs", type=int, default=80, help="timed pairs per candidate")
    parser.add_argument("--max-seconds", type=float, default=40.0)
    parser.add_argument("--models", default=",".join(CANDIDATES))
    parser.add_argument(
        "--in-process", action="store_true", help="pass --in-process (no worker processes)"
    )
    parser.add_argument("--out", type=Path, default=None, help="write the raw runs as JSON here")
    parser.add_argument(
        "--summarise", type=Path, default=None, help="only print the tables of a saved --out file"
    )
    args = parser.parse_args(argv)
    if args.summarise is not None:
        print("\n".join(summarise(json.loads(args.summarise.read_text()))))
        return 0

    models = [m for m in args.models.split(",") if m]
    root = Path(tempfile.mkdtemp(prefix="fresh_inputs_trees_"))
    trees = add_worktrees({"before": args.before, "after": args.after}, root)
    runs: list[dict[str, Any]] = []
    start = time.perf_counter()
    try:
        for repeat in range(args.repeats):
            order = TREES if repeat % 2 == 0 else TREES[::-1]
            for model in models:
                for tree in order:
                    run = tune(
                        trees[tree],
                        model,
                        CANDIDATES[model],
                        args.pairs,
                        args.max_seconds,
                        in_process=args.in_process,
                    )
                    run.update(repeat=repeat, model=model, tree=tree)
                    runs.append(run)
                    short = "; ".join(
                        f"{x['name']} {x['verdict']} {x['estimate'] or float('nan'):.3f}x"
                        f"/{x['pairs']}"
                        for x in run["results"]
                    )
                    print(
                        f"repeat {repeat} {model:<11} {tree:<6} {run['wall_s']:5.1f} s "
                        f"load {run['load_before']:.2f}->{run['load_after']:.2f}: {short}",
                        flush=True,
                    )
    finally:
        remove_worktrees(trees)
        shutil.rmtree(root, ignore_errors=True)
    total = time.perf_counter() - start
    if args.out is not None:
        args.out.write_text(json.dumps(runs, indent=1))
    loads = [r[k] for r in runs for k in ("load_before", "load_after")]
    print()
    print(
        f"{len(runs)} runs in {total / 60:.1f} min; 1-min load average {min(loads):.2f}-"
        f"{max(loads):.2f} (median {statistics.median(loads):.2f}) on {os.cpu_count()} cores"
    )
    print()
    print("\n".join(summarise(runs)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
