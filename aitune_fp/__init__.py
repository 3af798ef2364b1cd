"""aitune_fp: is a compiled PyTorch inference backend really faster than eager? Measure, then decide.

The top level holds what README and docs/ use; everything else is in the subpackage or module
that owns it, each with its own ``__all__`` (``aitune_fp.backends``, ``aitune_fp.sweep``,
``aitune_fp.errors``, ``aitune_fp.events``, ``aitune_fp.testing``, ...). Names are served on
first use: the pure ones (speedup arithmetic, messages, results, configs, statistics, inputs)
import without torch; the shell's (backends, strategies, the decorator) load torch. AITune's own
names for the same things (``fmt_speedup_msg``, ``PerformanceValidationMixinResult``) are served
here too, so code written against AITune's performance validation imports them unchanged.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aitune_fp._lazy import lazy_exports

# Where each public name lives, for type checkers; at run time a name is served from the first
# of _SOURCES that exports it (tests/test_public_api.py holds the two equal).
if TYPE_CHECKING:
    from aitune_fp.adapters.validation import validation_of, with_performance_validation
    from aitune_fp.backends import (
        Backend,
        BackendBase,
        Int8DynamicBackend,
        TorchCompileBackend,
        TorchEagerBackend,
    )
    from aitune_fp.core.config import ProfilingConfig
    from aitune_fp.core.messages import (
        fmt_speedup_msg,
        fmt_speedup_msg_short,
        fmt_throughput_detail,
    )
    from aitune_fp.core.report import CandidateFailure, TuneReport
    from aitune_fp.core.results import (
        PerformanceValidationMixinResult,
        PerformanceValidationResult,
    )
    from aitune_fp.core.sequential import decide_speedup
    from aitune_fp.core.speedup import compute_speedup, meets_threshold, required_speedup
    from aitune_fp.core.verdict import SpeedupDecision
    from aitune_fp.correctness import Tolerances
    from aitune_fp.errors import AitunefpError
    from aitune_fp.inputs import GraphSpec, Sample
    from aitune_fp.pipeline.strategies import (
        CandidateOutcome,
        FirstWinsStrategy,
        MaxThroughputStrategy,
        NoValidBackendError,
        OneBackendStrategy,
        build_and_validate,
        try_candidate,
    )

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

#: The modules the names come from, torch-free ones first (a pure name never imports torch).
_SOURCES = (
    "aitune_fp.errors",
    "aitune_fp.core.speedup",
    "aitune_fp.core.messages",
    "aitune_fp.core.results",
    "aitune_fp.core.config",
    "aitune_fp.core.report",
    "aitune_fp.core.verdict",
    "aitune_fp.core.sequential",
    "aitune_fp.inputs",
    # these import torch
    "aitune_fp.backends",
    "aitune_fp.correctness",
    "aitune_fp.pipeline.strategies",
    "aitune_fp.adapters.validation",
)

__getattr__, __dir__ = lazy_exports(__name__, globals(), frozenset(__all__), _SOURCES)
