"""The measuring loop: time eager and a candidate, ask the pure decision at each look, stop.

Rules by name in :mod:`~aitune_fp.measure.rules`: statistical (block pairs, the default), point.
"""

from __future__ import annotations

from aitune_fp.measure.measurement import Comparison, Measurement
from aitune_fp.measure.measurement import OnLook as OnLook
from aitune_fp.measure.point import measure_baseline_point
from aitune_fp.measure.reasons import reason_text as reason_text
from aitune_fp.measure.rules import RULES as RULES
from aitune_fp.measure.rules import (
    DecisionRule,
    decision_modes,
    measure_speedup,
    register,
    rule_for,
    unregister,
)
from aitune_fp.measure.statistical import measure_throughput_steady

__all__ = [
    "Comparison",
    "DecisionRule",
    "Measurement",
    "decision_modes",
    "measure_baseline_point",
    "measure_speedup",
    "measure_throughput_steady",
    "register",
    "rule_for",
    "unregister",
]
