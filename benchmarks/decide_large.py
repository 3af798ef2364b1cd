"""Time and memory of ``decide_speedup`` on large samples: 1e3 .. 1e6 timings per arm.

Each (size, mode) runs in a fresh interpreter, so its peak resident memory (``ru_maxrss``) is its
own: the interpreter, numpy, the two input lists and the decision. In that child the timings are
generated (lognormal noise around 10 ms, a candidate 2 % faster, paired arms sharing a drift),
``decide_speedup`` is timed ``--repeats`` times (the first call includes numpy's lazy import),
then called once more under ``tracemalloc`` for the peak of what the call itself allocates.
``--grid`` rounds every timing to a timer resolution (heavy ties: the tie-corrected path).
Target (issue): 1e6 timings per arm decided in under 10 s and 1 GiB.
Usage: python benchmarks/decide_large.py [--sizes 1e3 1e4 1e5 1e6] [--repeats 3] [--grid 1e-6]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys

CHILD = r"""
import json, random, resource, statistics, sys, time, tracemalloc
from aitune_fp.core import hodges_lehmann
from aitune_fp.core.sequential import decide_speedup

n, paired, repeats, grid = int(sys.argv[1]), sys.argv[2] == "paired", int(sys.argv[3]), float(sys.argv[4])
rng = random.Random(n)
drift = [rng.lognormvariate(0.0, 0.2) if paired else 1.0 for _ in range(n)]
base = [0.01 * s * rng.lognormvariate(0.0, 0.1) for s in drift]
cand = [0.01 / 1.02 * s * rng.lognormvariate(0.0, 0.1) for s in drift]
if grid:
    base = [max(grid, round(t / grid) * grid) for t in base]
    cand = [max(grid, round(t / grid) * grid) for t in cand]
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
times = []
for _ in range(repeats):
    start = time.perf_counter()
    decision = decide_speedup(base, cand, 1.0, paired=paired)
    times.append(time.perf_counter() - start)
peak_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
tracemalloc.start()
decide_speedup(base, cand, 1.0, paired=paired)
traced = tracemalloc.get_traced_memory()[1]
tracemalloc.stop()
pairs = n * (n + 1) // 2 if paired else n * n
print(json.dumps({
    "median_s": statistics.median(times), "min_s": min(times),
    "rss_before_mib": before / 1024, "rss_peak_mib": peak_rss / 1024,
    "traced_mib": traced / 2**20, "verdict": decision.verdict,
    "speedup": decision.speedup, "ci": [decision.ci_low, decision.ci_high],
    "path": "built" if pairs <= hodges_lehmann._MATERIALISE_MAX_PAIRS else "implicit",
}))
"""


def _run(n: int, mode: str, repeats: int, grid: float) -> dict[str, object]:
    argv = [sys.executable, "-c", CHILD, str(n), mode, str(repeats), repr(grid)]
    out = subprocess.run(argv, capture_output=True, text=True, check=True)
    result: dict[str, object] = json.loads(out.stdout)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", type=float, nargs="+", default=[1e3, 1e4, 1e5, 1e6])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--grid", type=float, default=0.0, help="timer resolution, s (0: none)")
    args = parser.parse_args(argv)
    grid = f"{args.grid:g} s timer grid" if args.grid else "continuous timings"
    print(
        f"decide_speedup, {grid}, median of {args.repeats} calls, {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}"
    )
    print()
    print(
        "| n per arm | mode | path | median s | min s | peak RSS MiB | RSS before call MiB "
        "| traced peak of call MiB | verdict | speedup [95 % CI] |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    worst_s, worst_mib, largest = 0.0, 0.0, 0
    for size in args.sizes:
        n = int(size)
        for mode in ("paired", "unpaired"):
            r = _run(n, mode, args.repeats, args.grid)
            low, high = r["ci"]  # type: ignore[misc]
            print(
                f"| {n:,} | {mode} | {r['path']} | {r['median_s']:.3f} | {r['min_s']:.3f} "
                f"| {r['rss_peak_mib']:.0f} | {r['rss_before_mib']:.0f} | {r['traced_mib']:.1f} "
                f"| {r['verdict']} | {r['speedup']:.4f} [{low:.4f}, {high:.4f}] |"
            )
            if n >= largest:
                if n > largest:
                    worst_s, worst_mib, largest = 0.0, 0.0, n
                worst_s = max(worst_s, float(r["median_s"]))  # type: ignore[arg-type]
                worst_mib = max(worst_mib, float(r["rss_peak_mib"]))  # type: ignore[arg-type]
    met = largest >= 1_000_000 and worst_s < 10.0 and worst_mib < 1024.0
    print()
    print(
        f"- target: 1e6 per arm under 10 s and 1 GiB; at n = {largest:,}: slowest median "
        f"{worst_s:.2f} s, largest peak RSS {worst_mib:.0f} MiB: {'MET' if met else 'MISSED'}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
