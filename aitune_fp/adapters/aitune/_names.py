"""AITune's private names the adapter uses (0.6.x), imported on first use and checked by name.

A missing one is an :class:`AituneVersionError` naming it, never a fall back to AITune's gate.
"""

from __future__ import annotations

import importlib
import importlib.metadata
from typing import Any, Final

from aitune_fp.errors import AitunefpError

#: The AITune versions whose private hooks this adapter was written against and tested with.
SUPPORTED_AITUNE: Final = "0.6.x"

MIXIN_MODULE: Final = "aitune.torch.tune_strategy.mixin.performance_validation_mixin"
PROFILING_MODULE: Final = "aitune.torch.tune_strategy.profiling_tune_strategy"
FORMATTING_MODULE: Final = "aitune.torch.tune_strategy.formatting"
REPORTING_MODULE: Final = "aitune.torch.tune_data.reporting"
LOGGING_MODULE: Final = "aitune.utils.logging"

#: Methods every gated strategy must have (AITune's tune flow and its build + correctness step).
COMMON_HOOKS: Final = (
    "tune",
    "_pre_tune",
    "_post_tune",
    "_tune",
    "_build_and_validate_backend",
    "check_correctness",
    "enable_performance_validation",
    "_log_file",
)
#: Methods a profiling strategy (MaxThroughput, MinLatency, LatencyBudget) must have.
PROFILING_HOOKS: Final = ("_run_backends", "_resolve_winner", "_record_perf_result", "_fmt")
#: Module-level names the adapter uses, per AITune module.
MODULE_NAMES: Final = {
    MIXIN_MODULE: ("PerformanceValidationMixinResult",),
    PROFILING_MODULE: ("BackendPerfResult", "_TuneCandidate", "ProfilingTuneStrategy"),
    FORMATTING_MODULE: ("fmt_speedup_comparison",),
    REPORTING_MODULE: ("report_backend_metric",),
    LOGGING_MODULE: ("log",),
}
#: Strategy state AITune sets in ``__init__``/``_pre_tune`` and the adapter reads, per kind.
_STATE: Final = (
    "perf_validation_results",
    "_performance_validation_mode",
    "_baseline_backend",
    "_sink",
)
MIXIN_STATE: Final = (*_STATE, "_resolved_batch_size")
PROFILING_STATE: Final = (*_STATE, "_baseline_result", "_backends", "_metric_label")


class AituneVersionError(AitunefpError, RuntimeError):
    """The installed AITune lacks a private hook the adapter needs; nothing was gated."""


def aitune_version() -> str:
    """The installed AITune's version ("unknown" when it cannot be read)."""
    try:
        return importlib.metadata.version("aitune")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def missing(what: str, name: str) -> AituneVersionError:
    """The error for ``what`` lacking ``name`` (a hook, a module or a module-level name)."""
    return AituneVersionError(
        f"aitune_fp cannot gate {what} of AITune {aitune_version()}: it has no {name!r} "
        f"(the adapter uses AITune {SUPPORTED_AITUNE}'s private hooks; see docs/aitune.md). "
        "Nothing was gated: use a supported AITune version or AITune's own validation."
    )


def aitune(module: str, name: str) -> Any:
    """``module.name`` from AITune, or AituneVersionError naming what is missing."""
    try:
        mod = importlib.import_module(module)
    except ImportError as exc:
        raise missing("strategies", module) from exc
    if not hasattr(mod, name):
        raise missing("strategies", f"{module}.{name}")
    return getattr(mod, name)


def check_state(strategy: Any, names: tuple[str, ...]) -> None:
    """Each of ``names`` is set on ``strategy`` (AITune's state), else AituneVersionError."""
    for name in names:
        if not hasattr(strategy, name):
            raise missing(f"{type(strategy).__name__} instances", name)


def mode(strategy: Any) -> str:
    """AITune's validation mode as a string: "enabled", "diagnostic" or "disabled"."""
    value = strategy._performance_validation_mode
    value = getattr(value, "value", value)
    if isinstance(value, bool):  # AITune's main branch: a plain on/off flag
        return "enabled" if value else "disabled"
    return str(value)


def log(strategy: Any, msg: str, *args: Any, depth: int = 0) -> None:
    """A line through AITune's own sink and indentation (as AITune's strategies log)."""
    aitune(LOGGING_MODULE, "log")(msg, *args, sink=strategy._sink, depth=depth)
