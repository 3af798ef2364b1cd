"""Choosing among candidates that passed the gate (head-to-head or best point); latency budgets."""

from __future__ import annotations

from collections.abc import Sequence

from aitune_fp.core.quantiles import (
    DEFAULT_QUANTILE,
    LatencyCheck,
    min_samples_for_upper_bound,
    quantile_upper_bound,
)
from aitune_fp.core.report import Stage
from aitune_fp.core.selection import Contender, SelectionRule, SelectionState
from aitune_fp.errors import BackendFailedError
from aitune_fp.events.candidates import HeadtoheadLook, LatencyChecked, SelectionDecided
from aitune_fp.measure.headtohead import head_to_head
from aitune_fp.pipeline.stages import (
    Arena,
    fresh_batches,
    release,
    spot_check_of,
    unforeseen_seed,
)
from aitune_fp.pipeline.values import CandidateOutcome, infer_of
from aitune_fp.pipeline.vetting import rank, recheck
from aitune_fp.profiling.calls import SpotCheckError, time_calls
from aitune_fp.profiling.layout import block_calls

_WARMUP_CALLS = 3


def _point_choice(arena: Arena, passing: Sequence[CandidateOutcome]) -> CandidateOutcome:
    """AITune's rule: the highest point estimate (ties to the earlier); the rest released."""
    scored = [(s, -i, o) for i, o in enumerate(passing) if (s := rank(arena, o)) is not None]
    return max(scored, key=lambda item: item[:2])[2] if scored else CandidateOutcome("", None)


def _distinct(descriptions: Sequence[str]) -> list[str]:
    """The descriptions, a repeated one numbered (``B()``, ``B() #2``) so each names one candidate."""
    seen: dict[str, int] = {}
    names = []
    for d in descriptions:
        seen[d] = seen.get(d, 0) + 1
        names.append(d if seen[d] == 1 else f"{d} #{seen[d]}")
    return names


#: Where the head-to-head's fresh inputs start among the tune's held-out draws (the gate's
#: pairs take the numbers below it).
_SELECTION_ROUNDS = 1_000_000


def _paces(arena: Arena, by_name: dict[str, CandidateOutcome]) -> dict[str, float]:
    """Each contender's seconds a call at its gate; none when the verdict is the typical call."""
    if arena.config.quantity != "throughput" or arena.batch_size is None:
        return {}
    throughputs = {n: o.result.throughput if o.result else 0.0 for n, o in by_name.items()}
    return {n: arena.batch_size / t if t > 0 else 0.0 for n, t in throughputs.items()}


def _head_to_head(arena: Arena, passing: Sequence[CandidateOutcome]) -> CandidateOutcome:
    """Time ``passing`` against each other; record the selection; the losers' failures too."""
    opened, timer = arena.timing()
    batch, batches, references = opened.batch, opened.batches, opened.references
    config = arena.config
    rule = SelectionRule(
        delta=config.selection_delta_percent / 100.0,
        confidence=config.confidence,
        guard_serial_correlation=config.guard_serial_correlation,
    )
    names = _distinct([o.description for o in passing])
    by_name = dict(zip(names, passing, strict=True))
    contenders = [  # build time to the tenth of a second: closer is a tie, not a reason
        (Contender(n, i, None if o.build_s is None else round(o.build_s, 1)), infer_of(o.backend))
        for i, (n, o) in enumerate(by_name.items())
    ]
    name = arena.target.name
    checks = {n: spot_check_of(arena.closeness, o.backend) for n, o in by_name.items()}

    def on_look(state: SelectionState) -> None:
        arena.emit(HeadtoheadLook.of(arena.run_id, name, state))

    paces = _paces(arena, by_name)
    seed = unforeseen_seed()  # drawn now: no worker started before can foresee its inputs
    made = fresh_batches(batch, seed, arena.target.graph_spec)
    fresh = None if made is None else (lambda r: made(_SELECTION_ROUNDS + r))

    state = head_to_head(
        contenders,
        batch,
        rule,
        batches=batches,
        timer=timer,
        max_seconds=arena.config.selection_max_seconds,
        threads=arena.config.threads,
        seed=seed,
        on_look=on_look,
        spot_checks=checks if len(references) == len(batches) else None,
        references=references,
        spot_rate=arena.config.spot_rate,
        fresh=fresh,
        reference=arena.eager_arm,
        block=block_calls(max(paces.values())) if paces else 1,  # the gate's at the slowest's
        paces=paces or None,
    )
    decided = SelectionDecided(
        run_id=arena.run_id, module_name=name, delta=rule.delta, selection=state
    )
    arena.emit(decided.to_event())
    for failure in state.failed:
        outcome = by_name[failure.name]
        wrong = failure.error.startswith(f"{SpotCheckError.__name__}:")  # "Type: message"
        said = f"{failure.name} gave a wrong output" if wrong else "failed"
        error = BackendFailedError(f"{said} while timed head-to-head: {failure.error}")
        stage: Stage = "correctness" if wrong else "profiling"
        arena.record(outcome.description, stage, error, outcome.log_path)
    if state.chosen is None:
        return CandidateOutcome("", None)
    return by_name[state.chosen]


def choose(
    arena: Arena, outcomes: Sequence[CandidateOutcome], *, activate: bool = True
) -> CandidateOutcome | None:
    """The passing candidate to keep (None when none passed); the others are released.

    A head-to-head winner is rechecked first; one that fails is recorded and the choice made again.
    """
    passing = [o for o in outcomes if o.ok]
    if not passing:
        return None
    if len(passing) == 1:
        best = passing[0]
    elif arena.gated and arena.decides and arena.rule.head_to_head and arena.opened is not None:
        best = _head_to_head(arena, passing)
        while best.ok and not recheck(arena, best):  # wrong or meddling once timed at length
            passing = [o for o in passing if o is not best]
            if not passing:
                return None
            best = _head_to_head(arena, passing) if len(passing) > 1 else passing[0]
    else:
        best = _point_choice(arena, passing)
    for other in passing:
        if other is not best:
            release(arena.target, other.backend)
    if not best.ok:
        return None
    if activate:
        best.backend.activate()
    return best


def latency_check(
    arena: Arena,
    outcome: CandidateOutcome,
    *,
    budget_ms: float,
    quantile: float = DEFAULT_QUANTILE,
    calls: int | None = None,
) -> LatencyCheck:
    """Hold ``outcome``'s ``quantile`` latency to ``budget_ms`` (order-statistics bound)."""
    opened, timer = arena.timing()
    confidence = arena.config.confidence
    # by default twice the calls a finite bound needs, at least 60
    n = max(2 * min_samples_for_upper_bound(quantile, confidence), 60) if calls is None else calls
    latencies = time_calls(
        infer_of(outcome.backend),
        opened.batch,
        n,
        timer=timer,
        warmup=_WARMUP_CALLS,
        threads=arena.config.threads,
        batches=opened.batches,
    )
    check = LatencyCheck(
        backend_description=outcome.description,
        bound=quantile_upper_bound(latencies, quantile, confidence),
        budget_s=budget_ms / 1e3,
    )
    fields = check.to_dict()
    arena.emit(
        LatencyChecked(run_id=arena.run_id, module_name=arena.target.name, **fields).to_event()
    )
    return check
