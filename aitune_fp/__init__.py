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
    pass

__version__ = "0.1.0"

#: Public names served lazily: name -> module. Importing them may import torch.
_LAZY: dict[str, str] = {}

__all__ = [
    "PerformanceValidationMixinResult",
    "PerformanceValidationResult",
    "ProfilingConfig",
    "__version__",
    "compute_speedup",
    "fmt_baseline_line",
    "fmt_baseline_selected",
    "fmt_candidate_line",
    "fmt_speedup_msg",
    "fmt_speedup_msg_short",
    "fmt_throughput_detail",
    "for_batch_size",
    "meets_threshold",
    "required_speedup",
    *_LAZY,
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
