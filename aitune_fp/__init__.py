"""aitune_fp: is a compiled PyTorch inference backend really faster than eager? Measure, then decide.

The pure names (speedup arithmetic, messages, result values, configs, statistics, inputs) import
without torch; the shell's names (backends, profiling, the decorator) load torch on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aitune_fp._lazy import lazy_names
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
from aitune_fp.errors import (
    AitunefpError,
    BackendUnavailableError,
    InvalidTypeError,
    InvalidValueError,
)

if TYPE_CHECKING:
    from aitune_fp.backends import (
        BACKENDS,
        AotInductorBackend,
        Backend,
        BackendBase,
        BackendEntry,
        ChannelsLastBackend,
        CudaGraphBackend,
        Int8DynamicBackend,
        OnnxRuntimeBackend,
        TorchCompileBackend,
        TorchEagerBackend,
        UnavailableBackend,
        backend_names,
        default_backends,
        make_backend,
        make_candidate,
    )
    from aitune_fp.core.mismatch import Mismatch
    from aitune_fp.core.report import CandidateFailure, TuneReport, make_result
    from aitune_fp.core.stats import SpeedupDecision, decide_speedup, throughput_from_latencies
    from aitune_fp.correctness import CorrectnessError, Tolerances, check_correctness
    from aitune_fp.inputs import GraphSpec, Sample, as_sample
    from aitune_fp.session import TuneSession, TuneTarget
    from aitune_fp.strategies import (
        CandidateOutcome,
        FirstWinsStrategy,
        MaxThroughputStrategy,
        NoValidBackendError,
        OneBackendStrategy,
        SessionStrategy,
        build_and_validate,
        make_strategy,
        try_candidate,
    )
    from aitune_fp.sweep import (
        BackendChoice,
        LocalExecutor,
        ModelEntry,
        SweepResult,
        SweepSpec,
        SweepSummary,
        load_sweep,
        parse_sweep,
        run_sweep,
        summarize_sweep,
    )
    from aitune_fp.sweep.ray_executor import RayExecutor
    from aitune_fp.validation import (
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
    "BACKENDS": "aitune_fp.backends.registry",
    "BackendEntry": "aitune_fp.backends.registry",
    "backend_names": "aitune_fp.backends.registry",
    "default_backends": "aitune_fp.backends.registry",
    "make_backend": "aitune_fp.backends.registry",
    "make_candidate": "aitune_fp.backends.registry",
    "Mismatch": "aitune_fp.core.mismatch",
    # shell: these import torch
    "Backend": "aitune_fp.backends",
    "BackendBase": "aitune_fp.backends",
    "CudaGraphBackend": "aitune_fp.backends",
    "ChannelsLastBackend": "aitune_fp.backends",
    "Int8DynamicBackend": "aitune_fp.backends",
    "OnnxRuntimeBackend": "aitune_fp.backends",
    "AotInductorBackend": "aitune_fp.backends",
    "TorchCompileBackend": "aitune_fp.backends",
    "TorchEagerBackend": "aitune_fp.backends",
    "UnavailableBackend": "aitune_fp.backends",
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
    "CandidateFailure": "aitune_fp.core.report",
    "TuneReport": "aitune_fp.core.report",
    "make_result": "aitune_fp.core.report",
    "SessionStrategy": "aitune_fp.strategies",
    "TuneSession": "aitune_fp.session",
    "TuneTarget": "aitune_fp.session",
    "ValidationOptions": "aitune_fp.validation",
    "is_validating": "aitune_fp.validation",
    "ValidatingStrategy": "aitune_fp.validation",
    "validation_of": "aitune_fp.validation",
    "with_performance_validation": "aitune_fp.validation",
    "make_strategy": "aitune_fp.strategies",
    # sweeps: torch-free to import (tasks import torch when they run); Ray only when it runs
    "BackendChoice": "aitune_fp.sweep",
    "LocalExecutor": "aitune_fp.sweep",
    "ModelEntry": "aitune_fp.sweep",
    "SweepResult": "aitune_fp.sweep",
    "SweepSpec": "aitune_fp.sweep",
    "SweepSummary": "aitune_fp.sweep",
    "load_sweep": "aitune_fp.sweep",
    "parse_sweep": "aitune_fp.sweep",
    "run_sweep": "aitune_fp.sweep",
    "summarize_sweep": "aitune_fp.sweep",
    "RayExecutor": "aitune_fp.sweep.ray_executor",
}

__all__ = [
    "BACKENDS",
    "AitunefpError",
    "AotInductorBackend",
    "Backend",
    "BackendBase",
    "BackendChoice",
    "BackendEntry",
    "BackendUnavailableError",
    "CandidateFailure",
    "CandidateOutcome",
    "ChannelsLastBackend",
    "CorrectnessError",
    "CudaGraphBackend",
    "FirstWinsStrategy",
    "GraphSpec",
    "Int8DynamicBackend",
    "InvalidTypeError",
    "InvalidValueError",
    "LocalExecutor",
    "MaxThroughputStrategy",
    "Mismatch",
    "ModelEntry",
    "NoValidBackendError",
    "OneBackendStrategy",
    "OnnxRuntimeBackend",
    "PerformanceValidationMixinResult",
    "PerformanceValidationResult",
    "ProfilingConfig",
    "RayExecutor",
    "Sample",
    "SessionStrategy",
    "SpeedupDecision",
    "SweepResult",
    "SweepSpec",
    "SweepSummary",
    "Tolerances",
    "TorchCompileBackend",
    "TorchEagerBackend",
    "TuneReport",
    "TuneSession",
    "TuneTarget",
    "UnavailableBackend",
    "ValidatingStrategy",
    "ValidationOptions",
    "__version__",
    "as_sample",
    "backend_names",
    "build_and_validate",
    "check_correctness",
    "compute_speedup",
    "decide_speedup",
    "default_backends",
    "fmt_baseline_line",
    "fmt_baseline_selected",
    "fmt_candidate_line",
    "fmt_speedup_msg",
    "fmt_speedup_msg_short",
    "fmt_throughput_detail",
    "for_batch_size",
    "is_validating",
    "load_sweep",
    "make_backend",
    "make_candidate",
    "make_result",
    "make_strategy",
    "meets_threshold",
    "parse_sweep",
    "required_speedup",
    "run_sweep",
    "summarize_sweep",
    "throughput_from_latencies",
    "try_candidate",
    "validation_of",
    "with_performance_validation",
]


__getattr__, __dir__ = lazy_names(__name__, globals(), _LAZY)
