"""The gate a candidate must clear, decided once at the edge and carried as one value."""

from __future__ import annotations

import attrs

from aitune_fp.core._checks import check_threshold
from aitune_fp.core.speedup import DEFAULT_THRESHOLD_PERCENT


def _percent(value: object) -> float:
    return check_threshold("min_speedup_threshold_percent", value)


@attrs.frozen
class Gate:
    """``threshold_percent`` (> -100, finite) and ``required_speedup`` (``1 + pct / 100``)."""

    threshold_percent: float = attrs.field(default=DEFAULT_THRESHOLD_PERCENT, converter=_percent)
    required_speedup: float = attrs.field(init=False)

    @required_speedup.default
    def _required(self) -> float:
        return 1.0 + self.threshold_percent / 100.0  # the threshold is checked: no second check

    def passes(self, speedup: float) -> bool:
        """AITune's point rule: ``speedup >= required_speedup`` (exactly at the gate passes)."""
        return speedup >= self.required_speedup
