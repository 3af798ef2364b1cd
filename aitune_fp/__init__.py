"""aitune_fp: is a compiled PyTorch inference backend really faster than eager? Measure, then decide.

The pure names (speedup arithmetic, messages, result values, configs, statistics, inputs) import
without torch; the shell's names (backends, profiling, the decorator) load torch on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from aitune_fp.core.config import ProfilingConfig, for_batch_size
from aitune_fp.core.messages import (
    fmt_baseline_line,
    fmt_baseline_selected,
    fmt_candidate_line,
    fmt_speedup_msg,
    fmt_speedup_msg_short,
    fmt_throughput_detail,
)
from aitune_fp.core.results import PerformanceValidationMixinResult, PerformanceValidationResult
from aitune_fp.core.speedup import compute_speedup, meets_threshold, required_speedup

if TYPE_CHECKING:
    from aitune_fp.backends import (
        Backend,
        BackendBase,
        CudaGraphBackend,
        TorchCompileBackend,
        TorchEagerBackend,
    )
    from aitune_fp.core.stats import SpeedupDecision, decide_speedup, throughput_from_latencies
    from aitune_fp.correctness import CorrectnessError, Tolerances, check_correctness
    from aitune_fp.inputs import GraphSpec, Sample, as_sample
    from aitune_fp.strategies import (
        CandidateOutcome,
        FirstWinsStrategy,
        MaxThroughputStrategy,
        NoValidBackendError,
        OneBackendStrategy,
        build_and_validate,
        try_candidate,
    )
    from aitune_fp.validation import (
        CandidateFailure,
        ValidatingStrategy,
        ValidationOptions,
        is_validating,
        validation_of,
        with_performance_validation,
    )

__version__ = "0.1.0"

#: Public names served lazily: name -> module. Importing them may import torch.
_LAZY: dict[str, str] = {
    # pure, torch-free
    "SpeedupDecision": "aitune_fp.core.stats",
    "decide_speedup": "aitune_fp.core.stats",
    "throughput_from_latencies": "aitune_fp.core.stats",
    "GraphSpec": "aitune_fp.inputs",
    "Sample": "aitune_fp.inputs",
    "as_sample": "aitune_fp.inputs",
    # shell: these import torch
    "Backend": "aitune_fp.backends",
    "BackendBase": "aitune_fp.backends",
    "CudaGraphBackend": "aitune_fp.backends",
    "TorchCompileBackend": "aitune_fp.backends",
    "TorchEagerBackend": "aitune_fp.backends",
    "CorrectnessError": "aitune_fp.correctness",
    "Tolerances": "aitune_fp.correctness",
    "check_correctness": "aitune_fp.correctness",
    "CandidateOutcome": "aitune_fp.strategies",
    "FirstWinsStrategy": "aitune_fp.strategies",
    "MaxThroughputStrategy": "aitune_fp.strategies",
    "NoValidBackendError": "aitune_fp.strategies",
    "OneBackendStrategy": "aitune_fp.strategies",
    "build_and_validate": "aitune_fp.strategies",
    "try_candidate": "aitune_fp.strategies",
    "CandidateFailure": "aitune_fp.validation",
    "ValidationOptions": "aitune_fp.validation",
    "is_validating": "aitune_fp.validation",
    "ValidatingStrategy": "aitune_fp.validation",
    "validation_of": "aitune_fp.validation",
    "with_performance_validation": "aitune_fp.validation",
}

__all__ = [
    "Backend",
    "BackendBase",
    "CandidateFailure",
    "CandidateOutcome",
    "CorrectnessError",
    "CudaGraphBackend",
    "FirstWinsStrategy",
    "GraphSpec",
    "MaxThroughputStrategy",
    "NoValidBackendError",
    "OneBackendStrategy",
    "PerformanceValidationMixinResult",
    "PerformanceValidationResult",
    "ProfilingConfig",
    "Sample",
    "SpeedupDecision",
    "Tolerances",
    "TorchCompileBackend",
    "TorchEagerBackend",
    "ValidatingStrategy",
    "ValidationOptions",
    "__version__",
    "as_sample",
    "build_and_validate",
    "check_correctness",
    "compute_speedup",
    "decide_speedup",
    "fmt_baseline_line",
    "fmt_baseline_selected",
    "fmt_candidate_line",
    "fmt_speedup_msg",
    "fmt_speedup_msg_short",
    "fmt_throughput_detail",
    "for_batch_size",
    "is_validating",
    "meets_threshold",
    "required_speedup",
    "throughput_from_latencies",
    "try_candidate",
    "validation_of",
    "with_performance_validation",
]


def __getattr__(name: str) -> Any:
    """Load a lazily served public name on first access (PEP 562)."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'aitune_fp' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    """List the public names, lazy ones included."""
    return sorted(set(globals()) | set(_LAZY))
