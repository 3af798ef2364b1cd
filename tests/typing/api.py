"""Type-checked, never run: the public API keeps the strategy's type through the decorator."""

from __future__ import annotations

from aitune_fp import (
    FirstWinsStrategy,
    OneBackendStrategy,
    PerformanceValidationResult,
    TorchEagerBackend,
    compute_speedup,
    decide_speedup,
    meets_threshold,
    validation_of,
    with_performance_validation,
)

instance: FirstWinsStrategy = with_performance_validation(FirstWinsStrategy([TorchEagerBackend()]))
klass: type[FirstWinsStrategy] = with_performance_validation(FirstWinsStrategy)
decorator = with_performance_validation(min_speedup_threshold_percent=2.0)
klass2: type[OneBackendStrategy] = decorator(OneBackendStrategy)
instance2: OneBackendStrategy = decorator(OneBackendStrategy(TorchEagerBackend()))


@with_performance_validation(min_speedup_threshold_percent=5.0)
class Mine(FirstWinsStrategy):
    """A user's strategy."""


mine: Mine = Mine([])
ok: bool = meets_threshold(compute_speedup(2.0, 1.0))
verdict: str = decide_speedup([1.0, 1.1], [0.5, 0.6]).verdict
result = PerformanceValidationResult("x", 2.0, 1.0, 2.0, True)

results: tuple[PerformanceValidationResult, ...] = validation_of(instance).perf_validation_results
baseline: float | None = validation_of(instance).baseline_throughput
