"""Timing k callables in rounds and choosing among them (aitune_fp.measure.headtohead), on a fake clock."""

from __future__ import annotations

import collections
import gc
import random
from collections.abc import Callable
from typing import Any, cast

import pytest
import torch

from aitune_fp.core.selection import Contender, SelectionRule, SelectionState
from aitune_fp.errors import InvalidTypeError, InvalidValueError
from aitune_fp.inputs import RING_SLOTS, Sample
from aitune_fp.measure.headtohead import head_to_head
from aitune_fp.profiling.layout import RETIME_FLOOR


class FakeClock:
    """A Timer whose time moves only when a fake model spends it (deterministic)."""

    def __init__(self) -> None:
        self.ns = 0

    def now_ns(self) -> int:
        return self.ns

    def sync(self) -> None:
        return None

    def device_span(self) -> None:
        return None


class Model:
    """A fake model: each call spends ``ms`` (± seeded jitter) on the clock and logs itself."""

    def __init__(
        self,
        clock: FakeClock,
        name: str,
        ms: float,
        log: list[tuple[str, int, Any]],
        *,
        jitter: float = 0.01,
        fail_at: int | None = None,
    ) -> None:
        self.clock, self.name, self.ms, self.log = clock, name, ms, log
        self.rng = random.Random(name)
        self.jitter, self.fail_at, self.calls = jitter, fail_at, 0
        self.addresses: list[int] = []

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        self.log.append((self.name, self.clock.ns, x.clone()))  # the values it was called on
        self.addresses.append(x.data_ptr())
        self.calls += 1
        if self.fail_at is not None and self.calls >= self.fail_at:
            raise RuntimeError(f"{self.name} broke")
        assert not torch.is_grad_enabled() and not gc.isenabled()
        self.clock.ns += round(self.ms * 1e6 * self.rng.lognormvariate(0.0, self.jitter))
        return x


def setup(
    specs: dict[str, tuple[float, float | None]], **model_kw: Any
) -> tuple[FakeClock, list[tuple[str, int, Any]], list[tuple[Contender, Callable[..., Any]]]]:
    clock = FakeClock()
    log: list[tuple[str, int, Any]] = []
    pairs: list[tuple[Contender, Callable[..., Any]]] = []
    for order, (name, (ms, build)) in enumerate(specs.items()):
        kw = model_kw.get(name, {})
        pairs.append((Contender(name, order, build), Model(clock, name, ms, log, **kw)))
    return clock, log, pairs


BATCH = Sample((torch.ones(2, 3),))


def test_the_fastest_wins_and_every_look_is_reported() -> None:
    clock, log, pairs = setup({"eager": (1.3, None), "compile": (1.0, 12.0), "trt": (1.5, 40.0)})
    looks: list[SelectionState] = []
    state = head_to_head(pairs, BATCH, timer=clock, on_look=looks.append)
    assert (state.outcome, state.chosen, state.gap_bound) == ("one_left", "compile", 1.0)
    assert {e.name: e.lost_to for e in state.eliminated} == {"eager": "compile", "trt": "compile"}
    # 10 rounds cannot decide among 3 (the first look spends 0.07 %: 2**-10 is more)
    assert [s.rounds for s in looks] == [10, 20] and looks[-1] == state
    timed = [entry for entry in log if entry[1] > 0]
    assert len(timed) >= 30


def test_a_tie_goes_to_the_lower_build_time() -> None:
    clock, _, pairs = setup({"aot": (1.0, 40.1), "compile": (1.0, 12.0)}, aot={"jitter": 0.002})
    state = head_to_head(pairs, BATCH, timer=clock)
    assert (state.outcome, state.chosen) == ("settled", "compile")
    assert "lower build time (12.0 s vs 40.1 s)" in state.reason


def test_round_order_is_drawn_per_round_and_reproducible() -> None:
    def orders(seed: int) -> list[tuple[str, ...]]:
        clock, log, pairs = setup(
            dict.fromkeys("abc", (1.0, None)), **{n: {"jitter": 0.2} for n in "abc"}
        )
        head_to_head(
            pairs, BATCH, SelectionRule(looks=(20,)), timer=clock, warmup_calls=0, seed=seed
        )
        names = [entry[0] for entry in log]
        return [tuple(names[i : i + 3]) for i in range(0, len(names), 3)]

    first = orders(0)
    assert len(first) == 20 and all(sorted(r) == ["a", "b", "c"] for r in first)
    assert len(set(first)) >= 4  # not one fixed order
    assert {r[0] for r in first} == {"a", "b", "c"}  # each contender goes first sometimes
    assert orders(0) == first and orders(1) != first


def test_every_call_gets_its_own_copy_made_before_the_clock() -> None:
    """Each contender's timed calls take the next of its ring's K storages: never the
    caller's tensor, and an address again exactly K calls later (never by chance)."""
    clock, log, pairs = setup({"a": (1.0, None), "b": (2.0, None)})
    head_to_head(pairs, BATCH, timer=clock, warmup_calls=0)
    assert all(torch.equal(x, BATCH.args[0]) for _, _, x in log)  # of the batch's values
    for _, model in pairs:
        seen = cast(Model, model).addresses
        assert len(seen) > RING_SLOTS and BATCH.args[0].data_ptr() not in seen
        for i in range(len(seen) - RING_SLOTS):
            assert len(set(seen[i : i + RING_SLOTS])) == RING_SLOTS
            assert seen[i] == seen[i + RING_SLOTS]
    assert log[0][1] == 0  # the first call starts at the clock's start: copies came before


def test_batches_rotate_by_round() -> None:
    clock, log, pairs = setup({"a": (1.0, None), "b": (2.0, None)})
    batches = [Sample((torch.full((2, 3), float(i)),)) for i in range(3)]
    head_to_head(pairs, BATCH, batches=batches, timer=clock, warmup_calls=0)
    values = [float(x[0, 0]) for name, _, x in log if name == "a"]
    assert values[:6] == [0.0, 1.0, 2.0, 0.0, 1.0, 2.0]


def test_a_contender_that_raises_is_recorded_and_the_rest_go_on() -> None:
    clock, _, pairs = setup(
        {"a": (1.0, None), "b": (1.0, None), "c": (2.0, None)}, b={"fail_at": 8}
    )
    state = head_to_head(pairs, BATCH, timer=clock, warmup_calls=3)
    (failure,) = state.failed
    assert (failure.name, failure.error, failure.at_rounds) == ("b", "RuntimeError: b broke", 4)
    assert state.chosen == "a" and "b" not in state.remaining


def test_warm_up_failures_and_every_contender_failing() -> None:
    clock, _, pairs = setup(
        {"a": (1.0, None), "b": (1.0, None)}, a={"fail_at": 1}, b={"fail_at": 2}
    )
    state = head_to_head(pairs, BATCH, timer=clock)
    assert (state.outcome, state.chosen) == ("none_ran", None)
    assert [(f.name, f.at_rounds) for f in state.failed] == [("a", 0), ("b", 0)]
    clock, _, pairs = setup({"a": (1.0, None), "b": (1.0, None)}, a={"fail_at": 1})
    alone = head_to_head(pairs, BATCH, timer=clock)
    assert (alone.outcome, alone.chosen) == ("unopposed", "b")


def test_the_budget_is_hard_and_the_choice_honest() -> None:
    clock, log, pairs = setup(
        {n: (1.0, b) for n, b in (("a", 9.0), ("b", 3.0), ("c", 5.0))},
        **{n: {"jitter": 0.1} for n in "abc"},
    )
    state = head_to_head(pairs, BATCH, timer=clock, max_seconds=0.1, warmup_calls=2)
    assert state.outcome == "budget" and state.chosen in ("a", "b", "c")
    assert state.reason.startswith("the time budget ran out after")
    assert all(start < 0.1e9 + 3 * 1.5e6 for _, start, _ in log)  # at most one round overran
    assert max(start for _, start, _ in log) >= 0.09e9
    clock, log, pairs = setup({"a": (1.0, 1.0), "b": (1.0, 2.0)})
    tiny = head_to_head(pairs, BATCH, timer=clock, max_seconds=1e-9)
    assert len(log) == 1  # the first warm-up call started at 0 ns; nothing after the deadline
    assert (tiny.outcome, tiny.chosen, tiny.rounds) == ("budget", "a", 0)


def test_threads_and_gc_are_restored() -> None:
    seen: list[int] = []
    clock, _, pairs = setup({"a": (1.0, None), "b": (1.3, None)})

    def counting(fn: Callable[..., Any]) -> Callable[..., Any]:
        def call(x: torch.Tensor) -> Any:
            seen.append(torch.get_num_threads())
            return fn(x)

        return call

    wrapped = [(c, counting(f)) for c, f in pairs]
    before = torch.get_num_threads()
    assert gc.isenabled()
    head_to_head(wrapped, BATCH, timer=clock, threads=1)
    assert set(seen) == {1} and torch.get_num_threads() == before and gc.isenabled()


def test_bad_arguments_are_refused() -> None:
    clock, _, pairs = setup({"a": (1.0, None), "b": (1.0, None)})
    with pytest.raises(InvalidTypeError, match=r"contenders\[1\]"):
        head_to_head([pairs[0], (pairs[1][0], 3)], BATCH, timer=clock)  # type: ignore[list-item]
    with pytest.raises(InvalidValueError, match="max_seconds"):
        head_to_head(pairs, BATCH, timer=clock, max_seconds=0.0)
    with pytest.raises(InvalidValueError, match="at least 2"):
        head_to_head(pairs[:1], BATCH, timer=clock)
    with pytest.raises(InvalidTypeError, match="rule"):
        head_to_head(pairs, BATCH, "fast", timer=clock)  # type: ignore[arg-type]


class WrongEvery(Model):
    """A contender whose every ``k``-th call returns a wrong output (the others are right)."""

    def __init__(self, *args: Any, k: int, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.k = k

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        out = super().__call__(x)
        return out + 1.0 if self.calls % self.k == 0 else out


def _equal(output: Any, reference: Any) -> None:
    if not torch.equal(output, reference):
        raise AssertionError("differs from eager")


@pytest.mark.parametrize("k", [2, 5])
def test_a_contender_wrong_every_kth_call_is_caught_while_timed(k: int) -> None:
    """Spot checks in the rounds: the faster contender, wrong every k-th call, leaves the running.

    Without spot checks the same run keeps it (it is the faster one). It is decided after the
    first look's 10 rounds, whose last call (a multiple of k) is always checked.
    """
    runs = {}
    for checked in (True, False):
        clock, log = FakeClock(), []
        pairs = [
            (Contender("wrong", 0, None), WrongEvery(clock, "wrong", 1.0, log, k=k)),
            (Contender("right", 1, None), Model(clock, "right", 1.3, log)),
        ]
        spot = {"wrong": _equal, "right": _equal} if checked else None
        runs[checked] = head_to_head(
            pairs, BATCH, timer=clock, warmup_calls=0, spot_checks=spot, references=[BATCH.args[0]]
        )
    assert runs[False].chosen == "wrong"
    caught = runs[True]
    assert caught.chosen == "right"
    (failure,) = caught.failed
    assert failure.name == "wrong" and failure.error.startswith("SpotCheckError: timed call ")
    assert "differs from eager" in failure.error
    call = int(failure.error.removeprefix("SpotCheckError: timed call ").split(":")[0])
    assert call % k == 0  # numbered from 1, as the gate numbers its calls: a wrong one


def test_spot_checks_are_seeded_and_cover_each_looks_ends() -> None:
    """The checked rounds repeat for a seed, include the look's first and last, and not all."""
    seen: list[list[int]] = []
    for seed in (1, 1, 2):
        clock, log = FakeClock(), []
        rounds: list[int] = []
        a = Model(clock, "a", 1.0, log)
        b = Model(clock, "b", 1.0, log)

        def check(output: Any, reference: Any, _a: Model = a, _r: list[int] = rounds) -> None:
            _r.append(_a.calls)

        head_to_head(
            [(Contender("a", 0, None), a), (Contender("b", 1, None), b)],
            BATCH,
            SelectionRule(looks=(40,)),
            timer=clock,
            warmup_calls=0,
            seed=seed,
            spot_checks={"a": check},
            references=[BATCH.args[0]],
        )
        seen.append(rounds)
    assert seen[0] == seen[1]  # the same seed, the same rounds
    assert seen[0] != seen[2]
    assert {1, 40} <= set(seen[0])  # the look's first and last call
    assert len(seen[0]) == 2 + 4  # and a tenth of the 38 between


def test_spot_checks_need_references_and_known_names() -> None:
    """Bad spot-check arguments are refused, naming what is wrong."""
    clock, _, pairs = setup({"a": (1.0, None), "b": (1.0, None)})
    with pytest.raises(InvalidValueError, match="references"):
        head_to_head(pairs, BATCH, timer=clock, spot_checks={"a": _equal})
    with pytest.raises(InvalidValueError, match="no contender"):
        head_to_head(pairs, BATCH, timer=clock, spot_checks={"z": _equal}, references=[1])


class CostlyBarrier(FakeClock):
    """A clock whose barrier costs 0.5 ms: a fixed cost in every timed block (a worker's
    hand-over, threads waking), which weighs more on a shorter block."""

    def sync(self) -> None:
        self.ns += 500_000


@pytest.mark.parametrize(("fast_ms", "slow_ms"), [(0.5, 1.0), (0.25, 1.0), (1.0, 1.5)])
def test_each_contenders_block_lasts_as_long_so_a_fixed_cost_keeps_the_gap(
    fast_ms: float, slow_ms: float
) -> None:
    """With one count for both, 20 calls of a 2x faster contender read 1.95x (0.5 ms a block);
    given each one's pace, its block is as long in time as the slowest's and reads it within 1 %."""
    clock = CostlyBarrier()
    log: list[tuple[str, int, Any]] = []
    pairs = [
        (Contender("slow", 0, 1.0), Model(clock, "slow", slow_ms, log, jitter=0.001)),
        (Contender("fast", 1, 2.0), Model(clock, "fast", fast_ms, log, jitter=0.001)),
    ]
    paces = {"slow": slow_ms / 1e3, "fast": fast_ms / 1e3}
    state = head_to_head(pairs, BATCH, timer=clock, block=20, paces=paces)
    (lost,) = state.eliminated
    assert (lost.name, lost.lost_to) == ("slow", "fast")
    assert lost.ratio == pytest.approx(slow_ms / fast_ms, rel=0.01)
    calls = collections.Counter(name for name, ns, _ in log if ns > 0)
    assert calls["fast"] / calls["slow"] == pytest.approx(slow_ms / fast_ms, rel=0.05)


def test_paces_name_the_contenders() -> None:
    clock, _, pairs = setup({"a": (1.0, None), "b": (1.0, None)})
    with pytest.raises(InvalidValueError, match="'c'"):
        head_to_head(pairs, BATCH, timer=clock, paces={"a": 1e-3, "c": 1e-3})


def _waits_read(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Blocks read their wait for a CPU from the returned counter (ns), as on the real clock."""
    import aitune_fp.profiling.calls as calls

    waited = [0]
    monkeypatch.setattr(calls, "run_clocks", lambda: (0, 0, waited[0]))
    monkeypatch.setattr(calls, "waited_on_others_s", lambda before: (waited[0] - before[2]) / 1e9)
    monkeypatch.setattr(calls, "on_real_clock", lambda timer: True)
    return waited


def test_a_round_in_which_a_contender_waited_for_a_cpu_is_timed_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """As the gate's pairs: no kept round carries a stall another process caused."""
    waited = _waits_read(monkeypatch)
    clock, log, pairs = setup({"a": (1.0, 1.0), "b": (0.5, 2.0)}, a={"jitter": 0.0})
    slow = pairs[0][1]
    plain = slow.__call__

    def stalled(x: torch.Tensor) -> torch.Tensor:  # calls 2-7 of "a" wait, and run 3x long
        if 2 <= slow.calls < 8:
            waited[0] += 1_000_000
            clock.ns += 2_000_000
        return plain(x)

    pairs[0] = (pairs[0][0], stalled)
    state = head_to_head(pairs, BATCH, timer=clock, warmup_calls=0)
    (lost,) = state.eliminated
    assert lost.ratio == pytest.approx(2.0, rel=0.02)  # 3x blocks of "a" would pull it up
    seen = [ns for name, ns, _ in log if name == "a"]
    assert len(seen) > state.rounds  # the stalled ones ran, and were timed again


def test_a_machine_too_busy_ends_the_look_and_not_the_budget(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every round stalled: the look gives up after RETIME_FLOOR rounds timed again, no verdict."""
    waited = _waits_read(monkeypatch)
    clock, log, pairs = setup({"a": (1.0, 1.0), "b": (0.5, 2.0)}, a={"jitter": 0.0})
    busy = pairs[0][1]

    def stalled(x: torch.Tensor) -> torch.Tensor:
        waited[0] += 1_000_000
        clock.ns += 2_000_000
        return busy(x)

    pairs[0] = (pairs[0][0], stalled)
    start = clock.ns
    state = head_to_head(pairs, BATCH, timer=clock, warmup_calls=0, max_seconds=600.0)
    assert state.rounds == 0 and not state.eliminated
    assert state.reason is not None and "too busy" in state.reason
    assert (clock.ns - start) / 1e9 < 5.0  # of a 600 s budget
    assert sum(1 for name, ns, _ in log if name == "a" and ns > 0) <= 2 * (RETIME_FLOOR + 2) * 20
