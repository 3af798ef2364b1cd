"""The head-to-head spot-checks its contenders' outputs as the gate's timing does (issue 49).

Spec: among candidates that passed the gate, each contender's outputs in the rounds are
compared with eager's on the round's own fresh inputs, at the gate's rate and by the gate's
schedule (``profiling.calls.spot_calls``: each look's first and last round, a seeded ~10 % of
the rounds between, the first round on each batch when batches rotate), and the last round
each contender ran before the head-to-head ended (a budget cut short, the others failed) is
checked too. A contender found wrong leaves the running, named, and is never chosen; honest
contenders end as they did without the checks. In process (a fake clock) and in workers.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from aitune_fp.adapters.validation import validation_of
from aitune_fp.core.config import ProfilingConfig
from aitune_fp.core.selection import Contender, SelectionRule, SelectionState
from aitune_fp.core.spot import DEFAULT_SPOT_RATE, spot_positions
from aitune_fp.inputs import GraphSpec, Sample
from aitune_fp.measure.headtohead import head_to_head
from aitune_fp.profiling.workers import Worker
from aitune_fp.testing import FakeClock
from tests.validation_helpers import TinyNet, _ModuleBackend

WARMUP = 3
BATCH = Sample((torch.zeros(2, 3),))


def eager(x: torch.Tensor) -> torch.Tensor:
    """The reference every contender must match."""
    return x * 2


def fresh(r: int) -> Sample:
    """Round ``r``'s own values."""
    return Sample((torch.randn(2, 3, generator=torch.Generator().manual_seed(r)),))


class Contestant:
    """A fake contender spending ``ms`` a call on ``clock``: eager's answer unless ``wrong``.

    ``wrong(i, x)`` decides call ``i`` (0-based, warm-up included); ``checked`` gathers the
    calls whose outputs were compared (the check runs right after the call it checks).
    """

    def __init__(
        self, clock: FakeClock, ms: float, wrong: Callable[[int, torch.Tensor], bool] | None = None
    ) -> None:
        self.clock, self.ms = clock, ms
        self.wrong = wrong or (lambda i, x: False)
        self.calls = 0
        self.wrong_calls: list[int] = []
        self.checked: list[int] = []

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        i, self.calls = self.calls, self.calls + 1
        self.clock.advance(self.ms / 1e3)
        if self.wrong(i, x):
            self.wrong_calls.append(i)
            return eager(x) + 1.0
        return eager(x)

    def check(self, output: Any, reference: Any) -> None:
        self.checked.append(self.calls - 1)
        if not torch.equal(output, reference):
            raise AssertionError("differs from eager")


def run(
    contestants: dict[str, Contestant],
    clock: Any,
    *,
    rule: SelectionRule | None = None,
    seed: int = 0,
    rotate: bool = False,
    on_look: Callable[[SelectionState], None] | None = None,
    **kwargs: Any,
) -> SelectionState:
    """A spot-checked head-to-head of ``contestants`` (fresh values, or 3 batches in turn)."""
    batches = [Sample((torch.full((2, 3), float(b)),)) for b in range(3)] if rotate else [BATCH]
    return head_to_head(
        [(Contender(n, i), c) for i, (n, c) in enumerate(contestants.items())],
        batches[0],
        rule,
        batches=batches,
        timer=clock,
        warmup_calls=WARMUP,
        seed=seed,
        on_look=on_look,
        spot_checks={n: c.check for n, c in contestants.items()},
        references=[eager(b.args[0]) for b in batches],
        fresh=None if rotate else fresh,
        reference=eager,
        **kwargs,
    )


def _equal(output: Any, reference: Any) -> None:
    if not torch.equal(output, reference):
        raise AssertionError("differs from eager")


def _failed_round(state: SelectionState, name: str) -> int:
    """The 1-based round of ``name``'s recorded spot-check failure."""
    (failure,) = [f for f in state.failed if f.name == name]
    assert failure.error.startswith("SpotCheckError: timed call "), failure.error
    assert "differs from eager" in failure.error
    return int(failure.error.removeprefix("SpotCheckError: timed call ").split(":")[0].split()[0])


def test_wrong_on_every_round_loses_to_an_honest_slightly_slower_one() -> None:
    clock = FakeClock(jitter=0.01)
    cheat = Contestant(clock, 1.0, wrong=lambda i, x: i >= WARMUP)  # right until the rounds
    honest = Contestant(clock, 1.03)
    state = run({"cheat": cheat, "honest": honest}, clock)
    assert (state.chosen, state.remaining) == ("honest", ("honest",))
    assert _failed_round(state, "cheat") == 1  # the first round is always checked


def test_the_honest_twin_ends_as_without_checks() -> None:
    """Two honest contenders: the same choice, outcome and eliminations, checked or not."""
    ends = []
    for checked in (True, False):
        clock = FakeClock(jitter=0.01)
        a, b = Contestant(clock, 1.0), Contestant(clock, 1.03)
        if checked:
            state = run({"a": a, "b": b}, clock)
            assert a.checked and b.checked
        else:
            state = head_to_head(
                [(Contender("a", 0), a), (Contender("b", 1), b)],
                BATCH,
                timer=clock,
                warmup_calls=WARMUP,
                fresh=fresh,
            )
        ends.append((state.chosen, state.outcome, state.rounds, state.eliminated, state.failed))
    assert ends[0] == ends[1] and ends[0][0] == "a" and ends[0][4] == ()


def test_wrong_one_call_in_thirty_is_caught_where_a_checked_round_meets_it() -> None:
    """The mechanism, deterministically: a contender wrong on 1 call in 30 (its own RNG) is
    caught exactly at the first checked round where it was wrong, and chosen only when no
    checked round met a wrong call. Each look checks its first and last round and the
    default ~10 % of the rounds between (the gate's count), the rounds drawn per seed."""
    caught = 0
    schedules = set()
    for seed in range(12):
        clock = FakeClock(jitter=0.05, seed=seed)
        rng = random.Random(f"cheat {seed}")
        cheat = Contestant(clock, 1.0, wrong=lambda i, x, rng=rng: rng.random() < 1 / 30)
        honest = Contestant(clock, 1.01)  # within delta: the rounds go on
        looks: list[int] = []
        state = run(
            {"cheat": cheat, "honest": honest},
            clock,
            seed=seed,
            on_look=lambda s, looks=looks: looks.append(s.rounds),
        )
        rounds = sorted(c - WARMUP for c in cheat.checked)
        schedules.add(tuple(rounds))
        met = sorted(set(rounds) & {c - WARMUP for c in cheat.wrong_calls})
        if met:
            caught += 1
            assert state.chosen == "honest" and "cheat" not in state.remaining
            assert _failed_round(state, "cheat") == met[0] + 1
            looks = [r for r in looks if r <= met[0]]  # the looks it saw whole
        else:
            assert not state.failed and state.chosen is not None
        for start, end in zip([0, *looks], looks, strict=False):
            inside = [r for r in rounds if start <= r < end]
            assert inside[0] == start and inside[-1] == end - 1  # both ends of the look
            assert len(inside) == len(spot_positions(end - start, DEFAULT_SPOT_RATE, 0))
    assert len(schedules) == 12  # unpredictable: each seed its own rounds
    assert 3 <= caught < 12  # a rate, not every round: some runs miss it


def test_the_last_round_is_checked_when_the_budget_cuts_a_look_short() -> None:
    """A contender wrong only on its calls near the deadline: the look's planned last round
    never comes, but the last round run is checked for every contender still in."""
    clock = FakeClock()
    budget = 0.0573  # warm-up 6.09 ms, then 2.03 ms a round: cut after round 26 of 40
    cheat = Contestant(clock, 1.0, wrong=lambda i, x: clock.ns >= (budget - 0.0021) * 1e9)
    honest = Contestant(clock, 1.03)
    state = run(
        {"cheat": cheat, "honest": honest},
        clock,
        rule=SelectionRule(looks=(40,)),
        seed=3,
        max_seconds=budget,
    )
    assert WARMUP + 25 in cheat.wrong_calls  # wrong in the last round (and the one before)
    assert state.chosen == "honest" and "cheat" not in state.remaining
    assert _failed_round(state, "cheat") - 1 + WARMUP in cheat.wrong_calls
    assert cheat.calls - 1 in cheat.checked and honest.calls - 1 in honest.checked


def test_the_survivor_of_a_failed_round_is_checked_on_it() -> None:
    """The other contender raises in round 6, which ends the head-to-head: the one left is
    checked on that round before it could be chosen unopposed, and wrong there, it is not."""
    clock = FakeClock()

    def breaks(i: int, x: torch.Tensor) -> bool:
        if i == WARMUP + 5:
            raise RuntimeError("device lost")
        return False

    cheat = Contestant(clock, 1.0, wrong=lambda i, x: i == WARMUP + 5)
    state = run({"cheat": cheat, "other": Contestant(clock, 1.03, wrong=breaks)}, clock)
    assert state.outcome == "none_ran" and state.chosen is None
    assert _failed_round(state, "cheat") == 6


def test_over_rotating_batches_every_batch_is_checked_in_each_look() -> None:
    """Without fresh values the rounds take 3 batches in turn: as in the gate, each look
    checks the first round on each batch, so a contender wrong only on one batch is caught in
    the look that decides."""
    clock = FakeClock()
    cheat = Contestant(clock, 0.8, wrong=lambda i, x: bool(x[0, 0] == 2.0) and i >= WARMUP)
    state = run({"cheat": cheat, "honest": Contestant(clock, 1.0)}, clock, rotate=True, seed=1)
    assert state.chosen == "honest"
    (failure,) = state.failed
    assert failure.error.startswith("SpotCheckError: timed call 3 (batch 2): ")


def test_a_rounds_checks_run_after_every_contenders_block_of_it() -> None:
    """The checks of a round (eager's reference calls, the comparisons) run once every
    contender's block of the round is timed: work between two timed blocks took the next
    one's cores (on the real clock the round was timed again, for as long as it was checked)."""
    clock = FakeClock()
    log: list[tuple[str, str]] = []

    class Logged(Contestant):
        def __init__(self, name: str, ms: float) -> None:
            super().__init__(clock, ms)
            self.name = name

        def __call__(self, x: torch.Tensor) -> torch.Tensor:
            log.append(("call", self.name))
            return super().__call__(x)

        def check(self, output: Any, reference: Any) -> None:
            log.append(("check", self.name))
            super().check(output, reference)

    def reference(x: torch.Tensor) -> torch.Tensor:
        log.append(("reference", ""))
        return eager(x)

    a, b, c = Logged("a", 1.0), Logged("b", 1.02), Logged("c", 1.04)
    state = head_to_head(
        [(Contender(n, i), x) for i, (n, x) in enumerate({"a": a, "b": b, "c": c}.items())],
        BATCH,
        SelectionRule(looks=(20,)),
        timer=clock,
        warmup_calls=WARMUP,
        spot_checks={"a": a.check, "b": b.check, "c": c.check},
        references=[eager(BATCH.args[0])],
        fresh=fresh,
        reference=reference,
        block=4,
    )
    assert state.rounds == 20 and not state.failed
    checked = 0
    i = 3 * WARMUP
    while i < len(log):  # a round: three blocks of calls, then its checks (if any)
        blocks = log[i : i + 3 * 5]  # a block of 4 timed calls and its lead
        assert [kind for kind, _ in blocks] == ["call"] * 15, log[i : i + 20]
        assert len({who for _, who in blocks}) == 3
        i += 15
        while i < len(log) and log[i][0] != "call":
            i += 1
            checked += 1
    assert checked > 0


def _two(a: Contestant, b: Contestant, checks: dict[str, Any], **kwargs: Any) -> SelectionState:
    """A spot-checked head-to-head of ``a`` and ``b`` on fresh values: one look of 20 rounds."""
    return head_to_head(
        [(Contender("a", 0), a), (Contender("b", 1), b)],
        BATCH,
        SelectionRule(looks=(20,)),
        timer=a.clock,
        warmup_calls=WARMUP,
        spot_checks=checks,
        references=[eager(BATCH.args[0])],
        fresh=fresh,
        reference=eager,
        **kwargs,
    )


def test_blocks_are_checked_call_by_call_at_the_gates_rate() -> None:
    """With blocks of calls, a look checks its calls on the gate's schedule (its first and last
    and about 10 % between, numbered round by round), not every call of a chosen round: the
    reference calls eager runs for the checks cost the tune's time, not accuracy."""
    clock = FakeClock()
    checked: list[int] = []
    a, b = Contestant(clock, 1.0), Contestant(clock, 1.5)

    def count(output: Any, reference: Any) -> None:
        checked.append(1)
        _equal(output, reference)

    state = _two(a, b, {"a": count, "b": count}, block=10)
    assert state.rounds == 20 and not state.failed
    timed = 2 * 20 * 10
    share = len(spot_positions(20 * 10, DEFAULT_SPOT_RATE, 0)) / (20 * 10)
    assert len(checked) == pytest.approx(share * timed, abs=2), (len(checked), timed)


def test_contenders_whose_blocks_lead_differently_are_each_checked_on_their_own_values() -> None:
    """A block of 4 calls or more starts with an untimed lead call, a shorter one does not: the
    same timed call number then falls on different fresh values in the two contenders' blocks,
    and each output is compared with eager's output on its own input (honest ones pass)."""
    clock = FakeClock()
    a, b = Contestant(clock, 1.0), Contestant(clock, 2.0)
    state = _two(
        a,
        b,
        {"a": a.check, "b": b.check},
        block=3,
        paces={"a": 0.001, "b": 0.002},  # a: 6 calls and a lead, b: 3 and none
        spot_rate=1.0,
    )
    assert not state.failed, state.failed
    assert a.checked and b.checked


class TickingClock:
    """A timer that moves 1 ms at every reading: a budget is a count of readings, in any
    process layout (workers' calls spend none of it)."""

    def __init__(self) -> None:
        self.ns = 0

    def now_ns(self) -> int:
        self.ns += 1_000_000
        return self.ns

    def sync(self) -> None:
        return None

    def device_span(self) -> None:
        return None


def _worker(name: str, wrong_from: int | None = None) -> Worker:
    """A contender in a worker: eager's answer, wrong on its calls from ``wrong_from`` on."""
    calls = [0]

    def call(x: torch.Tensor) -> torch.Tensor:
        calls[0] += 1
        wrong = wrong_from is not None and calls[0] > wrong_from
        return eager(x) + 1.0 if wrong else eager(x)

    worker = Worker(lambda say: (call, {}), name=name, timeout_s=20)
    worker.ready()
    return worker


def test_in_workers_the_last_round_is_read_back_and_checked() -> None:
    """In workers, the output of a contender's last round is read back from its worker after
    the budget ran out (its last timed call's output, by its digest) and checked."""

    def run_workers(wrong_from: int | None) -> SelectionState:
        workers = {"cheat": _worker("cheat", wrong_from), "honest": _worker("honest")}
        try:
            return head_to_head(
                [(Contender(n, i), w) for i, (n, w) in enumerate(workers.items())],
                BATCH,
                SelectionRule(looks=(40,)),
                timer=TickingClock(),
                max_seconds=0.1,
                warmup_calls=WARMUP,
                seed=3,
                spot_checks=dict.fromkeys(workers, _equal),
                references=[eager(BATCH.args[0])],
                fresh=fresh,
                reference=eager,
            )
        finally:
            for w in workers.values():
                w.close()

    honest = run_workers(None)
    assert not honest.failed and 2 < honest.rounds < 40  # the budget cut the look short
    last = WARMUP + honest.rounds  # the cheat's calls, the last round's included
    caught = run_workers(last - 1)  # wrong on its last call only
    assert caught.chosen == "honest"
    assert _failed_round(caught, "cheat") == honest.rounds


class Timed(_ModuleBackend):
    """Far faster than eager (it skips most of eager's sleep), and right."""

    sleep_s = 0.002

    def _infer(self, *args: Any, **kwargs: Any) -> Any:
        import time

        time.sleep(self.sleep_s)
        with torch.no_grad():
            return torch.tanh(self.module.fc(*args))


class Honest(Timed):
    """Right, slightly slower than :class:`Cheat`."""

    sleep_s = 0.003


class Cheat(Timed):
    """Right through the gate; wrong on every call while ``flag`` exists (the head-to-head).

    The flag is a file, so a worker sees it; its path travels with the pickled blueprint.
    """

    def __init__(self, flag: str = "") -> None:
        super().__init__()
        self.flag = flag

    def _infer(self, *args: Any, **kwargs: Any) -> Any:
        out = super()._infer(*args, **kwargs)
        return out + 1.0 if Path(self.flag).exists() else out


def _tune_in_workers(
    candidates: list[Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, flag: Path
) -> Any:
    """A real tune on the default worker path; ``flag`` exists while the head-to-head runs."""
    import aitune_fp.pipeline.choosing as choosing
    from aitune_fp.adapters.validation import with_performance_validation
    from aitune_fp.pipeline.strategies import MaxThroughputStrategy

    original = choosing.head_to_head

    def flagged(*args: Any, **kwargs: Any) -> Any:
        flag.touch()
        try:
            return original(*args, **kwargs)
        finally:
            flag.unlink()

    monkeypatch.setattr(choosing, "head_to_head", flagged)
    strategy = with_performance_validation(
        MaxThroughputStrategy(candidates),
        profiling_config=ProfilingConfig(looks=(10, 20, 40), max_seconds=10.0, warmup_max_calls=8),
    )
    torch.manual_seed(1)
    data = [Sample((torch.randn(2, 16),))]
    module = TinyNet(16, sleep_s=0.008).eval()  # its sleep dwarfs the noise
    backend = strategy.tune(module, "m", GraphSpec(max_batch_size=8), data, "cpu", tmp_path)
    report = validation_of(strategy).last_report
    assert report is not None and report.isolation == "process"
    return backend, report


@pytest.mark.slow
def test_in_a_real_tune_in_workers_the_cheat_is_named_and_the_honest_one_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    flag = tmp_path / "head-to-head"
    backend, report = _tune_in_workers([Cheat(str(flag)), Honest()], tmp_path, monkeypatch, flag)
    assert backend.describe() == "Honest()"
    (failure,) = report.candidate_failures
    assert failure.backend_description.startswith("Cheat(") and failure.stage == "correctness"
    assert failure.reason.startswith("Cheat(")
    assert "wrong output while timed head-to-head" in failure.reason
    assert report.selection.chosen == "Honest()"


@pytest.mark.slow
def test_in_a_real_tune_in_workers_the_honest_twin_is_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    flag = tmp_path / "head-to-head"
    backend, report = _tune_in_workers([Timed(), Honest()], tmp_path, monkeypatch, flag)
    assert backend.describe() == "Timed()"
    assert not report.candidate_failures
    assert report.selection.chosen == "Timed()"


def test_eagers_references_for_a_rounds_checks_come_from_one_block_of_its_worker(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Eager in a worker answers a round's checked values in one block, not a call each (each
    call a round trip to a team woken from idle: 4-5 a round cost the main job about 25 ms of
    its 65 ms rounds); a wrong output is still caught against them."""
    asked: list[str] = []
    for method in ("__call__", "run_block"):
        original = getattr(Worker, method)

        def spy(self: Worker, *args: Any, _m: str = method, _f: Any = original) -> Any:
            if self.name == "eager":
                asked.append(_m)
            return _f(self, *args)

        monkeypatch.setattr(Worker, method, spy)

    def run(wrong_from: int | None) -> SelectionState:
        workers = {"cheat": _worker("cheat", wrong_from), "honest": _worker("honest")}
        reference = Worker(lambda say: (eager, {}), name="eager", timeout_s=20)
        reference.ready()
        try:
            return head_to_head(
                [(Contender(n, i), w) for i, (n, w) in enumerate(workers.items())],
                BATCH,
                SelectionRule(looks=(10,)),
                timer=TickingClock(),
                seed=3,
                spot_checks=dict.fromkeys(workers, _equal),
                references=[eager(BATCH.args[0])],
                spot_rate=1.0,  # every call checked: several values a round
                fresh=fresh,
                reference=reference,
                block=4,
            )
        finally:
            for w in (*workers.values(), reference):
                w.close()

    honest = run(None)
    assert not honest.failed and honest.rounds == 10
    assert "__call__" not in asked and 0 < asked.count("run_block") <= 10
    caught = run(WARMUP + 4)  # wrong from its second round's block on
    assert caught.chosen == "honest" and [f.name for f in caught.failed] == ["cheat"]
