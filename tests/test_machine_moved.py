"""No verdict from a machine that moved (issue 36): the steady stretch a statistical look rests on.

On a :class:`~aitune_fp.testing.FakeClock` both arms share one simulated machine (latency a
function of the global call number), which slows down mid-run or reports a busy load average.
"""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aitune_fp.core.config import ProfilingConfig
from aitune_fp.core.dependence import (
    MIN_SIDE_PAIRS,
    RATIO_HELD_MOVE,
    machine_change_index,
    machine_slowdown,
    ratio_held,
    slowdown_limit,
)
from aitune_fp.inputs import Sample
from aitune_fp.measure import machine, statistical
from aitune_fp.measure.rules import measure_speedup
from aitune_fp.profiling import threads as host
from aitune_fp.testing import FakeClock

Arm = Callable[[int], float]


def _machine(
    ratio: float, slow_from: int, seed: int, *, eager_hit: float = 3.0, cand_hit: float = 3.0
) -> tuple[Arm, Arm]:
    """Two arms of one machine that runs ``eager_hit`` / ``cand_hit`` times slower from call
    ``slow_from`` on (counting both arms' calls); lognormal noise of 6 % per call."""
    rng = random.Random(seed)
    calls = [0]

    def arm(candidate: bool) -> Arm:
        def latency(_i: int) -> float:
            g = calls[0]
            calls[0] += 1
            t = 0.001 * rng.lognormvariate(0.0, 0.06) / (ratio if candidate else 1.0)
            if g >= slow_from:
                t *= cand_hit if candidate else eager_hit
            return t

        return latency

    return arm(False), arm(True)


def _measure(eager: Arm, cand: Arm, seed: int = 0, **changes: object) -> object:
    """Single calls by default (``quantity="typical"``): the slowdowns are placed by call."""
    clock = FakeClock()
    config = ProfilingConfig(**{"quantity": "typical", **changes})  # type: ignore[arg-type]
    return measure_speedup(
        clock.arm(eager), clock.arm(cand), Sample(), 1, config, timer=clock, spot_seed=seed
    ).result


class TestMachineSlowsMidRun:
    @pytest.mark.parametrize("cand_hit", [3.0, 6.0])
    def test_a_faster_candidate_is_never_settled_not_faster(self, cand_hit: float) -> None:
        """1.8x truly, the machine 3x slower from a call in the warm-up or among the first pairs
        on (the candidate hit as hard, or twice as hard, as a busy machine does): the run's
        second half is slow, and it is never ``not_faster``."""
        verdicts = set()
        for seed in range(8):
            for slow_from in (12, 30, 45, 60, 90):
                eager, cand = _machine(1.8, slow_from, seed, cand_hit=cand_hit)
                result = _measure(eager, cand, seed)
                verdicts.add(result.verdict)  # type: ignore[attr-defined]
        assert "not_faster" not in verdicts
        assert "faster" in verdicts  # decided where the stretch before the change allows

    @pytest.mark.parametrize("cand_hit", [3.0, 2.0])
    def test_an_identical_candidate_is_never_faster(self, cand_hit: float) -> None:
        """Identical arms (or the busy machine sparing the candidate): never ``faster``."""
        for seed in range(6):
            for slow_from in (30, 100, 200, 400):
                eager, cand = _machine(1.0, slow_from, seed, cand_hit=cand_hit)
                result = _measure(eager, cand, seed)
                assert result.verdict != "faster"  # type: ignore[attr-defined]

    def test_a_held_look_says_what_moved(self) -> None:
        """Slowed for good mid-run and the candidate hit harder: inconclusive, and why."""
        eager, cand = _machine(1.0, 100, 3, cand_hit=6.0)
        result = _measure(eager, cand, 3)
        assert result.verdict == "inconclusive"  # type: ignore[attr-defined]
        assert "machine_slowed" in result.flags  # type: ignore[attr-defined]
        reason = result.reason  # type: ignore[attr-defined]
        assert "no verdict from a machine that moved" in reason
        assert "slower there than at its fastest" in reason

    def test_a_machine_that_got_faster_decides_on_the_pairs_after(self) -> None:
        """Slow first, quick from then on: the verdict rests on the quick stretch alone."""
        eager, cand = _machine(1.5, 26, 1, eager_hit=1 / 3, cand_hit=1 / 3)
        result = _measure(eager, cand, 1)
        assert result.verdict == "faster"  # type: ignore[attr-defined]
        assert any(f.startswith("machine_changed_at_pair_") for f in result.flags)  # type: ignore[attr-defined]
        assert "decided on pairs" in result.reason  # type: ignore[attr-defined]


class TestSlowedHostThatScalesBothArms:
    """A slower host that scales both arms alike (a launch-bound GPU call; seen on an H200,
    where eager ran 1.5-2.3x slower in the timed pairs than in the warm-up): the verdict of
    the slowed stretch stands, since the pairs at eager's fastest level bear it out."""

    @pytest.mark.parametrize(("ratio", "verdict"), [(1.9, "faster"), (0.6, "not_faster")])
    def test_the_verdict_stands_and_says_so(self, ratio: float, verdict: str) -> None:
        for seed in range(4):
            eager, cand = _machine(ratio, 26, seed, eager_hit=2.0, cand_hit=2.0)
            result = _measure(eager, cand, seed)
            assert result.verdict == verdict, result.reason  # type: ignore[attr-defined]
            assert "machine_slowed" in result.flags  # type: ignore[attr-defined]
            assert "bear the verdict out" in result.reason  # type: ignore[attr-defined]

    def test_quiet_pairs_that_disagree_keep_it_open(self) -> None:
        """The busy machine spares the candidate (1.0x quiet, 1.5x slowed): no faster."""
        for seed in range(4):
            eager, cand = _machine(1.0, 26, seed, eager_hit=3.0, cand_hit=2.0)
            result = _measure(eager, cand, seed)
            assert result.verdict == "inconclusive"  # type: ignore[attr-defined]


@given(
    st.lists(st.floats(0.5, 3.0), min_size=8, max_size=40),
    st.floats(1.0, 1.5),
)
def test_borne_out_reads_the_quartiles_of_the_quiet_speedups(
    ratios: list[float], required: float
) -> None:
    base = [r * 1e-3 for r in ratios]
    cand = [1e-3] * len(ratios)
    faster = machine.borne_out("faster", required, base, cand)
    slower = machine.borne_out("not_faster", required, base, cand)
    assert not (faster and slower)
    if min(ratios) >= required:
        assert faster
    if max(ratios) < required:
        assert slower
    assert not machine.borne_out("faster", required, base[:7], cand[:7])
    assert not machine.borne_out("inconclusive", required, base, cand)


def _loads(monkeypatch: pytest.MonkeyPatch, values: list[float]) -> None:
    """The fake clock's machine reads load ``values`` in turn (the last one repeats)."""
    seq = list(values)
    monkeypatch.setattr(
        FakeClock, "load_average", lambda self: seq.pop(0) if len(seq) > 1 else seq[0]
    )
    monkeypatch.setattr(host, "usable_cpus", lambda: 2)


class TestBusyMachine:
    def test_a_fake_clocks_verdict_does_not_read_the_hosts_load(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The host reads load 5.8 on 2 cores; on a FakeClock (its own machine, quiet) a 2x
        candidate is faster, flagged for nothing the host did: docs/testing.md's promise."""
        monkeypatch.setattr(host, "load_average", lambda: 5.8)
        monkeypatch.setattr(host, "usable_cpus", lambda: 2)
        eager, cand = _machine(2.0, 10**9, 0)
        for quantity in ("typical", "throughput"):
            result = _measure(eager, cand, threads=1, quantity=quantity)
            assert result.verdict == "faster"  # type: ignore[attr-defined]
            assert not {"machine_busy", "oversubscribed"} & set(result.flags)  # type: ignore[attr-defined]
            assert result.environment.load_avg_start is None  # type: ignore[attr-defined]

    def test_busy_throughout_gives_no_verdict(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Load 5.8 on 2 cores: a 2x candidate ends inconclusive, the reason says to rerun."""
        _loads(monkeypatch, [5.8])
        eager, cand = _machine(2.0, 10**9, 0)
        result = _measure(eager, cand, threads=1)
        assert result.verdict == "inconclusive"  # type: ignore[attr-defined]
        assert {"machine_busy", "oversubscribed"} <= set(result.flags)  # type: ignore[attr-defined]
        reason = result.reason  # type: ignore[attr-defined]
        assert "the machine was busy: load 5.8 on 2 cores" in reason
        assert "rerun when quiet or pin --threads 1" in reason

    def test_where_each_block_reads_its_wait_for_a_cpu_the_load_holds_nothing_back(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Load 5.8 on 2 cores, but no block waited for a core (schedstat, on the real clock):
        the pairs carry the verdict; the load is only said (``oversubscribed``)."""
        import aitune_fp.profiling.calls as calls

        _loads(monkeypatch, [5.8])
        monkeypatch.setattr(calls, "run_clocks", lambda: (0, 0, 0))
        monkeypatch.setattr(calls, "waited_on_others_s", lambda before: 0.0)
        monkeypatch.setattr(calls, "on_real_clock", lambda timer: True)
        monkeypatch.setattr(statistical, "reads_waits", lambda timer: True)
        eager, cand = _machine(2.0, 10**9, 0)
        result = _measure(eager, cand, threads=1)
        assert result.verdict == "faster"  # type: ignore[attr-defined]
        assert "machine_busy" not in result.flags  # type: ignore[attr-defined]
        assert "oversubscribed" in result.flags  # type: ignore[attr-defined]

    def test_wait_quiet_waits_for_the_load_to_fall(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """--wait-quiet: busy at first, quiet after two polls; the pairs after decide."""
        _loads(monkeypatch, [5.8, 5.8, 5.8, 0.4])
        slept: list[float] = []
        monkeypatch.setattr(machine, "_sleep", slept.append)
        eager, cand = _machine(2.0, 10**9, 0)
        result = _measure(eager, cand, threads=1, wait_quiet_s=30.0)
        assert result.verdict == "faster"  # type: ignore[attr-defined]
        assert slept and sum(slept) <= 30.0

    def test_without_the_wait_the_busy_look_is_left_out(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Busy around the first look only: its pairs are dropped, the later ones decide."""
        _loads(monkeypatch, [0.3, 5.8, 5.8, 0.3])
        eager, cand = _machine(2.0, 10**9, 0)
        result = _measure(eager, cand, threads=1)
        assert result.verdict == "faster"  # type: ignore[attr-defined]
        assert "machine_busy" in result.flags  # type: ignore[attr-defined]
        assert "decided on pairs 11-" in result.reason  # type: ignore[attr-defined]


levels = st.floats(min_value=1e-4, max_value=1.0)


class TestPureRules:
    @given(levels, st.lists(st.floats(-0.05, 0.05), min_size=0, max_size=80))
    def test_a_steady_level_has_no_change(self, level: float, wiggle: list[float]) -> None:
        """Within ±5 % of one level: no change found, no slowdown beyond 15 %."""
        times = [level * (1.0 + w) for w in wiggle]
        assert machine_change_index(times) is None
        if times:
            assert machine_slowdown(times, 0) <= slowdown_limit(times)

    @given(
        levels,
        st.integers(5, 60),
        st.integers(5, 60),
        st.sampled_from([0.5, 1.3, 3.0]),
    )
    def test_a_clean_step_starts_the_stretch_after_it(
        self, level: float, before: int, after: int, factor: float
    ) -> None:
        """A step at ``s`` (both sides >= 5 calls) is found at ``s .. s + 2``; a slowdown shows."""
        times = [level] * before + [level * factor] * after
        k = machine_change_index(times)
        assert k is not None and before <= k <= before + 2
        slowdown = machine_slowdown(times, k)
        assert slowdown == pytest.approx(factor if factor > 1 else 1.0)
        assert (slowdown > slowdown_limit(times[k:])) is (factor > 1.15)


def _sides(before: list[float], after: list[float], factor: float) -> tuple[list[float], ...]:
    """Eager at 1 ms, ``factor`` times that after the move; the candidate at the given ratios."""
    base = [1e-3] * len(before) + [1e-3 * factor] * len(after)
    return base, [b / r for b, r in zip(base, [*before, *after], strict=True)]


ratio_lists = st.lists(st.floats(0.5, 2.0), min_size=MIN_SIDE_PAIRS, max_size=40)


class TestRatioHeld:
    """A move of eager's that the paired ratio held across (issue 48): the ratios on both sides
    agree and the move is at most RATIO_HELD_MOVE."""

    @given(ratio_lists, st.floats(1 / 1.34, 1.34), st.randoms(use_true_random=False))
    def test_the_same_ratios_on_both_sides_held_up_to_the_size_cut(
        self, ratios: list[float], factor: float, rnd: random.Random
    ) -> None:
        """Both arms ``factor`` times slower after the move, the ratios the same (shuffled)."""
        after = list(ratios)
        rnd.shuffle(after)
        base, cand = _sides(ratios, after, factor)
        assert ratio_held(base, cand, len(ratios), len(ratios))
        assert ratio_held(base, cand, len(ratios) - 2, len(ratios) + 2) is (len(ratios) >= 10)

    @given(ratio_lists, st.sampled_from([1.36, 2.0, 3.0]), st.booleans())
    def test_a_larger_move_is_never_held(
        self, ratios: list[float], factor: float, faster: bool
    ) -> None:
        """Past RATIO_HELD_MOVE (2x: a busy machine), whatever the ratio does."""
        base, cand = _sides(ratios, ratios, factor if not faster else 1 / factor)
        assert factor > RATIO_HELD_MOVE
        assert not ratio_held(base, cand, len(ratios), len(ratios))

    @given(
        st.integers(5, 40),
        st.integers(MIN_SIDE_PAIRS, 40),
        st.integers(MIN_SIDE_PAIRS, 40),
        st.sampled_from([0.5, 2.0, 3.0]),
        st.floats(0.8, 1.25),
    )
    def test_a_small_last_move_does_not_let_a_large_one_before_it_stand(
        self, first: int, middle: int, last: int, large: float, small: float
    ) -> None:
        """Eager ``large`` times slower (or faster), then ``small``, the ratio 1 throughout: the
        last move alone would be held, the one before it is past RATIO_HELD_MOVE."""
        base = [1e-3] * first + [1e-3 * large] * middle + [1e-3 * large * small] * last
        cut = first + middle
        assert not ratio_held(base, base, cut, cut)
        assert ratio_held(base[first:], base[first:], middle, middle)  # the last move alone

    @given(
        st.integers(MIN_SIDE_PAIRS, 40),
        st.integers(MIN_SIDE_PAIRS, 40),
        st.floats(0.5, 2.0),
        st.sampled_from([0.8, 0.95, 1.05, 1.25]),
        st.lists(st.floats(-0.01, 0.01), min_size=80, max_size=80),
    )
    def test_a_ratio_that_steps_across_the_move_is_not_held(
        self, n: int, m: int, ratio: float, step: float, wiggle: list[float]
    ) -> None:
        """The ratio 5-25 % off after the move, each side within ±1 %: never held."""
        before = [ratio * (1 + w) for w in wiggle[:n]]
        after = [ratio * step * (1 + w) for w in wiggle[40 : 40 + m]]
        assert not ratio_held(*_sides(before, after, 1.25), n, n)

    @given(st.integers(0, MIN_SIDE_PAIRS - 1), st.integers(MIN_SIDE_PAIRS, 40))
    def test_too_few_pairs_on_a_side_are_never_held(self, few: int, many: int) -> None:
        for before, after in ((few, many), (many, few)):
            base, cand = _sides([1.0] * before, [1.0] * after, 1.2)
            assert not ratio_held(base, cand, before, before)


class TestSettings:
    @pytest.mark.parametrize(
        ("flag", "value", "field", "expected"),
        [
            ("--wait-quiet", "30", "wait_quiet_s", 30.0),
            ("--wait-quiet", "-1", "wait_quiet_s", None),
            ("--throughput-gate", "bound", "throughput_gate", "bound"),
        ],
    )
    def test_the_cli_flags(
        self,
        flag: str,
        value: str,
        field: str,
        expected: object,
        capsys: pytest.CaptureFixture[str],
    ) -> None:
        """Statistical-mode flags: they reach the config, a bad value names the flag, and the
        point rule refuses them."""
        from aitune_fp.cli import build_parser
        from aitune_fp.cli.tune_args import profiling_config
        from tests.cli_checks import usage_error

        if expected is None:
            assert flag in usage_error(["tune", flag, value], capsys)
            return
        args = build_parser().parse_args(["tune", flag, value])
        assert getattr(profiling_config(args), field) == expected
        assert "applies to --decision statistical only" in usage_error(
            ["tune", "--decision", "point", flag, value], capsys
        )

    def test_sweep_files_take_them_in_the_budget(self) -> None:
        from aitune_fp.errors import InvalidValueError
        from aitune_fp.sweep.spec import parse_sweep

        base: dict[str, object] = {"models": [{"name": "mlp", "model": "embedded:mlp"}]}
        budget = {"wait_quiet_s": 20.0, "throughput_gate": "bound"}
        spec = parse_sweep({**base, "budget": budget})
        assert (spec.profiling.wait_quiet_s, spec.profiling.throughput_gate) == (20.0, "bound")
        with pytest.raises(InvalidValueError, match=r"budget\.throughput_gate"):
            parse_sweep({**base, "budget": {"throughput_gate": "mean"}})


def test_each_look_event_says_what_held_it_back() -> None:
    """A look kept open by the machine says so in its ``look`` event (log pipelines read it)."""
    from aitune_fp.events.validation import Look

    event = Look(
        run_id="r",
        module_name="m",
        backend_description="c",
        n_pairs=10,
        max_pairs=320,
        verdict="inconclusive",
        estimate=1.9,
        ci_low=1.8,
        ci_high=2.0,
        held_back="machine",
    ).to_event()
    assert event.fields["held_back"] == "machine"
    assert "held back: machine" in event.fields["summary"]
    settled = Look(
        run_id="r",
        module_name="m",
        backend_description="c",
        n_pairs=10,
        max_pairs=320,
        verdict="faster",
        estimate=1.9,
        ci_low=1.8,
        ci_high=2.0,
    ).to_event()
    assert settled.fields["held_back"] is None


#: A warm-up of one untimed and two timed calls per arm (window 2, at most 3 calls), so pair
#: ``p`` of the first look is global call ``8 + 2 p`` or ``9 + 2 p`` (eager's untimed call before
#: the look's pairs included): a step lands on the pair it is meant for.
TINY_WARMUP = {"warmup_window": 2, "warmup_max_calls": 3}


def _pair_call(pair: int) -> int:
    """The first global call of pair ``pair`` (0-based) of the first look, with TINY_WARMUP."""
    return 8 + 2 * pair


def _sweep(
    ratio: float,
    eager_hit: float,
    cand_hit: float,
    seeds: int,
    looks_steps: tuple[tuple[tuple[int, ...], tuple[int, ...]], ...] = (
        ((20, 40, 80, 160, 320), (6, 9, 12, 15)),
        ((10, 20, 40, 80, 160, 320), (4, 6, 9)),
    ),
) -> list[tuple[int, object]]:
    """(step, result) over step positions (pairs of the first look), seeds and sets of looks."""
    results = []
    for looks, steps in looks_steps:
        for step in steps:
            for seed in range(seeds):
                eager, cand = _machine(
                    ratio, _pair_call(step), seed, eager_hit=eager_hit, cand_hit=cand_hit
                )
                results.append((step, _measure(eager, cand, seed, looks=looks, **TINY_WARMUP)))
    return results


BOTH_SIDES = "the pairs before and after it each bear the verdict out"


class TestBothSidesOfTheMove:
    """A move with too few steady pairs after it (issue 36's follow-up): a verdict that the
    pairs before the move and those after it each give on their own stands; any other is
    held."""

    @pytest.mark.parametrize(("eager_hit", "cand_hit"), [(1.6, 1.6), (1.4, 1.0)])
    def test_a_clearly_faster_candidate_is_decided(self, eager_hit: float, cand_hit: float) -> None:
        """10x, eager 60 % slower from pair 10 on and the candidate alike (past what a steady
        ratio lets stand), or eager 40 % and the candidate not at all (the ratio moves): the
        change shows at pair 11 with 9 pairs after it at the first look (20 pairs), fewer than
        the first look; both sides say ``faster``, and the reason says so."""
        for seed in range(4):
            eager, cand = _machine(
                10.0, _pair_call(9), seed, eager_hit=eager_hit, cand_hit=cand_hit
            )
            result = _measure(eager, cand, seed, looks=(20, 40, 80), **TINY_WARMUP)
            reason = result.reason  # type: ignore[attr-defined]
            assert result.verdict == "faster", reason  # type: ignore[attr-defined]
            assert "machine_changed_at_pair_11" in result.flags  # type: ignore[attr-defined]
            assert "at pair 11" in reason and BOTH_SIDES in reason
            assert result.n_candidate == 9  # type: ignore[attr-defined]  # pairs 12-20

    @pytest.mark.parametrize(
        ("eager_hit", "cand_hit"), [(1.4, 1.4), (3.0, 3.0), (1.5, 1.0), (3.0, 2.0), (0.5, 0.5)]
    )
    def test_an_identical_candidate_is_never_faster(
        self, eager_hit: float, cand_hit: float
    ) -> None:
        """Identical arms on a machine that steps (up or down, the candidate hit alike or
        spared: then it reads faster after the step only): never ``faster``."""
        results = [r for _, r in _sweep(1.0, eager_hit, cand_hit, seeds=3)]
        assert not [r for r in results if r.verdict == "faster"]  # type: ignore[attr-defined]

    @pytest.mark.parametrize("cand_hit", [3.0, 6.0])
    def test_a_faster_candidate_is_never_not_faster(self, cand_hit: float) -> None:
        """1.8x truly, the machine 3x slower from mid-look on (the candidate hit alike, or
        twice as hard: 0.9x there): never ``not_faster``."""
        results = [r for _, r in _sweep(1.8, 3.0, cand_hit, seeds=3)]
        assert not [r for r in results if r.verdict == "not_faster"]  # type: ignore[attr-defined]
        if cand_hit == 3.0:  # the move changed no speedup: both sides bear faster out
            assert any(BOTH_SIDES in r.reason for r in results)  # type: ignore[attr-defined]

    def test_a_move_the_ratio_held_across_decides_on_every_pair(self) -> None:
        """10x, both arms 30 % slower from pair 10 on: the ratio held across the move, so the
        verdict rests on all 20 pairs of the first look, and the flag and reason say so (a
        move found; single calls' noise hides one now and then)."""
        found = 0
        for seed in range(6):
            eager, cand = _machine(10.0, _pair_call(9), seed, eager_hit=1.3, cand_hit=1.3)
            result = _measure(eager, cand, seed, looks=(20, 40, 80), **TINY_WARMUP)
            reason = result.reason  # type: ignore[attr-defined]
            assert result.verdict == "faster", reason  # type: ignore[attr-defined]
            assert result.n_candidate == 20  # type: ignore[attr-defined]
            flags = result.flags  # type: ignore[attr-defined]
            assert flags in {
                (),
                *((f"machine_moved_ratio_steady_at_pair_{k}",) for k in (9, 10, 11)),
            }
            if flags:
                assert "the paired ratio did not: decided on all 20 pairs" in reason
                found += 1
        assert found >= 3

    def test_a_speedup_that_differs_across_the_move_gets_no_verdict(self) -> None:
        """1.5x before the move, 0.9x after it (eager 1.4x slower, the candidate 2.33x): each
        verdict is one side's only, and neither is given once the move shows; a ``faster``
        only from a look that ended before the move."""
        for step, r in _sweep(1.5, 1.4, 1.4 * 1.5 / 0.9, seeds=3):
            verdict, flags = r.verdict, r.flags  # type: ignore[attr-defined]
            assert verdict in ("inconclusive", "faster")
            if verdict == "faster":
                assert r.n_candidate <= step + 1 and not flags, r.reason  # type: ignore[attr-defined]
