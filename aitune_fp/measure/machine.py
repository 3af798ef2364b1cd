"""No verdict from a machine that moved: a look decides on the steady stretch after it, or not."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence

import attrs

from aitune_fp.core.dependence import (
    MACHINE_CHANGE,
    MIN_SIDE_PAIRS,
    STEP_SLACK,
    machine_change_index,
    machine_slowdown,
    ratio_held,
    slowdown_limit,
)
from aitune_fp.core.verdict import SpeedupDecision
from aitune_fp.profiling import threads as host
from aitune_fp.profiling.interleaved import PairedTimings
from aitune_fp.profiling.timers import Timer

#: How often the load is read while waiting for the machine to quiet down (seconds).
POLL_S = 1.0
#: What the wait sleeps with (tests replace it here).
_sleep = time.sleep


@attrs.frozen(kw_only=True)
class Stretch:
    """The pairs a look may decide on: ``[start, n_pairs)``, and why it starts there."""

    start: int
    n_pairs: int
    busy_load: float | None
    changed_at: int | None
    cpus: int
    busy_now: bool = False
    slowdown: float = 1.0
    slowdown_limit: float = 1.0 + MACHINE_CHANGE
    #: How many pairs, warm-up included, ran before eager's last move (the quiet reference).
    quiet_pairs: int = 0
    #: The pairs before the move that, decided on their own, bore the verdict out (0: none).
    before_pairs: int = 0
    #: How far eager's level had to move: MACHINE_CHANGE beyond its noise (:func:`slowdown_limit`).
    change: float = MACHINE_CHANGE
    #: Eager moved but the paired ratio held across it (:meth:`steady_across`): every pair counts.
    steady_ratio: bool = False

    @property
    def slowed(self) -> bool:
        """Whether eager ran slower over the stretch than at its fastest level, past the limit."""
        return not self.steady_ratio and self.slowdown > self.slowdown_limit

    def steady_enough(self, first_look: int) -> bool:
        """Long enough and not busy by the load (it may still be slowed: see :func:`borne_out`)."""
        return not self.busy_now and self.n_pairs - self.start >= first_look

    @property
    def moved(self) -> bool:
        """Whether anything was left out, the stretch itself ran slowed, or eager moved at all."""
        return self.start > 0 or self.slowed or self.steady_ratio

    def steady_across(
        self, base: Sequence[float], cand: Sequence[float], warm: int, *, wander: bool
    ) -> Stretch:
        """Itself over every pair when eager's moves left the paired ratio alone, or as is."""
        if not self.moved or self.busy_load is not None or self.busy_now:
            return self
        if not ratio_held(base, cand, self.quiet_pairs, warm + self.start, wander=wander):
            return self
        return attrs.evolve(self, start=0, steady_ratio=True)

    def flags(self) -> tuple[str, ...]:
        """``machine_busy``, ``machine_changed_at_pair_<k>`` and ``machine_slowed``, as found.

        A move the paired ratio held across: ``machine_moved_ratio_steady_at_pair_<k>`` alone.
        """
        out = []
        if self.busy_load is not None:
            out.append("machine_busy")
        if self.steady_ratio:
            out.append(f"machine_moved_ratio_steady_at_pair_{self.changed_at or 0}")
        elif self.changed_at is not None:
            out.append(f"machine_changed_at_pair_{self.changed_at}")
        if self.slowed:
            out.append("machine_slowed")
        return tuple(out)

    def why(self) -> str:
        """What moved, in words."""
        parts = []
        if self.busy_load is not None:
            parts.append(f"the machine was busy: load {self.busy_load:.1f} on {self.cpus} cores")
        if self.changed_at is not None:
            parts.append(
                f"eager's own latency moved by more than {self.change:.0%} at pair "
                f"{self.changed_at} (the machine changed under the measurement)"
            )
        if self.slowed:
            parts.append(f"eager ran {self.slowdown:.2f}x slower there than at its fastest")
        return "; ".join(parts)

    def note(self, decided: bool) -> str:
        """The note for the reason: what was decided on, or why nothing was."""
        if self.steady_ratio:
            return (
                f"eager's own latency moved by more than {self.change:.0%} at pair "
                f"{self.changed_at or 0}, the paired ratio did not: decided on all "
                f"{self.n_pairs} pairs"
            )
        if decided and self.before_pairs:
            return (
                f"{self.why()}: the pairs before and after it each bear the verdict out, each "
                f"decided on its own (pairs 1-{self.before_pairs} and {self.start + 1}-"
                f"{self.n_pairs}; the interval is the latter's)"
            )
        if decided and self.slowed:
            return (
                f"{self.why()}: decided on pairs {self.start + 1}-{self.n_pairs}, and the "
                f"{self.quiet_pairs} pairs before them, at eager's fastest level, bear the "
                "verdict out"
            )
        if decided:
            return f"{self.why()}: decided on pairs {self.start + 1}-{self.n_pairs} only"
        kept = self.n_pairs - self.start
        if self.busy_now or self.slowed:
            what = "the machine was still busy or slowed at the last look"
        else:
            what = f"{kept} steady pairs after it are too few to decide on"
        return (
            f"{self.why()}; {what}: no verdict from a machine that moved; rerun when quiet "
            "or pin --threads 1"
        )


class MachineWatch:
    """Load readings around each look and eager's level: the steady stretch at each look."""

    def __init__(
        self,
        *,
        cpus: int,
        threads: int,
        first_load: float | None,
        by_load: bool = True,
        load: Callable[[], float | None] | None = None,
    ) -> None:
        """Watch a machine of ``cpus`` cores running a tune of ``threads`` intra-op threads.

        ``by_load``: a busy load drops a look's pairs; off where each block reads its own wait.
        ``load``: reads the machine's load (None: this host's; a fake clock has its own).
        """
        self._load = load or (lambda: host.load_average())
        self.cpus = cpus
        self.threads = threads
        self.by_load = by_load
        self.wander = False  # timed blocks: eager's slow wander is noise (machine_change_index)
        self._last = first_load
        self._quiet_from = 0  # the first pair after the last busy look
        self._busy_load: float | None = None
        self._busy_look = False  # the latest look's pairs ran on a busy machine

    def _busy(self, load: float | None) -> bool:
        return host.is_oversubscribed((load,), cpus=self.cpus, threads=self.threads)

    @property
    def busy_now(self) -> bool:
        """Whether the latest reading says the machine is busy."""
        return self._busy(self._last)

    def read(self) -> float | None:
        """Read the load now (before a look's pairs, after a wait)."""
        self._last = self._load()
        return self._last

    def wait(self, seconds: float, *, clock: Timer, deadline_ns: int) -> float:
        """Wait while the load says busy, up to ``seconds``, never past ``deadline_ns``."""
        waited = 0.0
        while self.busy_now and waited < seconds:
            step = min(POLL_S, seconds - waited)
            if clock.now_ns() + step * 1e9 > deadline_ns:
                break
            _sleep(step)
            waited += step
            self.read()
        return waited

    def after_look(self, before: float | None, n_pairs: int) -> None:
        """A look's pairs are done: when the load before or after them was busy, drop them."""
        after = self.read()
        loads = [x for x in (before, after) if x is not None and self._busy(x) and self.by_load]
        self._busy_look = bool(loads)
        if loads:
            self._quiet_from = n_pairs
            self._busy_load = max(loads)

    def stretch(self, baseline_s: Sequence[float], warmup_s: Sequence[float] = ()) -> Stretch:
        """The steady stretch a look may rest on: after the last busy look and eager's last move.

        ``warmup_s``: eager's warm-up blocks, before pair 0 (a machine that slowed there shows).
        """
        n = len(baseline_s)
        every = [*warmup_s, *baseline_s]
        found = machine_change_index(every, wander=self.wander)
        # found up to STEP_SLACK after a step: that early, it may be the warm-up's own (slowdown)
        early = found is None or found - STEP_SLACK <= len(warmup_s)
        changed = None if found is None or early else found - len(warmup_s)
        start = max(self._quiet_from, changed or 0)
        first = len(warmup_s) + min(start, n - 1)
        limit = slowdown_limit(every, wander=self.wander)  # a move's too, from the whole run
        return Stretch(
            start=start,
            n_pairs=n,
            busy_load=self._busy_load if self._quiet_from > 0 else None,
            changed_at=changed,
            cpus=self.cpus,
            busy_now=self._busy_look,
            slowdown=machine_slowdown(every, first),
            slowdown_limit=limit,
            change=limit - 1.0,
            # the pairs before eager's last move (warm-up included) ran at the other level; the
            # STEP_SLACK pairs just before where it was found may already run at the new one
            quiet_pairs=first if found is None else min(max(found - STEP_SLACK, 0), first),
        )


def borne_out(
    verdict: str,
    required: float,
    quiet_baseline_s: Sequence[float],
    quiet_candidate_s: Sequence[float],
) -> bool:
    """Whether pairs before a slowed stretch, at eager's fastest level, bear its verdict out.

    Their lower (upper) quartile of speedups clears (stays below) ``required``; 8 pairs at least.
    """
    ratios = [b / c for b, c in zip(quiet_baseline_s, quiet_candidate_s, strict=True) if c > 0]
    if len(ratios) < MIN_SIDE_PAIRS:
        return False
    low, _, high = statistics.quantiles(ratios, n=4)
    if verdict == "faster":
        return low >= required
    if verdict == "not_faster":
        return high < required
    return False


def held(decision: SpeedupDecision) -> SpeedupDecision:
    """``decision`` kept open because the machine moved (``held_back="machine"``)."""
    return attrs.evolve(decision, verdict="inconclusive", held_back="machine")


def sides(stretch: Stretch, timings: PairedTimings) -> tuple[PairedTimings, PairedTimings] | None:
    """The pairs before eager's move and those after it, each decided on its own; or None."""
    k = stretch.changed_at
    if k is None or stretch.busy_load is not None or stretch.busy_now or stretch.start != k:
        return None
    cut = k - STEP_SLACK
    if min(cut, stretch.n_pairs - k) < MIN_SIDE_PAIRS:
        return None
    before = from_pair(timings, 0, cut)
    if machine_change_index(before.baseline_s, wander=timings.block > 1) is not None:
        return None
    return before, from_pair(timings, k)


def from_pair(timings: PairedTimings, start: int, stop: int | None = None) -> PairedTimings:
    """``timings`` of pairs ``start`` to ``stop`` (both clocks): the pairs a verdict rests on."""
    if start == 0 and stop is None:
        return timings
    cut = slice(start, stop)

    def part(times: tuple[float, ...] | None) -> tuple[float, ...] | None:
        return None if times is None else times[cut]

    return attrs.evolve(
        timings,
        baseline_s=timings.baseline_s[cut],
        candidate_s=timings.candidate_s[cut],
        baseline_device_s=part(timings.baseline_device_s),
        candidate_device_s=part(timings.candidate_device_s),
        candidate_after_eager=timings.candidate_after_eager[cut],
    )
