"""Issue 20, timing: rotating batches, seeded random spot checks, and a budget no collection overruns.

Fake clocks make the schedules and budgets deterministic; one test sleeps for real.
"""

from __future__ import annotations

import gc
import math
import time
from collections.abc import Callable
from typing import Any

import pytest
import torch

from aitune_fp.core.config import ProfilingConfig
from aitune_fp.core.spot import DEFAULT_SPOT_RATE, spot_positions
from aitune_fp.inputs import Sample
from aitune_fp.measure.rules import measure_speedup
from aitune_fp.measure.statistical import measure_throughput_steady
from aitune_fp.profiling.calls import SpotCheckError, spot_calls, time_calls
from aitune_fp.profiling.interleaved import InterleavedRun
from aitune_fp.testing import FakeClock
from tests.test_measure import noisy
from tests.test_profiling import compare


def config(**changes: Any) -> ProfilingConfig:
    """Statistical config with a short warm-up for fake-clock tests."""
    return ProfilingConfig(warmup_window=3, warmup_max_calls=10, **changes)


def batches_of(n: int, rows: int = 4, width: int = 8) -> list[Sample]:
    """``n`` distinct batches of the same shape (a cache keyed by shape cannot tell them apart)."""
    gen = torch.Generator().manual_seed(0)
    return [Sample((torch.randn(rows, width, generator=gen),)) for _ in range(n)]


class Memo:
    """A wrong candidate: the output it computed for the first batch of each shape, forever."""

    def __init__(self, model: Callable[[torch.Tensor], torch.Tensor]) -> None:
        self.model = model
        self.cache: dict[tuple[int, ...], torch.Tensor] = {}

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        key = tuple(x.shape)
        if key not in self.cache:
            self.cache[key] = self.model(x)
        return self.cache[key]


def close(output: torch.Tensor, reference: torch.Tensor) -> None:
    """The spot check of these tests: raise when ``output`` is not eager's ``reference``."""
    if not torch.allclose(output, reference):
        diff = (output - reference).abs().max().item()
        raise AssertionError(f"max abs diff {diff:.3g}")


class TestRotation:
    def test_pair_i_runs_both_arms_on_batch_i_mod_n(self) -> None:
        """Each pair runs both arms on the same batch; the batch advances pair by pair."""
        log: list[tuple[str, int]] = []

        def arm(label: str) -> Callable[[torch.Tensor], None]:
            return lambda x: log.append((label, int(x[0])))

        data = [Sample((torch.tensor([float(b)]),)) for b in range(3)]
        with InterleavedRun(arm("A"), arm("B"), Sample(), timer=FakeClock(), batches=data) as run:
            run.extend(4)
            run.extend(3)
        # each extend: one untimed call per arm on the next pair's batch, then the pairs
        untimed_1, pairs_1, untimed_2, pairs_2 = log[:2], log[2:10], log[10:12], log[12:]
        assert {b for _, b in untimed_1} == {0} and {b for _, b in untimed_2} == {4 % 3}
        pairs = pairs_1 + pairs_2
        assert [sorted(pairs[2 * i : 2 * i + 2]) for i in range(7)] == [
            [("A", i % 3), ("B", i % 3)] for i in range(7)
        ]

    def test_every_call_gets_its_own_copy_of_its_batch(self) -> None:
        """A copy per call (made before the clock): a model that changes its input in place
        sees the batch's values on every call, and the caller's batches are never touched."""
        data = [Sample((torch.full((2,), float(b)),)) for b in range(3)]
        seen: dict[str, list[torch.Tensor]] = {"A": [], "B": []}

        def arm(label: str) -> Callable[[torch.Tensor], None]:
            def model(t: torch.Tensor) -> None:
                seen[label].append(t.clone())
                t.add_(1.0)

            return model

        compare(arm("A"), arm("B"), Sample(), config(), n_pairs=9, timer=FakeClock(), batches=data)
        for label in ("A", "B"):
            assert seen[label] and all(float(t[0]) in (0.0, 1.0, 2.0) for t in seen[label])
        assert [float(b.args[0][0]) for b in data] == [0.0, 1.0, 2.0]

    def test_time_calls_rotates_too(self) -> None:
        """The point rule's arm: timed call i on batches[i % n], warm-up calls too."""
        got: list[int] = []
        data = [Sample((torch.tensor([float(b)]),)) for b in range(2)]
        time_calls(lambda x: got.append(int(x[0])), Sample(), 5, warmup=3, batches=data)
        assert got == [0, 1, 0, 0, 1, 0, 1, 0]  # 3 warm-up calls, then 5 timed

    def test_steady_eager_measurement_rotates_across_its_calls(self) -> None:
        """measure_throughput_steady (eager's up-front figure) keeps rotating from call to call."""
        clock = FakeClock()
        got: list[int] = []

        def eager(x: torch.Tensor) -> None:
            clock.advance(0.001)
            got.append(int(x[0]))

        data = [Sample((torch.tensor([float(b)]),)) for b in range(3)]
        measure_throughput_steady(eager, Sample(), 1, config(), timer=clock, batches=data)
        assert got[0] == 0  # the untimed first call
        assert got[1:] == [i % 3 for i in range(len(got) - 1)]
        assert len(got) > 20

    def test_bad_batches_and_references_are_refused(self) -> None:
        """Empty or non-sequence batches, references of the wrong length, and a check over
        several batches without references (it could not tell which batch it saw) are refused."""
        data = batches_of(2)
        run = measure_speedup
        with pytest.raises(ValueError, match="batches must hold at least one sample"):
            run(lambda x: x, lambda x: x, data[0], 1, config(), batches=[])
        with pytest.raises(TypeError, match="batches must be a sequence"):
            run(lambda x: x, lambda x: x, data[0], 1, config(), batches=data[0])  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="2 expected, got 1"):
            run(lambda x: x, lambda x: x, data[0], 1, config(), batches=data, references=[1])
        with pytest.raises(ValueError, match="needs references"):
            run(lambda x: x, lambda x: x, data[0], 1, config(), batches=data, spot_check=print)


class TestMemorisingCandidate:
    """Issue 20: a candidate caching its output by input shape was accepted at 219,343x."""

    @pytest.mark.parametrize("decision", ["statistical", "point"])
    def test_one_batch_lets_it_through(self, decision: str) -> None:
        """Timing and checking the one recorded batch cannot tell a memo from the model."""
        clock, linear = FakeClock(), torch.nn.Linear(8, 8)
        (batch,) = batches_of(1)
        reference = linear(*batch.args).detach()
        m = measure_speedup(
            clock.arm(0.002, fn=linear),
            clock.arm(0.0000001, fn=Memo(linear)),
            batch,
            4,
            config(decision=decision),
            timer=clock,
            spot_check=lambda output: close(output, reference),
        )
        assert m.result.passed

    @pytest.mark.parametrize(
        ("decision", "quantity"),
        [("statistical", "typical"), ("statistical", "throughput"), ("point", "typical")],
    )
    def test_three_rotating_batches_catch_it(self, decision: str, quantity: str) -> None:
        """With 3 distinct batches rotating, a spot check sees a stale output and names the call
        (single calls: the first picked call on batch 1 or 2; blocks: a call of a picked block)."""
        clock, linear = FakeClock(), torch.nn.Linear(8, 8)
        data = batches_of(3)
        with torch.no_grad():
            references = [linear(*b.args) for b in data]
        with pytest.raises(
            SpotCheckError, match=r"^timed call \d+ \(batch [12]\): max abs"
        ) as info:
            measure_speedup(
                clock.arm(0.002, fn=linear),
                clock.arm(0.0000001, fn=Memo(linear)),
                data[0],
                4,
                config(decision=decision, quantity=quantity),
                timer=clock,
                spot_check=close,
                batches=data,
                references=references,
            )
        if quantity == "throughput":
            return  # caught and named by the match above; the call depends on the block size
        n = ProfilingConfig().point_steps if decision == "point" else config().looks[0]
        first_bad = min(j for j in spot_calls(n, DEFAULT_SPOT_RATE, 0, n_batches=3) if j % 3)
        assert (info.value.call, info.value.batch) == (first_bad + 1, first_bad % 3)

    def test_real_cpu_run_catches_it_at_the_first_look(self) -> None:
        """Real clock and real modules: the memo is rejected before any verdict, whatever its speed."""
        linear = torch.nn.Linear(8, 8)
        data = batches_of(3)
        with torch.no_grad():
            references = [linear(*b.args) for b in data]
        seen: list[int] = []

        def check(output: torch.Tensor, reference: torch.Tensor) -> None:
            seen.append(1)
            close(output, reference)

        with pytest.raises(SpotCheckError):
            measure_speedup(
                linear,
                Memo(linear),
                data[0],
                4,
                ProfilingConfig(threads=1),
                spot_check=check,
                batches=data,
                references=references,
            )
        assert 0 < len(seen) <= len(spot_calls(10, DEFAULT_SPOT_RATE, 0, n_batches=3))

    def test_a_correct_candidate_passes_every_batch(self) -> None:
        """The model itself passes every spot check on every batch; the verdict stands."""
        clock, linear = FakeClock(), torch.nn.Linear(8, 8)
        data = batches_of(3)
        with torch.no_grad():
            references = [linear(*b.args) for b in data]
        checked: list[int] = []

        def check(output: torch.Tensor, reference: torch.Tensor) -> None:
            checked.append(next(i for i, r in enumerate(references) if r is reference))
            close(output, reference)

        m = measure_speedup(
            clock.arm(0.002, fn=linear),
            clock.arm(0.001, fn=linear),
            data[0],
            4,
            config(),
            timer=clock,
            spot_check=check,
            batches=data,
            references=references,
        )
        assert m.result.verdict == "faster"
        assert set(checked) == {0, 1, 2}  # every batch of the look was checked


class CallCounter:
    """A candidate whose output is the number of times it was called (0, 1, 2, ...)."""

    def __init__(self, clock: FakeClock | None = None, seconds: float = 0.001) -> None:
        self.calls = 0
        self.clock, self.seconds = clock, seconds

    def __call__(self, *args: Any) -> int:
        if self.clock is not None:
            self.clock.advance(self.seconds)
        self.calls += 1
        return self.calls - 1


class TestSpotSchedule:
    def test_each_look_checks_spot_positions_seeded_by_look(self) -> None:
        """Look k checks spot_positions(n_k, rate, spot_seed + k) of its own timed calls."""
        seen: list[int] = []
        cand = CallCounter()
        with InterleavedRun(
            lambda: None, cand, Sample(), timer=FakeClock(), spot_check=seen.append, spot_seed=7
        ) as run:
            for k, n in enumerate((10, 10, 20)):
                first_timed = cand.calls + 1  # one untimed call per arm comes first
                seen.clear()
                run.extend(n)
                checked = tuple(c - first_timed for c in seen)
                assert checked == spot_positions(n, DEFAULT_SPOT_RATE, 7 + k)

    def test_measure_speedup_seeds_look_k_with_spot_seed_plus_k(self) -> None:
        """Through measure_speedup: the calls checked in look k are spot_positions(.., 5 + k)."""
        clock = FakeClock()
        base_s, cand_s = noisy(0.00202, 3, 0.2), noisy(0.002, 4, 0.2)
        cand = CallCounter()
        seen: list[int] = []

        def candidate(*args: Any) -> int:
            clock.advance(cand_s(cand.calls))
            return cand()

        m = measure_speedup(
            lambda: clock.advance(base_s(0)),
            candidate,
            Sample(),
            1,
            config(looks=(10, 20, 40), quantity="typical"),  # single calls: one a pair
            timer=clock,
            spot_check=seen.append,
            spot_seed=5,
        )
        assert m.result.n_baseline == 40  # a close call: every look was taken
        at = 0
        for k, n in enumerate((10, 10, 20)):  # pairs added by each look
            chunk = seen[at : at + len(spot_positions(n, DEFAULT_SPOT_RATE, 0))]
            at += len(spot_positions(n, DEFAULT_SPOT_RATE, 0))
            # a look's timed candidate calls are consecutive: offsets from its first call
            assert tuple(c - chunk[0] for c in chunk) == spot_positions(n, DEFAULT_SPOT_RATE, 5 + k)
        assert at == len(seen)

    def test_spot_rate_is_a_keyword(self) -> None:
        """A higher rate checks more calls: len(spot_positions(n, rate, 0)) per look."""
        clock = FakeClock()
        seen: list[int] = []
        measure_speedup(
            clock.arm(0.002, fn=lambda: None),
            CallCounter(clock),
            Sample(),
            1,
            config(quantity="typical"),  # single calls: blocks show a picked block's every call
            timer=clock,
            spot_check=seen.append,
            spot_rate=0.5,
        )
        assert len(seen) == len(spot_positions(10, 0.5, 0)) == 6

    def test_single_batch_is_exactly_spot_positions(self) -> None:
        """With one batch the schedule is spot_positions; with several, every batch is covered."""
        for seed in range(20):
            assert spot_calls(40, 0.1, seed) == frozenset(spot_positions(40, 0.1, seed))
            picked = spot_calls(40, 0.1, seed, first_pair=7, n_batches=4)
            assert picked >= set(spot_positions(40, 0.1, seed))
            assert {(7 + j) % 4 for j in picked} == {0, 1, 2, 3}
            assert len(picked) <= len(spot_positions(40, 0.1, 0)) + 3

    def test_periodic_fault_is_caught_as_often_as_predicted(self) -> None:
        """A candidate wrong on every 5th timed call is caught in the share of seeds the draw
        predicts (phases cycled, seeds 0..S-1)."""
        n, period, runs = 40, 5, 600
        caught_calls: list[tuple[int, int]] = []
        for seed in range(runs):
            phase = seed % period
            cand = CallCounter()

            def check(output: int, phase: int = phase) -> None:
                if (output - 1) % period == phase:  # output 0 is the untimed call
                    raise AssertionError("wrong")

            with InterleavedRun(
                lambda: None, cand, Sample(), timer=FakeClock(), spot_check=check, spot_seed=seed
            ) as run:
                try:
                    run.extend(n)
                except SpotCheckError as exc:
                    caught_calls.append((exc.call, phase))
        # the ends catch phases 0 and 4; another is missed when the 4 inner draws of 38 miss its 8
        expected = (2 + 3 * (1 - math.comb(30, 4) / math.comb(38, 4))) / period
        assert 0.7 < expected < 0.85  # the ends catch 2 phases of 5, the inner draw some more
        assert all((call - 1) % period == phase for call, phase in caught_calls)
        assert len(caught_calls) / runs == pytest.approx(expected, abs=0.06)


class TestDefaultsUnchanged:
    def test_one_batch_calls_the_check_with_the_output_only(self) -> None:
        """Without batches/references: spot_check(output) and the message of before."""
        clock = FakeClock()

        def check(output: Any) -> None:
            raise AssertionError("values differ")

        with pytest.raises(SpotCheckError) as info:
            measure_speedup(
                clock.arm(0.002, fn=lambda: None),
                clock.arm(0.001, fn=lambda: None),
                Sample(),
                1,
                config(),
                timer=clock,
                spot_check=check,
            )
        assert str(info.value) == "timed call 1: values differ"
        assert info.value.batch is None


class TestBudgetAndCollector:
    """Issue 20: a slow gc.collect before the deadline check overran max_seconds 1.26-2.4x."""

    @staticmethod
    def leaky(clock: FakeClock | None, seconds: Callable[[int], float]) -> Callable[..., None]:
        """A model that keeps 250 new containers per call, so the young generation outgrows
        the collector's threshold: a collection is due before every look."""
        keep: list[list[int]] = []
        calls = [0]

        def model(*args: Any) -> None:
            keep.extend([i] for i in range(250))
            step = seconds(calls[0])
            calls[0] += 1
            if clock is None:
                time.sleep(step)
            else:
                clock.advance(step)

        return model

    @staticmethod
    def cold(i: int) -> float:
        """10 ms calls that slow by 1 ms per call for 12 calls (a warm-up that never settles)."""
        return 0.010 + 0.001 * i if i < 12 else 0.002

    def test_a_collection_never_pushes_calls_past_the_budget(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Each collection takes 0.3 s; warm-up takes most of the 0.5 s budget: the collection
        due before the first look is skipped, so the run ends within one pair of the budget."""
        clock = FakeClock()
        collects: list[int] = []

        def slow_collect(generation: int = 2) -> int:
            collects.append(clock.ns)
            clock.advance(0.3)
            return 0

        monkeypatch.setattr(gc, "collect", slow_collect)
        cfg = ProfilingConfig(
            max_seconds=0.5, warmup_window=3, warmup_max_calls=12, warmup_tolerance=0.01
        )
        m = measure_speedup(
            self.leaky(clock, self.cold),
            self.leaky(clock, self.cold),
            Sample(),
            1,
            cfg,
            timer=clock,
        )
        one_pair = 2 * self.cold(11)
        assert m.wall_s <= cfg.max_seconds + one_pair
        assert collects == [0]  # once, on enter, to learn its cost; never near the deadline
        assert m.result.verdict == "inconclusive"
        assert "budget_spent" in m.result.flags

    def test_a_mispredicted_collection_is_followed_by_no_call(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A collection that takes far longer than ever before ends past the deadline: the
        deadline check after it stops the look, no call starts (the check follows the collect)."""
        clock = FakeClock()
        calls_after: list[str] = []
        collected: list[bool] = []

        def surprise_collect(generation: int = 2) -> int:
            if collected:  # the first (on enter) was free; the next takes 10 s
                clock.advance(10.0)
            collected.append(True)
            return 0

        def base(*args: Any) -> None:
            clock.advance(0.001)
            if len(collected) > 1:
                calls_after.append("baseline")

        monkeypatch.setattr(gc, "collect", surprise_collect)
        with InterleavedRun(base, self.leaky(clock, lambda i: 0.001), Sample(), timer=clock) as run:
            run.warm_up(window=3, tolerance=0.1, max_calls=10, deadline_ns=5 * 10**9)
            assert run.extend(10, deadline_ns=5 * 10**9) == 0
        assert len(collected) == 2
        assert calls_after == []

    def test_collections_happen_between_looks_when_the_budget_allows(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """With room in the budget the due young-generation collection runs before each look."""
        clock = FakeClock()
        generations: list[int] = []

        def collect(generation: int = 2) -> int:
            generations.append(generation)
            clock.advance(0.0001)
            return 0

        monkeypatch.setattr(gc, "collect", collect)
        m = measure_speedup(
            self.leaky(clock, noisy(0.00202, 3, 0.2)),
            self.leaky(clock, noisy(0.002, 4, 0.2)),
            Sample(),
            1,
            config(looks=(10, 20, 40)),
            timer=clock,
        )
        assert m.result.n_baseline == 40
        assert generations == [0] * 4  # on enter, then before each of the 3 looks: never full

    def test_real_sleeping_collector_stays_within_the_budget(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Real clock, gc.collect sleeping 0.4 s, a 0.5 s budget and a slow warm-up: elapsed
        stays within the budget plus one pair plus scheduling grace (HEAD overran to ~0.8 s)."""
        real_collect = gc.collect

        def sleepy_collect(generation: int = 2) -> int:
            time.sleep(0.4)
            return 0

        monkeypatch.setattr(gc, "collect", sleepy_collect)
        cfg = ProfilingConfig(
            max_seconds=0.5, warmup_window=3, warmup_max_calls=12, warmup_tolerance=0.01
        )
        start = time.perf_counter()
        try:
            measure_speedup(
                self.leaky(None, self.cold), self.leaky(None, self.cold), Sample(), 1, cfg
            )
        finally:
            elapsed = time.perf_counter() - start
            monkeypatch.setattr(gc, "collect", real_collect)
        assert elapsed <= cfg.max_seconds + 2 * self.cold(11) + 0.1
