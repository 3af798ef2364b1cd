"""Choosing among faster candidates: sequential elimination of contenders timed in rounds."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Final, Literal

import attrs

from aitune_fp.core._checks import (
    as_tuple,
    check_int,
    finite,
    increasing,
    integer,
    not_nan,
    of_type,
    one_of,
    open_interval,
    optional,
    tuple_of,
)
from aitune_fp.core.dependence import lag1_rank_autocorrelation
from aitune_fp.core.hodges_lehmann import paired_log_speedup_bounds
from aitune_fp.core.messages import counted
from aitune_fp.core.sequential import log_ratios, look_alpha, precaution_factor, saturating_exp
from aitune_fp.core.timings import timing_stats
from aitune_fp.errors import InvalidStateError, InvalidTypeError, InvalidValueError

#: Round counts at which the default rule looks.
DEFAULT_SELECTION_LOOKS: Final = (10, 20, 40, 80, 160, 320)
Outcome = Literal["open", "one_left", "settled", "looks_spent", "budget", "unopposed", "none_ran"]
#: How a head-to-head stands or ended (docs/architecture.md says what each means).
OUTCOMES: Final = ("open", "one_left", "settled", "looks_spent", "budget", "unopposed", "none_ran")


def _name(instance: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    if not isinstance(value, str):
        raise InvalidTypeError(f"{attribute.name} must be a str, got {value!r}")
    if not value.strip():
        raise InvalidValueError(f"{attribute.name} must not be empty, got {value!r}")


@attrs.frozen(kw_only=True)
class SelectionRule:
    """How contenders are compared."""

    delta: float = attrs.field(default=0.02, validator=open_interval(0.0, 1.0))
    confidence: float = attrs.field(default=0.95, validator=open_interval(0.5, 1.0))
    looks: tuple[int, ...] = attrs.field(
        default=DEFAULT_SELECTION_LOOKS,
        converter=as_tuple,
        validator=[tuple_of(integer(minimum=2)), increasing],
    )
    guard_serial_correlation: bool = attrs.field(default=True, validator=of_type(bool))

    def pair_alpha(self, n_contenders: int, look: int) -> float:
        """One-sided error of each pair's bounds at ``look`` (1-based) among ``n_contenders``."""
        k = check_int("n_contenders", n_contenders, minimum=2)
        return look_alpha((1.0 - self.confidence) / (k - 1), look, len(self.looks))


@attrs.frozen
class Contender:
    """One candidate in a head-to-head: its name, its place in the user's order, its build time."""

    name: str = attrs.field(validator=_name)
    order: int = attrs.field(validator=integer(minimum=0))
    build_s: float | None = optional(finite(minimum=0.0))


@attrs.frozen(kw_only=True)
class PairBound:
    """How much faster ``first`` is than ``second``, with its two-sided interval at ``level``."""

    first: str = attrs.field(validator=_name)
    second: str = attrs.field(validator=_name)
    ratio: float = attrs.field(validator=finite(minimum=0.0, strict=True))
    low: float = attrs.field(validator=[not_nan(), finite(minimum=0.0)])
    high: float = attrs.field(validator=not_nan())
    level: float = attrs.field(validator=open_interval(0.0, 1.0))
    rounds: int = attrs.field(validator=integer(minimum=2))
    inflation: float = attrs.field(default=1.0, validator=finite(minimum=1.0))

    def flipped(self) -> PairBound:
        """The same bound seen from ``second``: how much faster it is than ``first``."""
        return attrs.evolve(
            self,
            first=self.second,
            second=self.first,
            ratio=1.0 / self.ratio,
            low=0.0 if math.isinf(self.high) else 1.0 / self.high,
            high=math.inf if self.low == 0.0 else 1.0 / self.low,
        )

    def within(self, delta: float) -> bool:
        """Whether the interval lies inside ``[1 / (1 + delta), 1 + delta]``."""
        return 1.0 / (1.0 + delta) <= self.low and self.high <= 1.0 + delta


@attrs.frozen(kw_only=True)
class Elimination:
    """``name`` was shown slower than ``lost_to`` at ``at_rounds`` rounds."""

    name: str = attrs.field(validator=_name)
    lost_to: str = attrs.field(validator=_name)
    ratio: float = attrs.field(validator=finite(minimum=0.0, strict=True))
    low: float = attrs.field(validator=finite(minimum=1.0, strict=True))
    high: float = attrs.field(validator=not_nan())
    at_rounds: int = attrs.field(validator=integer(minimum=2))


@attrs.frozen(kw_only=True)
class Failure:
    """``name`` raised ``error`` (type and message) after ``at_rounds`` complete rounds."""

    name: str = attrs.field(validator=_name)
    error: str = attrs.field(validator=of_type(str))
    at_rounds: int = attrs.field(validator=integer(minimum=0))


@attrs.frozen(kw_only=True)
class SelectionState:
    """Where a head-to-head stands: who is in, who lost to whom, and the choice."""

    contenders: tuple[Contender, ...] = attrs.field(validator=tuple_of(of_type(Contender)))
    remaining: tuple[str, ...] = attrs.field(validator=tuple_of(of_type(str)))
    eliminated: tuple[Elimination, ...] = attrs.field(
        default=(), validator=tuple_of(of_type(Elimination))
    )
    failed: tuple[Failure, ...] = attrs.field(default=(), validator=tuple_of(of_type(Failure)))
    pairs: tuple[PairBound, ...] = attrs.field(default=(), validator=tuple_of(of_type(PairBound)))
    rounds: int = attrs.field(default=0, validator=integer(minimum=0))
    look: int = attrs.field(default=0, validator=integer(minimum=0))
    settled: bool = attrs.field(default=False, validator=of_type(bool))
    chosen: str | None = attrs.field(default=None)
    outcome: Outcome = attrs.field(default="open", validator=one_of(OUTCOMES))
    reason: str = attrs.field(default="", validator=of_type(str))
    #: The fastest is at most this many times faster than ``chosen`` (inf: unknown).
    gap_bound: float = attrs.field(default=math.inf, validator=not_nan())
    confidence: float = attrs.field(default=0.95, validator=open_interval(0.5, 1.0))

    @property
    def done(self) -> bool:
        """Whether the selection is over (a choice, or every contender failed)."""
        return self.outcome != "open"

    def bound(self, first: str, second: str) -> PairBound | None:
        """The latest bound of how much faster ``first`` is than ``second`` (None if not compared)."""
        for pair in self.pairs:
            if (pair.first, pair.second) == (first, second):
                return pair
            if (pair.first, pair.second) == (second, first):
                return pair.flipped()
        return None


def _pct(fraction: float) -> str:
    return f"{fraction * 100:.3g} %"


def _x(ratio: float) -> str:
    return "inf" if math.isinf(ratio) else f"{ratio:.3f}x"


def _names(names: Sequence[str]) -> str:
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def _secs(value: float | None) -> str:
    return "unknown" if value is None else f"{value:.1f} s"


def _tie_key(contender: Contender) -> tuple[bool, float, int, str]:
    """Lower build time first (unknown last), then lower order, then name."""
    build = contender.build_s
    return (build is None, 0.0 if build is None else build, contender.order, contender.name)


def _tie_break(contenders: Sequence[Contender]) -> tuple[Contender, str]:
    """The tie's winner and why, in words."""
    ranked = sorted(contenders, key=_tie_key)
    chosen, others = ranked[0], ranked[1:]
    if not others:
        return chosen, "the only one"
    if chosen.build_s is None:
        return chosen, "first in order (build times unknown)"
    if any(other.build_s == chosen.build_s for other in others):
        return chosen, f"equal build time ({_secs(chosen.build_s)}), first in order"
    if len(others) == 1:
        other = others[0]
        return chosen, f"lower build time ({_secs(chosen.build_s)} vs {_secs(other.build_s)})"
    rest = ", ".join(f"{o.name} {_secs(o.build_s)}" for o in others)
    return chosen, f"lowest build time ({_secs(chosen.build_s)}; {rest})"


def _widest(pairs: Sequence[PairBound]) -> str:
    pair = max(pairs, key=lambda p: (math.log(p.high) - math.log(p.low)) if p.low > 0 else math.inf)
    return f"widest: {pair.first} vs {pair.second} {_x(pair.low)}-{_x(pair.high)}"


def _losses(state: SelectionState) -> str:
    parts = [
        f"{e.name} lost to {e.lost_to} ({_x(e.ratio)} [{_x(e.low)}, {_x(e.high)}] "
        f"at {e.at_rounds} rounds)"
        for e in state.eliminated
    ]
    parts += [f"{f.name} failed ({f.error})" for f in state.failed]
    return "; ".join(parts)


def _remaining(state: SelectionState) -> list[Contender]:
    return [c for c in state.contenders if c.name in state.remaining]


def start_selection(contenders: Sequence[Contender], rule: SelectionRule) -> SelectionState:
    """The state before any round: every contender in, none chosen (names must be unique)."""
    items = tuple(contenders) if isinstance(contenders, Sequence) else (None,)
    if not all(isinstance(c, Contender) for c in items):
        raise InvalidTypeError(f"contenders must be a sequence of Contender, got {contenders!r}")
    if len(items) < 2:
        raise InvalidValueError(f"a selection needs at least 2 contenders, got {len(items)}")
    names = [c.name for c in items]
    if len(set(names)) != len(names):
        raise InvalidValueError(f"contender names must be unique, got {names!r}")
    ordered = tuple(sorted(items, key=lambda c: (c.order, c.name)))
    return SelectionState(
        contenders=ordered,
        remaining=tuple(c.name for c in ordered),
        confidence=rule.confidence,
        reason="no round timed yet",
    )


def _open(state: SelectionState) -> None:
    if state.done:
        raise InvalidStateError(f"the selection is over ({state.outcome}): {state.reason}")


def record_failures(
    state: SelectionState, errors: Mapping[str, str], *, at_rounds: int | None = None
) -> SelectionState:
    """Contenders that raised leave the running, each with its error recorded (never raised)."""
    _open(state)
    when = state.rounds if at_rounds is None else check_int("at_rounds", at_rounds, minimum=0)
    if not isinstance(errors, Mapping) or not errors:
        raise InvalidValueError(f"errors must map failed names to their errors, got {errors!r}")
    for name, error in errors.items():
        if name not in state.remaining:
            raise InvalidValueError(f"{name!r} is not among the remaining {state.remaining!r}")
        if not isinstance(error, str):
            raise InvalidTypeError(f"errors[{name!r}] must be a str, got {error!r}")
    remaining = tuple(n for n in state.remaining if n not in errors)
    failed = tuple(Failure(name=n, error=e, at_rounds=when) for n, e in errors.items())
    state = attrs.evolve(
        state,
        remaining=remaining,
        failed=(*state.failed, *failed),
        pairs=tuple(p for p in state.pairs if p.first in remaining and p.second in remaining),
    )
    if not remaining:
        return attrs.evolve(
            state, outcome="none_ran", reason=f"every contender failed: {_losses(state)}"
        )
    if len(remaining) == 1:
        return _one_left(state)
    return attrs.evolve(
        state, reason=f"{_names(list(errors))} failed; {_names(remaining)} still in"
    )


def _one_left(state: SelectionState) -> SelectionState:
    (last,) = state.remaining
    if not state.eliminated:
        return attrs.evolve(
            state,
            chosen=last,
            outcome="unopposed",
            gap_bound=math.inf,
            reason=f"{last} is the only contender that ran; {_losses(state)}",
        )
    return attrs.evolve(
        state,
        chosen=last,
        outcome="one_left",
        gap_bound=1.0,
        reason=f"{last} is the fastest, the only one left after {state.rounds} rounds: "
        f"{_losses(state)}",
    )


def _latencies(
    latencies: Mapping[str, Sequence[float]], names: Sequence[str]
) -> dict[str, tuple[float, ...]]:
    if not isinstance(latencies, Mapping):
        raise InvalidTypeError(f"latencies must map names to latencies, got {latencies!r}")
    result = {}
    for name in names:
        if name not in latencies:
            raise InvalidValueError(f"latencies has no entry for the remaining {name!r}")
        result[name] = timing_stats(f"latencies[{name!r}]", latencies[name], minimum=0)
    lengths = {len(v) for v in result.values()}
    if len(lengths) != 1:
        shown = {n: len(v) for n, v in result.items()}
        raise InvalidValueError(f"the remaining contenders need equal round counts, got {shown}")
    if lengths.pop() < 2:
        raise InvalidValueError("a look needs at least 2 rounds")
    return result


def _pair(
    first: str, second: str, lat: Mapping[str, tuple[float, ...]], alpha: float, rule: SelectionRule
) -> PairBound:
    """How much faster ``first`` is than ``second`` at one-sided level ``alpha``, widened."""
    est, low, high = paired_log_speedup_bounds(lat[second], lat[first], alpha)
    factor = 1.0
    if rule.guard_serial_correlation:
        logs = log_ratios(lat[second], lat[first])
        factor = precaution_factor(lag1_rank_autocorrelation(logs), len(logs))
        low, high = est - factor * (est - low), est + factor * (high - est)
    low_r, high_r = saturating_exp(low), saturating_exp(high)
    return PairBound(
        first=first,
        second=second,
        ratio=min(max(saturating_exp(est), low_r), high_r),
        low=low_r,
        high=high_r,
        level=1.0 - 2.0 * alpha,
        rounds=len(lat[first]),
        inflation=factor,
    )


def select_at_look(
    contenders: Sequence[Contender],
    latencies: Mapping[str, Sequence[float]],
    look: int,
    rule: SelectionRule,
    *,
    previous: SelectionState | None = None,
    last: bool | None = None,
) -> SelectionState:
    """The state after look ``look`` (1-based): eliminations, settled or not, the choice if due."""
    state = start_selection(contenders, rule)
    if previous is not None:
        if {c.name for c in previous.contenders} != {c.name for c in state.contenders}:
            raise InvalidValueError("previous holds other contenders than contenders")
        state = previous
    _open(state)
    k = check_int("look", look, minimum=1)
    if k > len(rule.looks) or k <= state.look:
        raise InvalidValueError(
            f"look must be in {state.look + 1}..{len(rule.looks)} here, got {look!r}"
        )
    lat = _latencies(latencies, state.remaining)
    alpha = rule.pair_alpha(len(state.contenders), k)
    names = state.remaining
    pairs = [_pair(a, b, lat, alpha, rule) for i, a in enumerate(names) for b in names[i + 1 :]]
    faster: dict[tuple[str, str], PairBound] = {}  # (winner, loser) -> bound of winner over loser
    for pair in pairs:
        if pair.low > 1.0:
            faster[(pair.first, pair.second)] = pair
        elif pair.high < 1.0:
            faster[(pair.second, pair.first)] = pair.flipped()
    beaten = {loser for _, loser in faster}
    unbeaten = [n for n in names if n not in beaten]
    n_rounds = len(lat[names[0]])
    losses = []
    for loser in names:
        wins = [faster[(w, loser)] for w in unbeaten if (w, loser) in faster]
        if wins:  # a loser loses to one that is not beaten itself (none in a cycle)
            best = max(wins, key=lambda p: (p.low, p.first))
            losses.append(
                Elimination(
                    name=loser,
                    lost_to=best.first,
                    ratio=best.ratio,
                    low=best.low,
                    high=best.high,
                    at_rounds=n_rounds,
                )
            )
    out = {e.name for e in losses}
    remaining = tuple(n for n in names if n not in out)
    kept = tuple(p for p in pairs if p.first not in out and p.second not in out)
    state = attrs.evolve(
        state,
        remaining=remaining,
        eliminated=(*state.eliminated, *losses),
        pairs=kept,
        rounds=n_rounds,
        look=k,
    )
    if len(remaining) == 1:
        return _one_left(state)
    if all(p.within(rule.delta) for p in kept):
        return _settle(state, rule)
    if (k == len(rule.looks)) if last is None else last:
        return _unresolved(state, rule, "looks_spent", "the looks ran out")
    news = (
        f"; {_losses(attrs.evolve(state, eliminated=tuple(losses), failed=()))}" if losses else ""
    )
    return attrs.evolve(
        state,
        reason=f"{counted(n_rounds, 'round')}: {_names(remaining)} still in, not yet within "
        f"{_pct(rule.delta)} of each other ({_widest(kept)}){news}",
    )


def _gap(state: SelectionState, name: str) -> float:
    """The highest bound of how much faster any other remaining one is than ``name``."""
    bounds = [state.bound(other, name) for other in state.remaining if other != name]
    highs = [math.inf if b is None else b.high for b in bounds]
    return max([1.0, *highs]) if highs else math.inf


def _settle(state: SelectionState, rule: SelectionRule) -> SelectionState:
    chosen, why = _tie_break(_remaining(state))
    return attrs.evolve(
        state,
        settled=True,
        chosen=chosen.name,
        outcome="settled",
        gap_bound=_gap(state, chosen.name),
        reason=f"{_names(state.remaining)} are within {_pct(rule.delta)} of each other after "
        f"{state.rounds} rounds ({_widest(state.pairs)}); {chosen.name} kept: {why}",
    )


def _unresolved(
    state: SelectionState, rule: SelectionRule, outcome: Outcome, cause: str
) -> SelectionState:
    """Choose among several remaining ones that were not told apart."""
    left = _remaining(state)
    level = _pct(rule.confidence)
    if not state.pairs:
        chosen, why = _tie_break(left)
        return attrs.evolve(
            state,
            chosen=chosen.name,
            outcome=outcome,
            gap_bound=math.inf,
            reason=f"{cause} before any look ({state.rounds} rounds): nothing is known of "
            f"{_names(state.remaining)}'s speeds; {chosen.name} chosen: {why}",
        )
    gaps = {c.name: _gap(state, c.name) for c in left}
    proven = [c for c in left if gaps[c.name] <= 1.0 + rule.delta]
    if proven:
        chosen, why = _tie_break(proven)
        how = (
            f"{_names([c.name for c in proven])} shown within {_pct(rule.delta)} of the fastest "
            f"of them (at {level}); {chosen.name} kept: {why}"
        )
    else:
        chosen = min(left, key=lambda c: (gaps[c.name], _tie_key(c)))
        how = (
            f"{chosen.name} chosen: the fastest of them is at most "
            f"{_pct(gaps[chosen.name] - 1.0)} faster than it (at {level}), the tightest such bound"
        )
    return attrs.evolve(
        state,
        chosen=chosen.name,
        outcome=outcome,
        gap_bound=gaps[chosen.name],
        reason=f"{cause} after {state.rounds} rounds with {_names(state.remaining)} not told "
        f"apart ({_widest(state.pairs)}); {how}",
    )


def choose_on_budget(
    state: SelectionState, rule: SelectionRule, cause: str = "the time budget ran out"
) -> SelectionState:
    """Choose when the budget ran out (or the machine was too busy) with several still in."""
    if state.done:
        return state
    if len(state.remaining) == 1:
        return _one_left(state)
    return _unresolved(state, rule, "budget", cause)
