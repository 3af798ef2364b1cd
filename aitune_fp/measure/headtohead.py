"""Time ``k`` callables against each other in rounds of blocks (seeded random order); choose.

Spot checks as the gate's; on fresh values each call of a round's block has a draw of its own.
"""

from __future__ import annotations

import functools
import gc
import math
import random
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from aitune_fp.core._checks import check_finite, check_int, check_type
from aitune_fp.core.messages import counted
from aitune_fp.core.selection import (
    Contender,
    SelectionRule,
    SelectionState,
    choose_on_budget,
    record_failures,
    select_at_look,
    start_selection,
)
from aitune_fp.core.spot import DEFAULT_SPOT_RATE
from aitune_fp.errors import InvalidTypeError, InvalidValueError, error_name
from aitune_fp.inputs import CopyRing, Sample, as_sample, copy_sample, sample_bytes
from aitune_fp.profiling.calls import (
    ProfilingError,
    ReferenceSpotCheck,
    SpotCheck,
    SpotCheckError,
    Timed,
    as_batches,
    checks_per_batch,
    empty_device_cache,
    judging,
    spot_calls,
    spot_inspector,
    timed_block,
)
from aitune_fp.profiling.interference import InterferenceError
from aitune_fp.profiling.layout import LEAD_FROM, arm_calls, disturbed, most_calls, too_busy
from aitune_fp.profiling.timers import Timer, gc_enabled, timer_for
from aitune_fp.profiling.workers import Worker

#: A call that failed: its error as ``"Type: message"``.
_Failed = str


def _error(exc: BaseException) -> str:
    return f"{error_name(exc)}: {exc}"


def _spot_checks(
    spot_checks: Mapping[str, ReferenceSpotCheck] | None,
    references: Sequence[Any] | None,
    fns: Mapping[str, Callable[..., Any]],
    n_batches: int,
) -> dict[str, tuple[SpotCheck | None, ...]]:
    """Each contender's one-argument check per batch (none without ``spot_checks``)."""
    if spot_checks is None:
        return {}
    if references is None:
        raise InvalidValueError("spot_checks need references: eager's output on each batch")
    unknown = sorted(set(spot_checks) - set(fns))
    if unknown:
        raise InvalidValueError(f"spot_checks name no contender: {unknown}")
    return {
        name: checks_per_batch(check, references, n_batches) for name, check in spot_checks.items()
    }


def _checked(contenders: object) -> tuple[list[Contender], dict[str, Callable[..., Any]]]:
    if isinstance(contenders, (str, bytes)) or not isinstance(contenders, Sequence):
        raise InvalidTypeError(
            f"contenders must be a sequence of (Contender, callable), got {contenders!r}"
        )
    for i, item in enumerate(contenders):
        if not (
            isinstance(item, tuple)
            and len(item) == 2
            and isinstance(item[0], Contender)
            and callable(item[1])
        ):
            raise InvalidTypeError(f"contenders[{i}] must be (Contender, callable), got {item!r}")
    return [c for c, _ in contenders], {c.name: fn for c, fn in contenders}


@attrs.frozen
class _Last:
    """A contender's last round: what its check needs (its output in process), checked or not."""

    round: int
    batch: int
    values: Sample | None  # the last call's fresh values
    output: Any
    checked: bool


class _Run:
    """The mutable side of one head-to-head: the clock, the copies, the rounds so far."""

    def __init__(
        self,
        fns: dict[str, Callable[..., Any]],
        inputs: tuple[Sample, ...],
        clock: Timer,
        deadline_ns: int,
        seed: int,
        checks: Mapping[str, tuple[SpotCheck | None, ...]],
        spot_rate: float,
        fresh: Fresh | None = None,
        blocks: Mapping[str, int] | None = None,
    ) -> None:
        self.fns = fns
        self.blocks = dict.fromkeys(fns, 1) if blocks is None else dict(blocks)
        self.fresh = fresh
        self.copies = {name: tuple(copy_sample(b) for b in inputs) for name in fns}
        self.n_batches = len(inputs)
        self.rings = {name: CopyRing() for name in fns}  # each timed call's own copy
        self.clock = clock
        self.deadline_ns = deadline_ns
        self.order = random.Random(f"aitune_fp head-to-head order {seed}")
        self.latencies: dict[str, list[float]] = {name: [] for name in fns}
        self.rounds = 0  # kept rounds
        self.attempts = 0  # rounds run, those timed again too: each draws values of its own
        self.retimed = 0  # rounds timed again: a contender waited for a CPU (``disturbed``)
        self.checks = checks
        self.spot_rate = spot_rate
        self.seed = seed
        self.spots: frozenset[int] = frozenset()  # calls checked, numbered round by round
        self.last: dict[str, _Last] = {}

    def plan_spots(self, look: int, target: int) -> None:
        """The calls of the rounds up to ``target`` whose outputs are compared: the gate's schedule.

        Calls are numbered round by round (a round's slot of ``span`` calls), seeded per look;
        rotating batches (no fresh values) each get a round's first call checked, as the gate's.
        """
        n = target - self.rounds
        if not self.checks or n <= 0:
            return
        span = max(self.blocks.values())
        first = self.rounds * span
        drawn = spot_calls(n * span, self.spot_rate, self.seed * 1_000 + look, first_pair=first)
        spots = {first + c for c in drawn}
        batches = 1 if self.fresh is not None else self.n_batches
        covered = {(c // span) % batches for c in spots}
        for r in range(self.rounds, min(target, self.rounds + batches)):
            if r % batches not in covered:
                spots.add(r * span)
                covered.add(r % batches)
        self.spots = frozenset(spots)

    def past_deadline(self) -> bool:
        return self.clock.now_ns() >= self.deadline_ns

    def warm_up(self, names: Sequence[str], calls: int) -> dict[str, str]:
        """``calls`` untimed calls of each contender (fewer once past the deadline)."""
        errors: dict[str, str] = {}
        for name in names:
            for j in range(calls):
                if self.past_deadline():
                    return errors
                blamed, result = self._time(name, [self.copies[name][j % len(self.copies[name])]])
                if isinstance(result, str):
                    errors[blamed] = result
                    break
        return errors

    def _time(
        self,
        name: str,
        samples: Sequence[Sample],
        checks: Mapping[int, Callable[[Any], None]] | None = None,
        *,
        lead: bool = False,
    ) -> tuple[str, Timed | _Failed]:
        """One timed block of ``name`` or its error (not raised), and whom a failure is blamed on."""
        fn, ring = self.fns[name], self.rings[name]
        try:
            return name, timed_block(
                fn, samples, self.clock, None, checks or {}, ring=ring, lead=lead
            )
        except InterferenceError as exc:  # blamed on the contender whose process ran
            blamed = next((n for n, fn in self.fns.items() if fn is exc.culprit), name)
            return blamed, _error(exc)
        except SpotCheckError as exc:  # the output was wrong: nothing to release
            return name, _error(exc)
        except ProfilingError as exc:  # the call failed (an out-of-memory one left the cache empty)
            error, emptied = _error(exc.__cause__ or exc), exc.reason == "out_of_memory"
        except Exception as exc:  # the synchronisation failed
            error, emptied = _error(exc), False
        if not emptied:
            empty_device_cache()  # the exception, and the frames it held, are gone by now
        return name, error

    def one_round(self, names: Sequence[str]) -> dict[str, str]:
        """Time every contender's block in a random order, then check the round's outputs.

        The checks (eager's reference calls, the comparisons) wait for the round's last block:
        between two blocks their work took the next one's cores, and the round was timed again.
        """
        times: dict[str, Timed] = {}
        errors: dict[str, str] = {}
        most = max(k + (k >= LEAD_FROM) for k in self.blocks.values())
        drawn = None if self.fresh is None else self.fresh.block(self.attempts, most)
        due: list[tuple[str, int, list[Any], dict[int, Any]]] = []
        for name in self.order.sample(list(names), len(names)):
            k = self.blocks[name]
            lead = k >= LEAD_FROM  # an untimed first call takes the carry-over
            n, last = k + lead, k - 1
            b = self.rounds % len(self.copies[name])
            own = None if drawn is None else drawn[:n]
            samples = [self.copies[name][b]] * n if own is None else own
            values = [None] * k if own is None else own[lead:]  # timed calls'
            slot = self.rounds * max(self.blocks.values())
            checked = [j for j in range(k) if slot + j in self.spots] if name in self.checks else []
            outputs: dict[int, Any] = {}  # read after the clock stopped
            here = not isinstance(self.fns[name], Worker)  # the last output, for an end check
            kept = {*checked, last} if here else checked
            keep = {j: functools.partial(outputs.__setitem__, j) for j in kept}
            blamed, result = self._time(name, samples, keep, lead=lead)
            if isinstance(result, str):
                errors[blamed] = result
                self.last.pop(name, None)
                continue
            times[name] = result
            ends = last in checked
            output = None if ends else outputs.pop(last, None)  # what an end check reads
            self.last[name] = _Last(self.attempts, b, values[last], output, ends)
            if checked:
                due.append((name, b, values, outputs))
        if self.fresh is not None:  # eager's outputs on the checked values: in one go
            self.fresh.prefetch(self.attempts, [v[j] for _, _, v, out in due for j in out])
        for name, b, values, outputs in due:
            try:
                for j, output in sorted(outputs.items()):
                    inspect = self._inspector(name, self.attempts, b, values[j])
                    if inspect is not None:
                        inspect(output)
            except SpotCheckError as exc:  # wrong: its round is not kept
                errors[name] = _error(exc)
                del times[name]
                self.last.pop(name, None)
        self.attempts += 1
        if any(disturbed(t.waited_s, t.wall_s * self.blocks[n]) for n, t in times.items()):
            self.retimed += 1  # timed again, as the gate's pairs are
            return errors
        for name, timed in times.items():
            self.latencies[name].append(timed.wall_s)
        self.rounds += 1
        return errors

    def _inspector(
        self, name: str, round_: int, b: int, own: Sample | None
    ) -> Callable[[Any], None] | None:
        """``name``'s check of a call of round ``round_`` (on batch ``b``, or its fresh ``own``)."""
        several = len(self.copies[name]) > 1  # numbered as the gate numbers its calls
        check = (
            self.checks[name][b]
            if own is None or self.fresh is None
            else self.fresh.check(name, round_, own)
        )
        return spot_inspector(check, call=round_ + 1, batch=b if several and own is None else None)

    def check_ends(self, names: Sequence[str]) -> dict[str, str]:
        """Check each of ``names`` on the last round it ran, where that was not checked yet."""
        errors: dict[str, str] = {}
        for name in names:
            last = self.last.get(name)
            if last is None or last.checked or name not in self.checks:
                continue
            self.last[name] = attrs.evolve(last, checked=True, output=None)
            fn = self.fns[name]
            try:
                output = fn.output() if isinstance(fn, Worker) else last.output
                inspect = self._inspector(name, last.round, last.batch, last.values)
                if inspect is not None:
                    inspect(output)
            except Exception as exc:  # wrong, or the worker could not show its output
                errors[name] = _error(exc)
        return errors


def _blocks(
    calls: int,
    paces: Mapping[str, float] | None,
    fns: Mapping[str, Callable[..., Any]],
    batch: Sample,
) -> dict[str, int]:
    """Each contender's calls a block: ``calls`` for the slowest pace, as long for the others."""
    if paces is None:
        return dict.fromkeys(fns, calls)
    unknown = sorted(set(paces) - set(fns))
    if unknown:
        raise InvalidValueError(f"paces names {unknown[0]!r}, which is not a contender")
    names = list(fns)
    known = [check_finite(f"paces[{n!r}]", paces.get(n, 0.0), minimum=0.0) for n in names]
    counts = arm_calls(calls, known, most_calls(sample_bytes(batch)))
    return dict(zip(names, counts, strict=True))


@attrs.frozen
class Fresh:
    """New values for every call of a head-to-head, checked against eager's output on them."""

    make: Callable[[int], Sample]
    reference: Callable[..., Any] | None = None
    checks: Mapping[str, ReferenceSpotCheck] = attrs.field(factory=dict)
    _memo: dict[tuple[int, int], tuple[Sample, Any]] = attrs.field(factory=dict, init=False)

    def block(self, round_: int, calls: int) -> list[Sample]:
        """Round ``round_``'s ``calls`` values (draws ``round_ * calls`` on): none met before."""
        first = round_ * calls
        return [as_sample(self.make(d)) for d in range(first, first + calls)]

    def check(self, name: str, round_: int, batch: Sample) -> SpotCheck | None:
        """``name``'s check of its output on ``batch`` (of round ``round_``): eager's output there.

        Eager runs once a value: contenders whose blocks lead differently meet a value at
        different call numbers, so the value itself is the key, not its place in a block.
        """
        check = self.checks.get(name)
        if check is None or self.reference is None:
            return None
        self.prefetch(round_, [batch])
        expected = self._memo[round_, id(batch)][1]
        return lambda output: check(output, expected)

    def prefetch(self, round_: int, batches: Sequence[Sample | None]) -> None:
        """Eager's outputs on round ``round_``'s ``batches``; from a worker, in one block.

        A call each was a round trip each to a team woken from idle (5.7 ms where a call is 1.1).
        """
        if self.reference is None:
            return
        if any(kept[0] != round_ for kept in self._memo):
            self._memo.clear()  # one round's references at a time
        new = list(
            {
                id(b): b for b in batches if b is not None and (round_, id(b)) not in self._memo
            }.values()
        )
        if isinstance(self.reference, Worker) and len(new) > 1:
            outputs = self.reference.outputs_on(new)
        else:
            outputs = [b.call(self.reference) for b in new]
        for b, output in zip(new, outputs, strict=True):
            self._memo[round_, id(b)] = (b, output)  # the batch kept: its id too


def head_to_head(
    contenders: Sequence[tuple[Contender, Callable[..., Any]]],
    batch: Sample | tuple[Any, Any],
    rule: SelectionRule | None = None,
    *,
    batches: Sequence[Sample | tuple[Any, Any]] | None = None,
    timer: Timer | None = None,
    max_seconds: float = 60.0,
    threads: int | None = None,
    warmup_calls: int = 3,
    seed: int = 0,
    on_look: Callable[[SelectionState], None] | None = None,
    spot_checks: Mapping[str, ReferenceSpotCheck] | None = None,
    references: Sequence[Any] | None = None,
    spot_rate: float = DEFAULT_SPOT_RATE,
    fresh: Callable[[int], Sample] | None = None,
    reference: Callable[..., Any] | None = None,
    block: int = 1,
    paces: Mapping[str, float] | None = None,
) -> SelectionState:
    """Time the contenders in rounds of blocks; the final :class:`SelectionState`.

    ``block``: the slowest's calls a block; ``paces`` (seconds a call, by name) give each other
    contender a block as long in time (a block's fixed cost then weighs the same share of each).
    No round starts after ``max_seconds``; failures (raised, wrong) are in ``state.failed``.
    """
    rule = SelectionRule() if rule is None else check_type("rule", rule, SelectionRule)
    values, fns = _checked(contenders)
    state = start_selection(values, rule)
    budget = check_finite("max_seconds", max_seconds, minimum=0.0, strict=True)
    calls = check_int("warmup_calls", warmup_calls, minimum=0)
    check_type("seed", seed, int)
    inputs = as_batches(batch, batches)
    checks = _spot_checks(spot_checks, references, fns, len(inputs))
    clock = timer if timer is not None else timer_for(inputs[0])
    collect = gc_enabled()
    with judging(list(fns.values()), threads):
        own = None if fresh is None else Fresh(fresh, reference, dict(spot_checks or {}))
        blocks = _blocks(check_int("block", block, minimum=1), paces, fns, inputs[0])
        run = _Run(fns, inputs, clock, 0, seed, checks, spot_rate, own, blocks)  # copies first
        run.deadline_ns = clock.now_ns() + math.ceil(budget * 1e9)
        errors = run.warm_up(state.remaining, calls)
        if errors:
            state = record_failures(state, errors, at_rounds=0)
        busy = ""  # why a look ended before the deadline: too many rounds timed again
        for look, target in enumerate(rule.looks, 1):
            if state.done:
                return state
            run.plan_spots(look, target)
            asked, retimed = target - run.rounds, run.retimed  # a busy machine ends it: too_busy
            while (
                run.rounds < target
                and not run.past_deadline()
                and not too_busy(run.retimed - retimed, asked)
            ):
                errors = run.one_round(state.remaining)
                if errors:
                    left = [n for n in state.remaining if n not in errors]
                    if len(left) == 1:  # it ends here: the one left is checked on this round
                        errors.update(run.check_ends(left))
                    state = record_failures(state, errors, at_rounds=run.rounds - 1)
                    if state.done:
                        return state
            out_of_time = run.rounds < target
            if out_of_time and not run.past_deadline():
                busy = (
                    "the machine was too busy to go on "
                    f"({counted(run.retimed, 'round')} timed again, "
                    "another process having a contender's core)"
                )
            ends = run.check_ends(state.remaining) if out_of_time else {}
            if ends:  # the look's planned last round never came: its end is the last one run
                state = record_failures(state, ends, at_rounds=run.rounds - 1)
                if state.done:
                    return state
            if run.rounds < 2 or run.rounds == state.rounds:
                break  # out of time with no new rounds to look at
            current = {name: run.latencies[name] for name in state.remaining}
            state = select_at_look(
                values, current, look, rule, previous=state, last=False if out_of_time else None
            )
            if on_look is not None:
                on_look(state)
            if out_of_time:
                break
            if collect:  # between looks, outside any timed call
                gc.collect(0)
    return choose_on_budget(state, rule, *((busy,) if busy else ()))
