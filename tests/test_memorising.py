"""Candidates that remember what they have seen are not accepted, under either rule.

Every timed call runs on inputs drawn afresh for it (held-out values, seeded per tune and
call: per pair in the statistical rule, per call of each arm in the point rule), and a checked
call compares the candidate's output with eager's own output on the same values. A candidate that answers from a cache keyed by the input's identity, data pointer, first
row, value range or layout, or by a reference it kept to an earlier input, computes on every
call (so it is not faster) or answers wrongly (and is rejected at correctness). Computing is
slow here (eager and an honest computation sleep 3 ms a call), so a cache that hit would show
as a large speedup.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Hashable
from pathlib import Path
from typing import Any

import attrs
import pytest
import torch

from aitune_fp.backends.base import BackendBase
from aitune_fp.core.config import ProfilingConfig
from aitune_fp.inputs import GraphSpec, Sample
from aitune_fp.profiling.layout import LEAD_FROM
from aitune_fp.testing import FakeClock
from tests.factories import tune_one
from tests.validation_helpers import TinyNet, _ModuleBackend

SPEC = GraphSpec(max_batch_size=8)
CONFIG = ProfilingConfig(looks=(10, 20, 40), max_seconds=10.0, warmup_max_calls=8)
#: Both rules: the statistical one's pairs, and the point rule's (eager once, then the candidate).
DECISIONS = ("statistical", "point")
#: The gate per rule. The point rule has no interval: one noisy up-front figure of eager can put
#: a candidate that computes (at parity) over 1.01x on a shared machine, which is that rule's
#: own weakness, not a cache's; a cache that hit shows as 40x, far over 1.5x.
THRESHOLDS = {"statistical": 1.0, "point": 50.0}


def _config(decision: str) -> ProfilingConfig:
    """The rule's config, at the default spot rate (~10 % of the timed calls checked)."""
    return attrs.evolve(CONFIG, decision=decision)


KEYS: dict[str, Callable[[torch.Tensor], Hashable]] = {
    "identity": id,
    "data_pointer": lambda x: x.data_ptr(),
    "first_row": lambda x: tuple(x[0].tolist()),
    "shape_and_first_row": lambda x: (tuple(x.shape), tuple(x[0].tolist())),
    "value_range": lambda x: (round(float(x.min()), 4), round(float(x.max()), 4)),
    "layout": lambda x: (x.is_contiguous(), tuple(x.shape), x.dtype),
}


class Memorising(_ModuleBackend):
    """Computes through the model (slow) on a miss; answers from its cache on a hit."""

    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.keyed_by = key
        self.cache: dict[Hashable, torch.Tensor] = {}

    def _infer(self, *args: Any, **kwargs: Any) -> Any:
        (x,) = args
        found = KEYS[self.keyed_by](x)
        if found not in self.cache:
            with torch.no_grad():
                self.cache[found] = self.module(x)
        return self.cache[found].clone()


class KeepsReference(Memorising):
    """Keeps references to the inputs it saw and answers again when the values are the same."""

    def __init__(self) -> None:
        super().__init__("kept_reference")
        self.seen: list[tuple[torch.Tensor, torch.Tensor]] = []

    def _infer(self, *args: Any, **kwargs: Any) -> Any:
        (x,) = args
        for kept, out in self.seen:
            if kept.shape == x.shape and torch.equal(kept, x):
                return out.clone()
        with torch.no_grad():
            out = self.module(x)
        self.seen.append((x.clone(), out))
        return out.clone()


class WatchesTheStack(Memorising):
    """Answers right only when a spot check is on the caller's stack, from a cache otherwise."""

    def __init__(self) -> None:
        super().__init__("layout")

    def _infer(self, *args: Any, **kwargs: Any) -> Any:
        frame = sys._getframe(1)
        while frame is not None:
            if frame.f_locals.get("inspect") is not None:  # a checked call
                with torch.no_grad():
                    return self.module(*args)
            frame = frame.f_back  # type: ignore[assignment]
        return super()._infer(*args, **kwargs)


CANDIDATES: dict[str, Callable[[], BackendBase]] = {
    **{f"cache_by_{key}": (lambda key=key: Memorising(key)) for key in KEYS},
    "kept_reference": KeepsReference,
    "stack_inspection": WatchesTheStack,
}


def _data() -> list[Sample]:
    torch.manual_seed(1)
    return [Sample((torch.randn(2, 16),))]


def _tune(candidate: Any, decision: str, cache: Path, **options: Any) -> Any:
    """The report of ``candidate`` alone on the sleeping TinyNet, at ``decision``'s gate."""
    model = TinyNet(16, sleep_s=0.003).eval()
    threshold = THRESHOLDS[decision]
    return tune_one(
        candidate,
        model,
        _data(),
        cache,
        spec=SPEC,
        profiling_config=_config(decision),
        min_speedup_threshold_percent=threshold,
        **options,
    )


@pytest.mark.slow
@pytest.mark.parametrize("decision", DECISIONS)
@pytest.mark.parametrize("name", sorted(CANDIDATES))
def test_a_memorising_candidate_is_not_accepted(name: str, decision: str, tmp_path: Path) -> None:
    report = _tune(CANDIDATES[name](), decision, tmp_path)
    assert report.isolation == "process"
    assert not any(r.passed for r in report.results), report.results
    for failure in report.failures:
        assert failure.stage == "correctness", failure


class ClockedNet(torch.nn.Module):
    """TinyNet's computation, each call spending ``seconds`` on a FakeClock instead of sleeping
    (in a worker, on the worker's copy, which reports it)."""

    def __init__(self, clock: FakeClock, seconds: float) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.fc = torch.nn.Linear(16, 16)
        self.clock = clock
        self.seconds = seconds

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.clock.advance(self.seconds)
        return torch.tanh(self.fc(x))


class Halved(_ModuleBackend):
    """Honest and twice as fast on the fake clock: computes every call."""

    def _infer(self, *args: Any, **kwargs: Any) -> Any:
        self.module.clock.advance(self.module.seconds / 2)
        with torch.no_grad():
            return torch.tanh(self.module.fc(*args))


def _tune_in_blocks(candidate: Any, cache: Path, eager_s: float) -> Any:
    """The report of ``candidate`` alone in workers, timed in blocks on a fake clock."""
    clock = FakeClock()
    return tune_one(
        candidate,
        ClockedNet(clock, eager_s).eval(),
        _data(),
        cache,
        spec=SPEC,
        profiling_config=attrs.evolve(CONFIG, quantity="throughput"),
        min_speedup_threshold_percent=THRESHOLDS["statistical"],
        timer=clock,
    )


#: Eager's call: blocks with a lead call (3 ms: 4 calls), and without (4 ms: 3 calls).
BLOCK_PACES = pytest.mark.parametrize("eager_s", [0.003, 0.004])


@BLOCK_PACES
@pytest.mark.parametrize("name", sorted(CANDIDATES))
def test_in_blocks_a_memorising_candidate_is_not_accepted(
    name: str, eager_s: float, tmp_path: Path
) -> None:
    """Blocks (``quantity="throughput"``): no call of a block, its lead or the warm-up's blocks
    meets values the candidate met before, so no memory answers a timed call rightly."""
    report = _tune_in_blocks(CANDIDATES[name](), tmp_path, eager_s)
    assert report.isolation == "process"
    assert not any(r.passed for r in report.results), report.results
    for failure in report.failures:
        assert failure.stage == "correctness", failure


@BLOCK_PACES
def test_in_blocks_an_honest_candidate_is_accepted(eager_s: float, tmp_path: Path) -> None:
    report = _tune_in_blocks(Halved("halved"), tmp_path, eager_s)
    assert not report.failures, report.failures
    (result,) = report.results
    assert result.passed and result.latencies_block > 1


@pytest.mark.slow
@pytest.mark.parametrize("isolation", ["process", "in_process"])
@pytest.mark.parametrize("decision", DECISIONS)
@pytest.mark.parametrize("key", ["identity", "data_pointer"])
def test_an_address_keyed_cache_is_caught_answering_stale_values(
    key: str, decision: str, isolation: str, tmp_path: Path
) -> None:
    """Each arm's timed calls take their inputs from a ring of K storages in turn, so a cache
    keyed by a tensor's identity or address hits on every call past the K-th, with values
    drawn for another call: the always-checked last call of a look sees it. Rejected, named,
    in either isolation, not merely "not faster" (a fresh allocation per call repeated an
    address only where the allocator happened to, stale hits a 10 % spot check could miss)."""
    report = _tune(Memorising(key), decision, tmp_path, isolation=isolation)
    assert report.isolation == isolation
    assert not report.results, report.results
    (failure,) = report.failures
    assert failure.stage == "correctness", failure


@pytest.mark.parametrize("in_worker", [False, True], ids=["in_process", "in_a_worker"])
@pytest.mark.parametrize("key", ["identity", "data_pointer"])
def test_timed_calls_meet_each_address_again_exactly_k_calls_later(
    key: str, in_worker: bool
) -> None:
    """On the timing path itself: every call on new values, and an address-keyed cache is
    caught answering call K+1 with call 1's values, at the default spot rate (in a worker,
    the worker's own ring gives the call its copy)."""
    from aitune_fp.inputs import RING_SLOTS
    from aitune_fp.profiling.calls import SpotCheckError, time_calls
    from aitune_fp.profiling.workers import Worker

    cache: dict[Hashable, torch.Tensor] = {}
    computed: list[int] = []

    def memorising(x: torch.Tensor) -> torch.Tensor:
        found = KEYS[key](x)
        if found not in cache:
            computed.append(len(computed))
            cache[found] = x * 2
        return cache[found]

    def check(output: torch.Tensor, expected: torch.Tensor) -> None:
        assert torch.equal(output, expected), "stale output"

    timed: Any = memorising
    if in_worker:
        timed = Worker(lambda say: (memorising, {}), name="memorising", timeout_s=20)
        timed.ready()
    try:
        with pytest.raises(SpotCheckError, match="stale output") as caught:
            time_calls(
                timed,
                Sample((torch.zeros(4),)),
                3 * RING_SLOTS,
                fresh=lambda i: Sample((torch.full((4,), float(i)),)),
                spot_check=check,
                reference=lambda x: x * 2,
            )
    finally:
        if in_worker:
            timed.close()
    assert RING_SLOTS < caught.value.call <= 3 * RING_SLOTS
    if not in_worker:
        assert len(computed) == RING_SLOTS  # it computed only until the ring came round


class Quick(Memorising):
    """No cache, and none of eager's sleep: really faster (at module level: a worker the fork
    server starts is sent it)."""

    def _infer(self, *args: Any, **kwargs: Any) -> Any:
        with torch.no_grad():
            return torch.tanh(self.module.fc(*args))


@pytest.mark.slow
@pytest.mark.parametrize("decision", DECISIONS)
def test_an_honest_candidate_is_still_accepted_on_fresh_inputs(
    decision: str, tmp_path: Path
) -> None:
    report = _tune(Quick("none"), decision, tmp_path)
    assert not report.failures
    (result,) = report.results
    assert result.passed


class TestHeadToHeadOnFreshInputs:
    """Among passing candidates, the head-to-head meets inputs it never saw too: a contender
    that answers from a cache of what it saw (keyed here by the input's values) does not
    win on the rounds' repeated batches."""

    @staticmethod
    def _contenders(work: Callable[[], None]) -> list[Any]:
        from aitune_fp.core.selection import Contender

        def honest(x: torch.Tensor) -> torch.Tensor:
            work()
            return x * 2

        seen: dict[bytes, torch.Tensor] = {}

        def memorising(x: torch.Tensor) -> torch.Tensor:
            key = x.numpy().tobytes()
            if key not in seen:
                work()
                seen[key] = x * 2
            return seen[key].clone()

        return [(Contender("honest", 0), honest), (Contender("memorising", 1), memorising)]

    @staticmethod
    def _run(fresh: Any, block: int = 1, clock: FakeClock | None = None) -> Any:
        import time

        from aitune_fp.core.selection import SelectionRule
        from aitune_fp.measure.headtohead import head_to_head

        torch.manual_seed(0)
        batches = [Sample((torch.randn(4, 8),)) for _ in range(3)]
        return head_to_head(
            TestHeadToHeadOnFreshInputs._contenders(
                (lambda: time.sleep(0.003)) if clock is None else (lambda: clock.advance(0.003))
            ),
            batches[0],
            SelectionRule(looks=(10, 20)),
            batches=batches,
            timer=clock,
            max_seconds=10.0,
            seed=1,
            fresh=fresh,
            block=block,
        )

    @staticmethod
    def _fresh(r: int) -> Sample:
        return Sample((torch.randn(4, 8, generator=torch.Generator().manual_seed(r)),))

    def test_on_repeated_batches_the_cache_wins(self) -> None:
        """What the fresh inputs are for: without them the memorising one is shown faster."""
        state = self._run(None)
        assert state.chosen == "memorising"
        assert [e.name for e in state.eliminated] == ["honest"]

    def test_on_fresh_inputs_it_is_never_shown_faster(self) -> None:
        state = self._run(self._fresh)
        assert "honest" not in [e.name for e in state.eliminated]

    @pytest.mark.parametrize("block", [LEAD_FROM - 1, LEAD_FROM + 2])
    def test_in_blocks_on_fresh_inputs_it_is_never_shown_faster(self, block: int) -> None:
        """Each call of a round's block (and its lead) on values of its own: the memorising
        one computes every call as the honest one does (on a fake clock)."""
        state = self._run(self._fresh, block, FakeClock())
        assert "honest" not in [e.name for e in state.eliminated]


def test_the_point_rule_times_every_call_on_a_draw_of_its_own() -> None:
    """Point rule: each of eager's timed calls and of the candidate's runs on its own draw,
    no value shared; a checked call compares with eager's output on the same draw (untimed)."""
    from aitune_fp.core.speedup import Gate
    from aitune_fp.measure.measurement import Comparison
    from aitune_fp.measure.rules import rule_for
    from aitune_fp.testing import FakeClock

    clock = FakeClock()
    draws: list[int] = []
    timed_on: list[float] = []

    def fresh(index: int) -> Sample:
        draws.append(index)
        return Sample((torch.full((2,), float(index + 1)),))

    def eager(x: torch.Tensor) -> torch.Tensor:
        clock.advance(0.002)
        return x * 2

    def candidate(x: torch.Tensor) -> torch.Tensor:
        clock.advance(0.001)
        timed_on.append(float(x[0]))
        return x * 2

    checked: list[tuple[float, float]] = []
    config = ProfilingConfig(decision="point")
    m = rule_for(config).compare(
        Comparison(
            eager=eager,
            candidate=candidate,
            batch=Sample((torch.zeros(2),)),
            size=2,
            config=config,
            gate=Gate(1.0),
            timer=clock,
            spot_check=lambda out, ref: checked.append((float(out[0]), float(ref[0]))),
            fresh=fresh,
        ),
        None,
    )
    assert m.result.passed and m.result.speedup == pytest.approx(2.0)
    assert len(draws) == len(set(draws)) == 2 * config.point_steps  # eager's, then the candidate's
    drawn_values = {float(2 * (i + 1)) for i in draws}
    assert timed_on[-config.point_steps :] == [i + 1.0 for i in draws[config.point_steps :]]
    assert 0.0 not in timed_on[-config.point_steps :]  # no timed call on the batch itself
    assert len(checked) >= 2 and all(out == ref and out in drawn_values for out, ref in checked)
