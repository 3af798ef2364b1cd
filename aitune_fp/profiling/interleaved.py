"""The interleaved A/B run: a warm-up, then timed blocks of each arm in random ABBA/BAAB quads."""

from __future__ import annotations

import contextlib
import functools
import gc
import math
import sys
from collections.abc import Callable, Sequence
from statistics import median_high
from types import TracebackType
from typing import Any, Literal, cast

import attrs

from aitune_fp.core._checks import check_int, check_type
from aitune_fp.core.spot import DEFAULT_SPOT_RATE, spot_positions
from aitune_fp.core.timings import is_settled, level_shift_index
from aitune_fp.errors import InvalidStateError, InvalidValueError
from aitune_fp.inputs import CopyRing, Sample, copy_sample, sample_bytes
from aitune_fp.profiling.calls import (
    ReferenceSpotCheck,
    SpotCheck,
    Timed,
    as_batches,
    call_arm,
    checks_per_batch,
    judging,
    spot_calls,
    spot_inspector,
    timed_block,
)
from aitune_fp.profiling.layout import (
    LEAD_FROM,
    WARMUP_BLOCKS,
    arm_calls,
    block_calls,
    block_fitting,
    disturbed,
    most_calls,
    orientation_stream,
    pair_order,
    too_busy,
)
from aitune_fp.profiling.timers import CpuTimer, Timer, gc_enabled, timer_for
from aitune_fp.profiling.workers import Worker


def _against(check: ReferenceSpotCheck, reference: Any, output: Any) -> object:
    return check(output, reference)


def dynamo_counts() -> tuple[int, int]:
    """torch._dynamo's compiled-frame and graph counters (0, 0 when dynamo was never loaded)."""
    utils = sys.modules.get("torch._dynamo.utils")
    counters = getattr(utils, "counters", None)
    if counters is None:
        return (0, 0)
    return (int(counters["frames"]["total"]), int(counters["stats"]["unique_graphs"]))


@attrs.frozen(kw_only=True)
class WarmupReport:
    """Warm-up of both arms: timed single calls, whether both became steady, then timed blocks."""

    baseline_s: tuple[float, ...]
    candidate_s: tuple[float, ...]
    converged: bool
    calls_per_arm: int
    block: int = 1
    baseline_blocks_s: tuple[float, ...] = ()
    candidate_blocks_s: tuple[float, ...] = ()


@attrs.frozen(kw_only=True)
class PairedTimings:
    """Interleaved blocks side by side: ``baseline_s[i]``, ``candidate_s[i]``, seconds a call."""

    baseline_s: tuple[float, ...]
    candidate_s: tuple[float, ...]
    baseline_device_s: tuple[float, ...] | None
    candidate_device_s: tuple[float, ...] | None
    warmup: WarmupReport | None
    threads: int
    wall_s: float
    #: ``warmup_not_steady``, ``recompiled``, ``level_shift_after_pair_<k>`` (:meth:`timings`).
    flags: tuple[str, ...]
    #: Per pair: whether the candidate's timed call came right after an eager call (a carry-over
    #: from eager, e.g. a cache it warmed, shows only there; a user calls the candidate after
    #: itself). Empty when not recorded.
    candidate_after_eager: tuple[bool, ...] = ()
    #: Calls a block (1: single calls, the typical-call reading); the candidate's, as long in time.
    block: int = 1
    candidate_block: int = 1

    @property
    def n_pairs(self) -> int:
        """Number of timed pairs."""
        return len(self.baseline_s)


class InterleavedRun:
    """A running A/B measurement the caller extends look by look (a context manager)."""

    def __init__(
        self,
        baseline: Callable[..., Any],
        candidate: Callable[..., Any],
        batch: Sample | tuple[Any, Any],
        *,
        timer: Timer | None = None,
        threads: int | None = None,
        spot_check: SpotCheck | ReferenceSpotCheck | None = None,
        batches: Sequence[Sample | tuple[Any, Any]] | None = None,
        references: Sequence[Any] | None = None,
        spot_rate: float = DEFAULT_SPOT_RATE,
        spot_seed: int = 0,
        order: Literal["random", "fixed"] = "random",
        order_seed: int | None = None,
        flush: Callable[[], None] | None = None,
        fresh: Callable[[int], Sample] | None = None,
        block: int | None = 1,
    ) -> None:
        """Prepare the run (nothing called until entered); block i's call j is call i*block+j.

        ``fresh(d)``: draw ``d``, one a call of every block pair, leads too; ``block`` None: ranged.
        """
        self._block = None if block is None else check_int("block", block, minimum=1)
        self._calls: tuple[int, ...] | None = None  # ranged: (baseline's, candidate's) a block
        self._evened = False  # ranged as long in time for both arms (time allowed)
        self._fns = {"baseline": baseline, "candidate": candidate}
        self._inputs = as_batches(batch, batches)
        self._multi = batches is not None and fresh is None
        self._fresh = fresh
        self._draws = 0  # fresh values drawn so far
        self._pair_values: list[Sample] = []  # the current block pair's, lead first
        self._pair_check = cast(ReferenceSpotCheck, spot_check) if fresh is not None else None
        self._checks = checks_per_batch(
            None if fresh is not None else spot_check, references, len(self._inputs)
        )
        spot_positions(1, spot_rate, spot_seed)  # checks both now, naming them
        self._spot_rate = spot_rate
        self._spot_seed = spot_seed
        self._looks = 0
        if order not in ("random", "fixed"):
            raise InvalidValueError(f"order must be 'random' or 'fixed', got {order!r}")
        seed = check_type("order_seed", spot_seed if order_seed is None else order_seed, int)
        self._orientation = orientation_stream(seed) if order == "random" else None
        self._orientations: list[bool] = []  # drawn so far, quad by quad
        self._timer = timer
        self._flush = flush
        self._threads = threads
        self._stack: contextlib.ExitStack | None = None
        self._clock: Timer = CpuTimer()
        self._batches: dict[str, tuple[Sample, ...]] = {}
        self._collect_ns = 0  # the last young collection's cost, on the run's clock
        self._collect_ns_per_object = 0.0  # the highest cost per young object seen
        self._gc_was_enabled = True
        self._times: dict[str, list[float]] = {"baseline": [], "candidate": []}
        self._after_eager: list[bool] = []  # per pair: the candidate's call followed eager's
        self._device: dict[str, list[float]] = {"baseline": [], "candidate": []}
        self._warmup: WarmupReport | None = None
        self._threads_in_effect = 0
        self._start_ns = 0
        self._counts_at_start: tuple[int, int] | None = None
        self._recompiled = False
        self._retimed = 0  # block pairs timed again: an arm waited for a CPU (``disturbed``)
        self._too_busy = False  # a look gave up: too many of its pairs were timed again

    def __enter__(self) -> InterleavedRun:
        """Set threads and ``no_grad``, copy the batch for each arm, start the wall clock."""
        # copies and the timer first: if they fail, no global state has been touched yet
        self._clock = self._timer if self._timer is not None else timer_for(self._inputs[0])
        self._batches = {arm: tuple(copy_sample(b) for b in self._inputs) for arm in self._fns}
        self._rings = {arm: CopyRing() for arm in self._fns}  # each timed call's own copy
        self._gc_was_enabled = gc_enabled()  # another tune's pause aside
        self._collect(None, first=True)  # empty the young generation, learn what it costs
        stack = contextlib.ExitStack()
        try:
            fns = list(self._fns.values())
            self._threads_in_effect = stack.enter_context(judging(fns, self._threads))
        except BaseException:
            self._batches = {}
            raise
        self._stack = stack
        self._start_ns = self._clock.now_ns()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Restore threads and grad mode; drop the batch copies."""
        self._batches = {}
        if self._stack is not None:
            self._stack.close()
            self._stack = None

    @property
    def n_pairs(self) -> int:
        """Timed pairs so far."""
        return len(self._times["baseline"])

    def elapsed_s(self) -> float:
        """Wall seconds since the run was entered, on the run's clock."""
        return (self._clock.now_ns() - self._start_ns) / 1e9

    def _baseline_first(self, index: int) -> bool:
        """Whether pair ``index`` times the baseline first (drawing its quad's orientation)."""
        if self._orientation is None:
            return pair_order(index)
        while len(self._orientations) <= index // 2:
            self._orientations.append(self._orientation.random() < 0.5)
        return pair_order(index, self._orientations)

    def _require_entered(self) -> None:
        if self._stack is None:
            raise InvalidStateError("InterleavedRun must be used as a context manager (with ...)")

    def _untimed(self, arm: str, index: int) -> None:
        call_arm(self._fns[arm], self._batches[arm][index % len(self._inputs)], arm)
        self._clock.sync()

    def _timed(self, arm: str, index: int) -> float:
        """One timed warm-up call of ``arm`` on batch ``index % len(batches)``."""
        b = self._batches[arm][index % len(self._inputs)]
        if self._flush is not None:
            self._flush()
        fn, ring = self._fns[arm], self._rings[arm]
        return timed_block(fn, [b], self._clock, arm, {}, ring=ring, lead=False)[0]

    @property
    def block(self) -> int:
        """Timed calls a baseline block (1 until a ranged block is set by :meth:`warm_up`)."""
        return self._block or 1

    @property
    def candidate_block(self) -> int:
        """Timed calls a candidate block: as long in time as the baseline's once ranged."""
        return self._calls[1] if self._calls is not None else self.block

    def _calls_of(self, arm: str) -> int:
        return self.candidate_block if arm == "candidate" else self.block

    def _lead(self) -> bool:
        return min(self.block, self.candidate_block) >= LEAD_FROM

    def _samples(self, arm: str, first: int) -> list[Sample]:
        """The block's inputs from call ``first`` on (batches: the lead runs on call ``first``'s)."""
        n = self._calls_of(arm)
        if self._fresh is not None:
            return self._pair_values[: n + self._lead()]
        samples = [self._batches[arm][g % len(self._inputs)] for g in range(first, first + n)]
        return samples[:1] + samples if self._lead() else samples

    def _new_pair(self) -> None:
        """Draw the next block pair's fresh values, lead's first, shared by both arms.

        Never one drawn before: a candidate answering a value it met from memory would be faster.
        """
        if self._fresh is not None:
            n = max(self.block, self.candidate_block) + self._lead()
            self._pair_values = [self._fresh(d) for d in range(self._draws, self._draws + n)]
            self._draws += n

    def _run_block(
        self, arm: str, first: int, picked: Sequence[int], keep: dict[str, dict[int, Any]] | None
    ) -> Timed:
        """Time ``arm``'s block from call ``first``; the calls ``picked`` (in the block) checked."""
        checks: dict[int, Callable[[Any], None]] = {}
        for j in (j for j in picked if j < self._calls_of(arm)):
            if keep is not None:
                checks[j] = functools.partial(keep.setdefault(arm, {}).__setitem__, j)
            elif arm == "candidate":
                b = (first + j) % len(self._inputs)
                inspect = spot_inspector(self._checks[b], first + j + 1, b if self._multi else None)
                if inspect is not None:
                    checks[j] = inspect
        if self._flush is not None:
            self._flush()  # before the block's barrier: it finishes before the clock starts
        samples = self._samples(arm, first)
        fn, ring = self._fns[arm], self._rings[arm]
        return timed_block(fn, samples, self._clock, arm, checks, ring=ring, lead=self._lead())

    def _compare_calls(self, outputs: dict[str, dict[int, Any]], first: int) -> None:
        """Checked fresh calls: the candidate's output against the baseline's, same input."""
        if self._pair_check is None:
            return
        check = self._pair_check
        for j, out in sorted(outputs.get("candidate", {}).items()):
            base = outputs.get("baseline", {}).get(j)
            if base is None:  # past the baseline's shorter block: its output on that value, untimed
                baseline = self._fns["baseline"]
                base = call_arm(baseline, self._pair_values[j + self._lead()], "baseline")
                if isinstance(baseline, Worker):
                    base = baseline.output()
            inspect = spot_inspector(functools.partial(_against, check, base), first + j + 1)
            assert inspect is not None
            inspect(out)

    def _past(self, deadline_ns: int | None) -> bool:
        return deadline_ns is not None and self._clock.now_ns() >= deadline_ns

    def _collect(self, deadline_ns: int | None, *, first: bool = False) -> None:
        """Collect the paused collector's young generation when due and done by ``deadline_ns``."""
        if not self._gc_was_enabled:
            return  # the caller turned the collector off: collect nothing
        young = gc.get_count()[0]
        threshold = gc.get_threshold()[0]
        if not first and (threshold <= 0 or young <= threshold):
            return
        predicted = max(self._collect_ns, self._collect_ns_per_object * young)
        if deadline_ns is not None and self._clock.now_ns() + predicted > deadline_ns:
            return
        start = self._clock.now_ns()
        gc.collect(0)
        self._collect_ns = max(self._clock.now_ns() - start, 0)
        self._collect_ns_per_object = max(
            self._collect_ns_per_object, self._collect_ns / max(young, 1)
        )

    def warm_up(
        self,
        *,
        window: int,
        tolerance: float,
        max_calls: int,
        deadline_ns: int | None = None,
        reserve_pairs: int = 0,
    ) -> WarmupReport:
        """An untimed call of each arm, timed calls until both are steady, then timed blocks."""
        self._require_entered()
        check_int("max_calls", max_calls, minimum=1)
        size = max(check_int("window", window, minimum=1), 2)
        times: dict[str, list[float]] = {"baseline": [], "candidate": []}
        calls = 0
        converged = False
        if not self._past(deadline_ns):
            self._untimed("baseline", 0)
            self._untimed("candidate", 0)
            calls = 1
        while 0 < calls < max_calls:
            if self._past(deadline_ns):
                break
            for arm in ("baseline", "candidate"):
                times[arm].append(self._timed(arm, calls))
            calls += 1
            if is_settled(times["baseline"], size, tolerance) and is_settled(
                times["candidate"], size, tolerance
            ):
                converged = True
                break
            last = (times["baseline"][-1], times["candidate"][-1])
            pace_ns = sum(last) * 1e9 * reserve_pairs * (self._block or block_calls(max(last)))
            if deadline_ns is not None and self._clock.now_ns() + pace_ns > deadline_ns:
                break  # what is left goes to the first look (a slow model's: issue 35)
        if self._block is None:
            self._calls = self._ranged(times, size, deadline_ns, reserve_pairs)
            self._block = self._calls[0]
        blocks: dict[str, list[float]] = {"baseline": [], "candidate": []}
        if max(self._calls or (self.block,)) > 1:  # either arm's block is more than a call
            for _ in range(WARMUP_BLOCKS):
                if self._past(deadline_ns):
                    break
                start = self._clock.now_ns()
                self._new_pair()
                for arm in ("baseline", "candidate"):
                    blocks[arm].append(self._run_block(arm, 0, (), None)[0])
                spent = (self._clock.now_ns() - start) * (1 + reserve_pairs)
                if self._past(None if deadline_ns is None else deadline_ns - spent):
                    break  # one more would leave the first look's reserve_pairs no time
            if self._evened and blocks["baseline"]:
                self._calls = self._even(blocks)
                self._block = self._calls[0]
        self._warmup = WarmupReport(
            baseline_s=tuple(times["baseline"]),
            candidate_s=tuple(times["candidate"]),
            converged=converged,
            calls_per_arm=calls,
            block=self.block,
            baseline_blocks_s=tuple(blocks["baseline"] or times["baseline"]),
            candidate_blocks_s=tuple(blocks["candidate"] or times["candidate"]),
        )
        return self._warmup

    def _ranged(
        self,
        times: dict[str, list[float]],
        size: int,
        deadline_ns: int | None,
        reserve_pairs: int,
    ) -> tuple[int, ...]:
        """Each arm's block, as long as the slower arm's at its warm-up pace, fitted to the budget.

        Warm-up blocks and ``reserve_pairs`` pairs end by ``deadline_ns``: a slow candidate looks.
        """
        pace = [
            median_high(times[a][-size:]) if times[a] else 0.0 for a in ("baseline", "candidate")
        ]
        batch_bytes = sample_bytes(self._inputs[0])
        calls = block_calls(max(pace), batch_bytes)
        pairs = WARMUP_BLOCKS + reserve_pairs
        left_s = math.inf if deadline_ns is None else (deadline_ns - self._clock.now_ns()) / 1e9
        self._evened = pairs * calls * 2 * max(pace) <= left_s
        if self._evened:  # each arm's block as long as the slower's
            return arm_calls(calls, pace, most_calls(batch_bytes))
        calls = block_fitting(calls, sum(pace), pairs, left_s)  # short of time: one count
        return (calls, calls)

    def _even(self, blocks: dict[str, list[float]]) -> tuple[int, ...]:
        """The blocks again from the warm-up blocks' pace, the slower arm's ranged again too.

        Single calls' hand-overs (a worker's team woken for each) inflate the first range.
        """
        assert self._calls is not None
        pace = [median_high(blocks[arm]) for arm in ("baseline", "candidate")]
        batch_bytes = sample_bytes(self._inputs[0])
        slower = max(self._calls[pace.index(max(pace))], block_calls(max(pace), batch_bytes))
        return arm_calls(slower, pace, most_calls(batch_bytes))

    def extend(self, n_pairs: int, *, deadline_ns: int | None = None) -> int:
        """Time up to ``n_pairs`` more block pairs (none starts after ``deadline_ns``); how many.

        A pair in which an arm waited for a CPU (:func:`disturbed`) is timed again, in its order,
        until the deadline or :func:`too_busy` (then flagged ``machine_too_busy``).
        """
        self._require_entered()
        check_int("n_pairs", n_pairs, minimum=0)
        if n_pairs == 0:
            return 0
        if self._counts_at_start is None:
            self._counts_at_start = dynamo_counts()
        # between looks, outside any timed region: collect what the paused collector let pile up
        self._collect(deadline_ns)
        start, k = self.n_pairs, max(self.block, self.candidate_block)
        picked = spot_calls(
            n_pairs * k,
            self._spot_rate,
            self._spot_seed + self._looks,
            first_pair=start * k,
            n_batches=len(self._inputs),
        )
        self._looks += 1
        # one untimed call per arm, the next pair's first arm last, so that no arm starts the
        # look warm from its own call (each pair's first call follows the other model)
        first = "baseline" if self._baseline_first(start) else "candidate"
        second = "candidate" if first == "baseline" else "baseline"
        if self._past(deadline_ns):
            return 0
        self._untimed(second, start * k)
        self._untimed(first, start * k)
        previous = first  # the arm of the last call made
        done = again = 0
        while done < n_pairs:
            if self._past(deadline_ns):
                break
            index = self.n_pairs
            first, second = (
                ("baseline", "candidate")
                if self._baseline_first(index)
                else ("candidate", "baseline")
            )
            call = index * k  # the block pair's first call
            mine = [j for j in range(k) if done * k + j in picked]
            keep: dict[str, dict[int, Any]] | None = {} if self._fresh is not None else None
            self._new_pair()
            results = {arm: self._run_block(arm, call, mine, keep) for arm in (first, second)}
            if keep is not None:
                self._compare_calls(keep, call)
            if any(disturbed(t.waited_s, t.wall_s * self._calls_of(a)) for a, t in results.items()):
                previous, again, self._retimed = second, again + 1, self._retimed + 1
                if too_busy(again, n_pairs):
                    self._too_busy = True
                    break
                continue
            for arm, (wall, device, _) in results.items():
                self._times[arm].append(wall)
                if device is not None:
                    self._device[arm].append(device)
            # the candidate's first timed call follows eager's only in a block with no lead
            follows = first == "baseline" or previous == "baseline"
            self._after_eager.append(follows and not self._lead())
            previous = second
            done += 1
        if dynamo_counts() != self._counts_at_start:
            self._recompiled = True
        return done

    def timings(self) -> PairedTimings:
        """Everything timed so far, with flags."""
        base = tuple(self._times["baseline"])
        cand = tuple(self._times["candidate"])
        flags: list[str] = []
        if self._warmup is not None and not self._warmup.converged:
            flags.append("warmup_not_steady")
        if self._recompiled:
            flags.append("recompiled")
        if self._retimed:
            flags.append(f"retimed_{self._retimed}")
        if self._too_busy:
            flags.append("machine_too_busy")
        if base:
            shift = level_shift_index([c / b for b, c in zip(base, cand, strict=True)])
            if shift is not None:
                flags.append(f"level_shift_after_pair_{shift}")
        full = len(self._device["baseline"]) == len(base) and len(base) > 0
        return PairedTimings(
            baseline_s=base,
            candidate_s=cand,
            baseline_device_s=tuple(self._device["baseline"]) if full else None,
            candidate_device_s=tuple(self._device["candidate"]) if full else None,
            warmup=self._warmup,
            threads=self._threads_in_effect,
            wall_s=self.elapsed_s(),
            flags=tuple(flags),
            candidate_after_eager=tuple(self._after_eager),
            block=self.block,
            candidate_block=self.candidate_block,
        )
