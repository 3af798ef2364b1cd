"""The validating wrapper's own cost, and the per-call cost of the backend it returns.

1. Own cost: validated tunes of the embedded MLP with every piece of real work timed (backend
   builds and releases, correctness checks, baseline and candidate measurement); the wrapper's
   own cost is the tune's wall time minus that work. Two scenarios: the main job's candidates
   (torch.compile and bf16 eager under MaxThroughput, as ``aitune-fp tune`` on CPU) and the
   smallest tune there is (one bf16 candidate, rejected at the first look). Target: under 1 %.
2. Per-call cost: the backend a validated tune returns is the inner backend object itself (no
   proxy); its calls are timed interleaved against the same backend tuned without the wrapper.
Usage: python benchmarks/overhead.py [--repeats 3] [--calls 400]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

import attrs
import structlog
import torch

import aitune_fp.pipeline.baseline as baseline_module
import aitune_fp.pipeline.vetting as vetting_module
from aitune_fp.adapters.validation import with_performance_validation
from aitune_fp.backends.base import BackendBase
from aitune_fp.backends.compile import TorchCompileBackend
from aitune_fp.backends.eager import TorchEagerBackend
from aitune_fp.core.config import ProfilingConfig
from aitune_fp.correctness.closeness import Closeness
from aitune_fp.measure.rules import RULES
from aitune_fp.models import mlp
from aitune_fp.pipeline.strategies import MaxThroughputStrategy, OneBackendStrategy

WORK: list[float] = []


def _timed(fn: Callable[..., Any]) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            WORK.append(time.perf_counter() - start)

    return wrapper


def _instrument() -> None:
    """Time the real work: builds, releases, correctness checks and measurements.

    Everything else is the wrapper's own cost: the model guard's snapshot and checks, the
    process-state checks, eager's private copy and the held-out inputs included.
    """
    Closeness.check = _timed(Closeness.check)  # type: ignore[method-assign]
    # eager's calls whose outputs the spot checks compare with are model work too
    baseline_module.reference_output = _timed(baseline_module.reference_output)
    vetting_module.measure_throughput_steady = _timed(vetting_module.measure_throughput_steady)
    for name, rule in list(RULES.items()):
        RULES[name] = attrs.evolve(
            rule, measure_eager=_timed(rule.measure_eager), compare=_timed(rule.compare)
        )
    BackendBase.build = _timed(BackendBase.build)  # type: ignore[method-assign]
    BackendBase.deactivate = _timed(BackendBase.deactivate)  # type: ignore[method-assign]


SCENARIOS: dict[str, Callable[[], Any]] = {
    "main job (compile + bf16, max-throughput)": lambda: MaxThroughputStrategy(
        [TorchCompileBackend(), TorchEagerBackend(dtype=torch.bfloat16)]
    ),
    "smallest tune (one bf16 candidate)": lambda: OneBackendStrategy(
        TorchEagerBackend(dtype=torch.bfloat16)
    ),
}


def own_cost(make: Callable[[], Any], repeats: int) -> list[tuple[float, float]]:
    """(tune wall time, wrapper's own time) per repeat."""
    rows = []
    config = ProfilingConfig()
    for _ in range(repeats):
        model = mlp()
        strategy = with_performance_validation(make(), profiling_config=config)
        WORK.clear()
        with tempfile.TemporaryDirectory() as cache:
            start = time.perf_counter()
            strategy.tune(model.module, "mlp", model.graph_spec, [model.sample], "cpu", cache)
            total = time.perf_counter() - start
        rows.append((total, total - sum(WORK)))
    return rows


def per_call(calls: int) -> tuple[float, float, bool]:
    """Median per-call time of the returned backend, validated vs not; and 'is it unwrapped'."""
    model = mlp()
    batch = model.graph_spec.make_batch(model.sample, model.graph_spec.get_max_batch_size())
    with tempfile.TemporaryDirectory() as cache:
        plain = OneBackendStrategy(TorchEagerBackend()).tune(
            model.module, "mlp", model.graph_spec, [model.sample], "cpu", cache
        )
        wrapped_strategy = with_performance_validation(
            OneBackendStrategy(TorchEagerBackend()), enabled=False
        )
        wrapped = wrapped_strategy.tune(
            model.module, "mlp", model.graph_spec, [model.sample], "cpu", cache
        )
    unwrapped = type(wrapped) is TorchEagerBackend
    a: list[float] = []
    b: list[float] = []
    for i in range(calls):  # interleaved ABBA
        order = (plain, wrapped) if i % 2 == 0 else (wrapped, plain)
        for backend in order:
            start = time.perf_counter_ns()
            batch.call(backend)
            elapsed = time.perf_counter_ns() - start
            (a if backend is plain else b).append(elapsed / 1e9)
    return statistics.median(a), statistics.median(b), unwrapped


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--calls", type=int, default=400)
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    # events are part of the wrapper's cost; render them as JSON into nothing, as a pipeline would
    structlog.configure(
        processors=[structlog.processors.JSONRenderer()],
        logger_factory=structlog.ReturnLoggerFactory(),
    )
    _instrument()
    print("| scenario | repeat | tune wall s | wrapper own s | own / wall |")
    print("|---|---|---|---|---|")
    shares: dict[str, list[float]] = {}
    for label, make in SCENARIOS.items():
        for i, (total, own) in enumerate(own_cost(make, args.repeats), 1):
            print(f"| {label} | {i} | {total:.3f} | {own:.4f} | {own / total:.2%} |")
            shares.setdefault(label, []).append(own / total)
    print()
    for label, values in shares.items():
        worst = max(values)
        verdict = "MET" if worst < 0.01 else "MISSED"
        print(f"{label}: worst own-cost share {worst:.2%} (target < 1 %): {verdict}")
    plain, wrapped, unwrapped = per_call(args.calls)
    print(
        f"returned backend is the inner object (no proxy): {unwrapped}; per call median "
        f"{plain * 1e3:.3f} ms unwrapped vs {wrapped * 1e3:.3f} ms through the wrapper "
        f"(ratio {wrapped / plain:.3f})"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
