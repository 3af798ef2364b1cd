"""AITune's own gate vs the same AITune strategy decorated by aitune_fp, side by side (issue 11).

The same candidates go through ``ait.Module`` + ``ait.tune`` with ``OneBackendStrategy`` twice:
plain (AITune 0.6.0's point-estimate gate: eager profiled once, 10 warm-up + 20 timed calls each,
``speedup >= 1.01``) and decorated with ``with_performance_validation`` (aitune_fp's interleaved
statistical gate, its default ``ProfilingConfig``). All (candidate, gate) tunes are shuffled into
one campaign so both gates see the same machine conditions. Real timing on CPU, no fake clock.

Candidates (AITune backends): the eager module itself (identical), and two that skip part of the
wasted work eager does (true ~1.1x and ~2x; the true ratio is measured first with interleaved
reference pairs). Reported per (candidate, gate): tunes, accept rate (the candidate selected
instead of eager), model calls per tune (everything the tune ran: AITune's own eager baseline,
the correctness checks, the gate) and wall time per tune.

Run: ``python benchmarks/aitune_side_by_side.py [--identical 20] [--others 10]``. Needs AITune
0.6.0 installed as in ``.ci/run``.
"""

from __future__ import annotations

import argparse
import logging
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("AITUNE_CACHE_DIR", tempfile.mkdtemp(prefix="aitune-side-by-side-"))

import structlog  # noqa: E402
import torch  # noqa: E402

from aitune_fp.adapters.validation import validation_of, with_performance_validation  # noqa: E402
from tests.aitune_loader import import_aitune  # noqa: E402

ait = import_aitune()
from aitune.torch.backend import TorchEagerBackend  # noqa: E402
from aitune.torch.module_registry import MODULE_REGISTRY  # noqa: E402

WIDTH, UNIT, BATCH = 64, 96, 32
EAGER_UNITS = 22  # wasted 96x96 matmul units per eager call; candidates skip some
CALLS = [0]


class Work(torch.nn.Module):
    """Useful work (a Linear) plus ``units`` of wasted matmuls whose result is discarded."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.useful = torch.nn.Linear(WIDTH, WIDTH)
        self.register_buffer("w", torch.randn(UNIT, UNIT) / UNIT**0.5)

    def run(self, x: torch.Tensor, units: int) -> torch.Tensor:
        CALLS[0] += 1
        y = self.w
        for _ in range(units):
            y = torch.tanh(y @ self.w)
        return self.useful(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.run(x, EAGER_UNITS)


MODES, BUILD = TorchEagerBackend._execution_modes, TorchEagerBackend._build_mode


class Identical(TorchEagerBackend):
    """The eager module under another name."""

    _execution_modes, _build_mode = MODES, BUILD


class Skip2(TorchEagerBackend):
    """Skips 2 of the 22 wasted units: about 1.1x."""

    _execution_modes, _build_mode = MODES, BUILD

    def _infer(self, *args: Any, **kwargs: Any) -> Any:
        with torch.no_grad():
            return self._orig_module.run(*args, EAGER_UNITS - 2)


class Half(TorchEagerBackend):
    """Skips half the wasted units: about 2x."""

    _execution_modes, _build_mode = MODES, BUILD

    def _infer(self, *args: Any, **kwargs: Any) -> Any:
        with torch.no_grad():
            return self._orig_module.run(*args, EAGER_UNITS // 2)


CANDIDATES = {"identical": Identical, "~1.1x": Skip2, "~2x": Half}


def true_speedup(kind: str, pairs: int = 300, warmup: int = 20) -> float:
    """Median ratio eager/candidate latency over interleaved pairs (order alternating)."""
    model = Work().eval()
    units = {"identical": EAGER_UNITS, "~1.1x": EAGER_UNITS - 2, "~2x": EAGER_UNITS // 2}[kind]
    x = torch.randn(BATCH, WIDTH)

    def timed(n_units: int) -> int:
        start = time.perf_counter_ns()
        model.run(x, n_units)
        return time.perf_counter_ns() - start

    ratios = []
    with torch.no_grad():
        for i in range(warmup + pairs):
            if i % 2:
                eager, cand = timed(EAGER_UNITS), timed(units)
            else:
                cand, eager = timed(units), timed(EAGER_UNITS)
            if i >= warmup:
                ratios.append(eager / cand)
    return statistics.median(ratios)


def one_tune(kind: str, gate: str, n: int) -> tuple[bool, int, float]:
    """One ``ait.tune`` of a fresh model; (candidate selected, model calls, wall seconds)."""
    strategy: Any = ait.OneBackendStrategy(backend=CANDIDATES[kind]())
    strategy.enable_find_max_batch_size(False)
    if gate == "aitune_fp":
        strategy = with_performance_validation(strategy)
    name = f"m{n}"
    module = ait.Module(Work().eval(), name, strategy=strategy)
    CALLS[0] = 0
    start = time.perf_counter()
    try:
        ait.tune(module, torch.randn(WIDTH), batch_sizes=[1, BATCH], device="cpu")
    finally:
        MODULE_REGISTRY.unregister(name)
    wall = time.perf_counter() - start
    if gate == "aitune_fp":
        report = validation_of(strategy).last_report
        accepted = report is not None and report.outcome == "candidate"
    else:
        accepted = bool(strategy.perf_validation_results) and bool(
            strategy.perf_validation_results[-1].passed
        )
    return accepted, CALLS[0], wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--identical", type=int, default=20, help="tunes per gate, identical")
    parser.add_argument("--others", type=int, default=10, help="tunes per gate, 1.1x and 2x")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    structlog.configure(
        wrapper_class=structlog.make_filtering_bound_logger(logging.CRITICAL)
    )  # the events are not the point here
    logging.disable(logging.WARNING)  # AITune's ⚡ lines
    truth = {kind: true_speedup(kind) for kind in CANDIDATES}
    plan = [
        (kind, gate)
        for kind in CANDIDATES
        for gate in ("aitune", "aitune_fp")
        for _ in range(args.identical if kind == "identical" else args.others)
    ]
    random.Random(args.seed).shuffle(plan)
    rows: dict[tuple[str, str], list[tuple[bool, int, float]]] = {}
    campaign = time.perf_counter()
    for n, (kind, gate) in enumerate(plan):
        rows.setdefault((kind, gate), []).append(one_tune(kind, gate, n))
        print(f"{n + 1}/{len(plan)} {kind} {gate}", file=sys.stderr)
    total = time.perf_counter() - campaign
    print(
        f"OneBackendStrategy, MLP-like module (Linear {WIDTH} + {EAGER_UNITS} wasted {UNIT}x{UNIT} "
        f"matmuls), batch {BATCH}, CPU {torch.get_num_threads()} threads, threshold 1 %, "
        f"AITune 0.6.0 vs aitune_fp default ProfilingConfig, {len(plan)} tunes shuffled, "
        f"{total:.0f} s in all\n"
    )
    print(
        "| candidate | true speedup | gate | tunes | accepted | median model calls/tune "
        "| median wall s/tune |"
    )
    print("|---|---|---|---|---|---|---|")
    for kind in CANDIDATES:
        for gate in ("aitune", "aitune_fp"):
            runs = rows[(kind, gate)]
            accepted = sum(a for a, _, _ in runs)
            print(
                f"| {kind} | {truth[kind]:.3f}x | {gate} | {len(runs)} | "
                f"{accepted}/{len(runs)} ({100 * accepted / len(runs):.0f} %) | "
                f"{statistics.median(c for _, c, _ in runs):.0f} | "
                f"{statistics.median(w for _, _, w in runs):.2f} |"
            )


if __name__ == "__main__":
    main()
