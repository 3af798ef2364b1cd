"""The decision rules by name, and :func:`measure_speedup`, which runs the one a config names."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import attrs

from aitune_fp.core._checks import check_choice, check_int
from aitune_fp.core.config import DECISION_MODES, DecisionMode, ProfilingConfig, check_rule_name
from aitune_fp.core.speedup import DEFAULT_THRESHOLD_PERCENT, Gate
from aitune_fp.errors import InvalidTypeError
from aitune_fp.inputs import Sample, as_sample
from aitune_fp.measure.measurement import Comparison, Measurement, OnLook
from aitune_fp.measure.point import compare_point, measure_baseline_point
from aitune_fp.measure.statistical import compare_statistical, measure_throughput_steady
from aitune_fp.profiling.calls import ReferenceSpotCheck, SpotCheck, as_batches
from aitune_fp.profiling.timers import Timer, timer_for

__all__ = [
    "DecisionRule",
    "decision_modes",
    "measure_speedup",
    "register",
    "rule_for",
    "unregister",
]


def _rule_name(value: object) -> str:
    """A rule's name, checked to be one word when the rule is made."""
    return check_rule_name("name", value)


@attrs.frozen
class DecisionRule:
    """How one decision mode measures: eager's up-front figure, then each candidate against it."""

    name: DecisionMode = attrs.field(converter=_rule_name)
    measure_eager: Callable[..., tuple[float, tuple[float, ...]]]
    compare: Callable[[Comparison, OnLook | None], Measurement]
    keeps_eager_latencies: bool
    head_to_head: bool


RULES: dict[str, DecisionRule] = {}


def register(rule: DecisionRule) -> DecisionRule:
    """Make ``rule`` the rule of its name from now on (config, ``--decision``, sweep files)."""
    if not isinstance(rule, DecisionRule):
        raise InvalidTypeError(f"register takes a DecisionRule, got {type(rule).__name__}")
    RULES[rule.name] = rule
    return rule


def unregister(name: str) -> None:
    """Take a registered rule away again (the built-in rules stay)."""
    if name not in DECISION_MODES:
        RULES.pop(name, None)


def decision_modes() -> tuple[str, ...]:
    """Every registered rule's name, built-in first (what ``decision``, ``--decision`` accept)."""
    return tuple(RULES)


register(DecisionRule("statistical", measure_throughput_steady, compare_statistical, False, True))
register(DecisionRule("point", measure_baseline_point, compare_point, True, False))


def rule_for(config: ProfilingConfig) -> DecisionRule:
    """The decision rule ``config.decision`` names; a name no rule holds is refused, naming it."""
    return RULES[check_choice("decision", config.decision, decision_modes())]


def measure_speedup(
    baseline: Callable[..., Any],
    candidate: Callable[..., Any],
    batch: Sample | tuple[Any, Any],
    batch_size: int,
    config: ProfilingConfig,
    min_speedup_threshold_percent: float = DEFAULT_THRESHOLD_PERCENT,
    *,
    timer: Timer | None = None,
    baseline_latencies: Sequence[float] | None = None,
    description: str = "candidate",
    spot_check: SpotCheck | ReferenceSpotCheck | None = None,
    on_look: OnLook | None = None,
    batches: Sequence[Sample | tuple[Any, Any]] | None = None,
    references: Sequence[Any] | None = None,
    spot_rate: float | None = None,
    spot_seed: int = 0,
) -> Measurement:
    """Measure ``candidate`` against ``baseline`` on ``batch``; decide "faster" per ``config``."""
    size = check_int("batch_size", batch_size, minimum=1)
    gate = Gate(min_speedup_threshold_percent)  # the edge of this public function
    sample = as_sample(batch)
    clock = timer if timer is not None else timer_for(as_batches(sample, batches)[0])
    comparison = Comparison(
        eager=baseline,
        candidate=candidate,
        batch=sample,
        size=size,
        config=config,
        gate=gate,
        timer=clock,
        eager_latencies=baseline_latencies,
        description=description,
        spot_check=spot_check,
        batches=batches,
        references=references,
        spot_rate=config.spot_rate if spot_rate is None else spot_rate,
        spot_seed=spot_seed,
    )
    return rule_for(config).compare(comparison, on_look)
