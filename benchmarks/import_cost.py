"""Import cost of the pure API against ``import torch``, measured side by side in one run.

Each import runs in a fresh interpreter (so nothing is cached in-process); the two are interleaved
``--repeats`` times and the medians are compared. Target: the pure API costs under 5 % of torch's import.
Usage: python benchmarks/import_cost.py [--repeats 7]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys

PURE = (
    "from aitune_fp import compute_speedup, meets_threshold, required_speedup, "
    "fmt_speedup_msg_short, PerformanceValidationResult, ProfilingConfig"
)
TORCH = "import torch"
PROBE = (
    "import sys, time; t = time.perf_counter(); {stmt}; d = time.perf_counter() - t; "
    "assert ('torch' in sys.modules) == {expect_torch}, 'unexpected torch import state'; print(d)"
)


def _time(stmt: str, expect_torch: bool) -> float:
    code = PROBE.format(stmt=stmt, expect_torch=expect_torch)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return float(out.stdout.strip())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args(argv)
    pure: list[float] = []
    torch: list[float] = []
    for _ in range(args.repeats):  # interleaved: both see the same machine conditions
        pure.append(_time(PURE, False))
        torch.append(_time(TORCH, True))
    p, t = statistics.median(pure), statistics.median(torch)
    ratio = p / t
    print(f"pure API import: median {p * 1000:.1f} ms over {args.repeats} fresh interpreters")
    print(f"import torch:    median {t * 1000:.1f} ms")
    print(f"ratio pure/torch: {ratio:.2%} (target < 5 %): {'MET' if ratio < 0.05 else 'MISSED'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
