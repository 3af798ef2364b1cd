"""aitune_fp: is a compiled PyTorch inference backend really faster than eager? Measure, then decide.

The names README and docs/ use; everything else is imported from the module that defines it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from aitune_fp.core.config import ProfilingConfig
from aitune_fp.core.messages import fmt_speedup_msg, fmt_speedup_msg_short, fmt_throughput_detail
from aitune_fp.core.report import CandidateFailure, TuneReport
from aitune_fp.core.results import PerformanceValidationMixinResult, PerformanceValidationResult
from aitune_fp.core.sequential import decide_speedup
from aitune_fp.core.speedup import compute_speedup, meets_threshold, required_speedup
from aitune_fp.core.verdict import SpeedupDecision
from aitune_fp.errors import AitunefpError
from aitune_fp.inputs import GraphSpec, Sample

if TYPE_CHECKING:
    from aitune_fp.adapters.validation import validation_of, with_performance_validation
    from aitune_fp.backends.base import BackendBase
    from aitune_fp.backends.compile import TorchCompileBackend
    from aitune_fp.backends.eager import TorchEagerBackend
    from aitune_fp.backends.protocol import Backend
    from aitune_fp.backends.quantized import Int8DynamicBackend
    from aitune_fp.correctness.tolerances import Tolerances
    from aitune_fp.pipeline.strategies import (
        FirstWinsStrategy,
        MaxThroughputStrategy,
        OneBackendStrategy,
        build_and_validate,
        try_candidate,
    )
    from aitune_fp.pipeline.values import CandidateOutcome, NoValidBackendError

__version__ = "0.1.0"

__all__ = [
    "AitunefpError",
    "Backend",
    "BackendBase",
    "CandidateFailure",
    "CandidateOutcome",
    "FirstWinsStrategy",
    "GraphSpec",
    "Int8DynamicBackend",
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
    "TuneReport",
    "__version__",
    "build_and_validate",
    "compute_speedup",
    "decide_speedup",
    "fmt_speedup_msg",
    "fmt_speedup_msg_short",
    "fmt_throughput_detail",
    "meets_threshold",
    "required_speedup",
    "try_candidate",
    "validation_of",
    "with_performance_validation",
]

#: The public names that import torch, by defining module: imported on first use, because every
#: import of the package (``aitune-fp --help`` too) runs this file first.
_NEEDS_TORCH = {
    "Backend": "aitune_fp.backends.protocol",
    "BackendBase": "aitune_fp.backends.base",
    "CandidateOutcome": "aitune_fp.pipeline.values",
    "FirstWinsStrategy": "aitune_fp.pipeline.strategies",
    "Int8DynamicBackend": "aitune_fp.backends.quantized",
    "MaxThroughputStrategy": "aitune_fp.pipeline.strategies",
    "NoValidBackendError": "aitune_fp.pipeline.values",
    "OneBackendStrategy": "aitune_fp.pipeline.strategies",
    "Tolerances": "aitune_fp.correctness.tolerances",
    "TorchCompileBackend": "aitune_fp.backends.compile",
    "TorchEagerBackend": "aitune_fp.backends.eager",
    "build_and_validate": "aitune_fp.pipeline.strategies",
    "try_candidate": "aitune_fp.pipeline.strategies",
    "validation_of": "aitune_fp.adapters.validation",
    "with_performance_validation": "aitune_fp.adapters.validation",
}


def __getattr__(name: str) -> Any:
    if name not in _NEEDS_TORCH:
        raise AttributeError(f"module 'aitune_fp' has no attribute {name!r}")
    return getattr(importlib.import_module(_NEEDS_TORCH[name]), name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
