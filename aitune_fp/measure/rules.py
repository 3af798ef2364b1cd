"""The decision rules by name (AITune's point rule among them), and :func:`measure_speedup`."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import attrs

from aitune_fp.core._checks import check_choice, check_int
from aitune_fp.core.config import (
    DECISION_MODES,
    MAX_CALLS,
    DecisionMode,
    ProfilingConfig,
    check_rule_name,
)
from aitune_fp.core.messages import fmt_apart
from aitune_fp.core.mismatch import Mismatch
from aitune_fp.core.results import Decision
from aitune_fp.core.speedup import DEFAULT_THRESHOLD_PERCENT, Gate, compute_speedup
from aitune_fp.core.timings import throughput_from_latencies
from aitune_fp.errors import InvalidTypeError
from aitune_fp.inputs import Sample, as_sample
from aitune_fp.measure.measurement import (
    Comparison,
    Measurement,
    OnLook,
    assemble,
    closeness_of,
    collecting,
    raw_latencies,
    run_context,
)
from aitune_fp.measure.statistical import compare_statistical, measure_throughput_steady
from aitune_fp.profiling import threads as host
from aitune_fp.profiling.calls import ReferenceSpotCheck, SpotCheck, as_batches, time_calls
from aitune_fp.profiling.timers import Timer, machine_load, timer_for

__all__ = [
    "DecisionRule",
    "decision_modes",
    "measure_speedup",
    "register",
    "rule_for",
    "unregister",
]


#: Where the candidate's fresh draws start: eager's up-front calls take the numbers below it
#: (at most ``MAX_CALLS`` steps), so no two timed calls share input values.
CANDIDATE_DRAWS = MAX_CALLS


def measure_baseline_point(
    baseline: Callable[..., Any],
    batch: Sample | tuple[Any, Any],
    batch_size: int,
    config: ProfilingConfig,
    *,
    timer: Timer | None = None,
    batches: Sequence[Sample | tuple[Any, Any]] | None = None,
    fresh: Callable[[int], Sample] | None = None,
) -> tuple[float, tuple[float, ...]]:
    """AITune's point-mode arm: (samples/s from the mean latency, per-call latencies in s)."""
    size = check_int("batch_size", batch_size, minimum=1)
    latencies = time_calls(
        baseline,
        batch,
        config.point_steps,
        timer=timer,
        warmup=config.point_warmup_calls,
        threads=config.threads,
        arm="baseline",
        batches=batches,
        fresh=fresh,
    )
    return throughput_from_latencies(latencies, size), latencies


def compare_point(c: Comparison, on_look: OnLook | None = None) -> Measurement:
    """AITune's rule: ``eager_latencies`` (measured now when None), the candidate later."""
    size, config, timer = c.size, c.config, c.timer
    env = host.cpu_environment(config.threads, functools.partial(machine_load, timer))
    start = timer.now_ns()
    base = c.eager_latencies
    if base is None:
        _, base = measure_baseline_point(
            c.eager, c.batch, size, config, timer=timer, batches=c.batches, fresh=c.fresh
        )
    base = tuple(base)
    baseline_throughput = throughput_from_latencies(base, size)  # checked before the candidate
    seen: list[Mismatch] = []  # how close each spot check came
    fresh = c.fresh  # the candidate's timed call ``i`` on draw ``CANDIDATE_DRAWS + i``
    cand = time_calls(
        c.candidate,
        c.batch,
        config.point_steps,
        timer=timer,
        warmup=config.point_warmup_calls,
        threads=config.threads,
        arm="candidate",
        spot_check=collecting(c.spot_check, seen),
        batches=c.batches,
        references=c.references,
        spot_rate=c.spot_rate,
        spot_seed=c.spot_seed,
        fresh=None if fresh is None else (lambda i: fresh(CANDIDATE_DRAWS + i)),
        reference=c.eager,
    )
    speedup = compute_speedup(throughput_from_latencies(cand, size), baseline_throughput)
    passed = c.gate.passes(speedup)
    shown, need = fmt_apart(speedup, c.gate.required_speedup)
    import torch

    threads = config.threads if config.threads is not None else torch.get_num_threads()
    raw = raw_latencies(base, cand, None)
    context = run_context(env, machine_load(timer), threads, isolation=c.isolation, raw=raw)
    wall_s = (timer.now_ns() - start) / 1e9
    decided = Decision(
        rule="point",
        verdict="faster" if passed else "not_faster",
        n_baseline=len(base),
        n_candidate=len(cand),
        batch_size=size,
        required_speedup=c.gate.required_speedup,
        reason=(
            f"point speedup {shown}x {'>=' if passed else '<'} required {need}x "
            f"({len(cand)} timed calls, baseline measured once before the candidate)"
        ),
    )
    result = assemble(c.description, base, cand, size, decided, context, closeness_of(c, seen))
    return Measurement(result=result, decision=None, wall_s=wall_s, threads=threads)


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
