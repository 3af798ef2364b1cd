"""A short call read through timed blocks: worker isolation, in process, ``torch.utils.benchmark``.

Eager spins 0.3 ms a call; one candidate spins 0.2 ms (truly 1.5x), another 0.3 ms (truly
1.00x). Each is gated by :func:`aitune_fp.measure.measure_speedup` (the default: blocks, the
verdict about throughput) with both arms in worker processes and with both in this process,
and each arm's mean call is read by ``torch.utils.benchmark``'s ``blocked_autorange``; the
single-call reading (``quantity="typical"``) in workers shows the hand-over's pull. The
estimates should agree within 2 % (issue 48). Run it on a quiet machine.

Usage: ``python benchmarks/blocks_side_by_side.py [--repeats 3] [--quick]``
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from aitune_fp.core.config import ProfilingConfig
from aitune_fp.inputs import Sample
from aitune_fp.measure.rules import measure_speedup
from aitune_fp.profiling.workers import Worker

EAGER_S = 0.0003


def spin(seconds: float) -> Callable[[], None]:
    """A call that spins ``seconds`` of wall time (no allocation, no sleep: a steady call)."""

    def call() -> None:
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            pass

    return call


def reference(fn: Callable[[], None], min_run_s: float) -> float:
    """``torch.utils.benchmark``'s mean seconds a call (``blocked_autorange``)."""
    from torch.utils import benchmark

    timer = benchmark.Timer(stmt="fn()", globals={"fn": fn})
    return float(timer.blocked_autorange(min_run_time=min_run_s).mean)


def gate(eager: Any, cand: Any, config: ProfilingConfig) -> tuple[float, str, int]:
    """The gate's estimate, verdict (and what held it back, by flag) and block size."""
    result = measure_speedup(eager, cand, Sample(), 1, config).result
    why = [f for f in result.flags if f.startswith("machine_")]
    verdict = str(result.verdict) + (f" ({', '.join(why)})" if why else "")
    return float(result.speedup or 0.0), verdict, int(result.latencies_block)


def main(argv: Sequence[str] | None = None) -> int:
    """Print one Markdown table: each reading beside the truth."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="one repeat, short budgets")
    args = parser.parse_args(argv)
    repeats = 1 if args.quick else args.repeats
    config = ProfilingConfig(max_seconds=10.0 if args.quick else 60.0)
    typical = ProfilingConfig(max_seconds=config.max_seconds, quantity="typical")
    min_run_s = 0.3 if args.quick else 2.0
    print(
        f"eager spins {EAGER_S * 1e3:.1f} ms a call; {repeats} repeat(s); estimates are "
        "eager / candidate (median over repeats)\n"
    )
    print("| candidate | truth | reading | estimate | off by | verdict | block |")
    print("|---|---|---|---|---|---|---|")
    for truth in (1.5, 1.0):
        cand_s = EAGER_S / truth
        rows: dict[str, list[tuple[float, str, int]]] = {}
        for _ in range(repeats):
            workers = [
                Worker(lambda say, s=s: (spin(s), {}), name=n, timeout_s=30)
                for n, s in (("eager", EAGER_S), ("candidate", cand_s))
            ]
            for worker in workers:
                worker.ready()
            try:
                rows.setdefault("worker isolation (blocks)", []).append(
                    gate(workers[0], workers[1], config)
                )
                rows.setdefault("worker isolation (single calls)", []).append(
                    gate(workers[0], workers[1], typical)
                )
            finally:
                for worker in workers:
                    worker.close()
            rows.setdefault("in process (blocks)", []).append(
                gate(spin(EAGER_S), spin(cand_s), config)
            )
            ratio = reference(spin(EAGER_S), min_run_s) / reference(spin(cand_s), min_run_s)
            rows.setdefault("torch.utils.benchmark", []).append((ratio, "-", 0))
        for label, found in rows.items():
            estimate = statistics.median(f[0] for f in found)
            verdicts = ", ".join(sorted({f[1] for f in found}))
            block = found[0][2] or "-"
            print(
                f"| {cand_s * 1e3:.2f} ms | {truth:.2f}x | {label} | {estimate:.3f}x | "
                f"{(estimate / truth - 1) * 100:+.1f} % | {verdicts} | {block} |",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
