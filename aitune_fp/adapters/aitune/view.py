"""aitune_fp's read-outs of a gated AITune strategy, beside AITune's own names on it."""

from __future__ import annotations

from typing import Any

from aitune_fp.adapters.aitune._names import mode
from aitune_fp.adapters.aitune.options import options_of, threshold_of, validation_options
from aitune_fp.adapters.reports import ReportReadOuts
from aitune_fp.pipeline.values import ValidationOptions


class GateView(ReportReadOuts):
    """aitune_fp's view of a gated AITune strategy: ``validation_of(strategy)`` returns one.

    AITune's own names on the strategy stay AITune's (``perf_validation_results`` is its list of
    AITune records); here the same names read aitune_fp's report of the last tune.
    """

    def __init__(self, strategy: Any) -> None:
        """View ``strategy`` (a gated AITune strategy)."""
        self.strategy = strategy

    def _aitune_fp_report_owner(self) -> object:
        return self.strategy

    @property
    def min_speedup_threshold_percent(self) -> float:
        """The threshold the gate uses: the decorator's, else AITune's own, else 1 %."""
        return threshold_of(self.strategy, options_of(self.strategy))

    @property
    def performance_validation_enabled(self) -> bool:
        """Whether AITune's mode lets the gate run (enabled or diagnostic)."""
        return mode(self.strategy) != "disabled"

    @property
    def validation_options(self) -> ValidationOptions:
        """The gate's settings as aitune_fp's options value."""
        return validation_options(self.strategy)

    @property
    def baseline_backend(self) -> Any:
        """AITune's eager baseline backend of the last tune."""
        return getattr(self.strategy, "_baseline_backend", None)

    def tune(self, *args: Any) -> Any:
        """The strategy's (gated) ``tune``."""
        return self.strategy.tune(*args)

    def enable_performance_validation(self, enable: Any = True) -> Any:
        """AITune's own switch (True/False or a mode name); returns the strategy."""
        return self.strategy.enable_performance_validation(enable)
