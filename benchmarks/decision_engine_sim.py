"""The sequential decision driven through the real measuring loop, on a simulated machine.

Each simulated decision runs :func:`aitune_fp.measure.measure_speedup` with the default
:class:`~aitune_fp.core.config.ProfilingConfig` on an :class:`aitune_fp.testing.FakeClock`: the
warm-up, the untimed calls of each look, the drawn ABBA / BAAB quads, the looks and every guard
are the library's own. Both arms are fake models of one simulated machine (:class:`Machine`):
each call's latency is a function of the **global** call number (eager's and the candidate's
calls counted together), so both arms share the machine's state as on a real one. The
candidate's typical call is ``ratio`` times faster, each call carries its own noise (iid
lognormal of ``--noise`` sd per call by default; each arm's own AR(1), skewed or bimodal noise
in some rows), and the machine may step, drift or interfere. Per row it prints accept /
not_faster / inconclusive rates, "wrong" accepts (accepted while the truth at the deciding call,
the regime the user gets, was at most the required speedup), wrong rejects (``not_faster`` for a
candidate truly faster than required + the futility margin), the pairs used and, over every look
that stayed open, which condition held the decision back (``SpeedupDecision.held_back``).

Usage: ``python benchmarks/decision_engine_sim.py [--runs 300] [--noise 0.06] [--seed 1]
[--jobs 2] [--cases 1.01x A/A] [--throughput-gate bound] [--typical]``.
"""

from __future__ import annotations

import argparse
import collections
import math
import random
import statistics
import sys
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor

import attrs

from aitune_fp.core.config import ProfilingConfig
from aitune_fp.core.verdict import SpeedupDecision
from aitune_fp.inputs import Sample
from aitune_fp.measure.rules import measure_speedup
from aitune_fp.profiling import threads
from aitune_fp.profiling.layout import LEAD_FROM, block_calls
from aitune_fp.testing import FakeClock

#: The required speedup of the default 1 % threshold, and the futility edge above it.
REQUIRED = 1.01
FUTILITY_EDGE = 1.02
#: Eager's latency on the quiet machine (seconds): the budget never binds.
BASE_S = 0.001
#: Calls (both arms', lead calls included) a timed pair takes: a pair of blocks at eager's
#: BASE_S by default, 2 with ``--typical``. Rows place their changes in pairs through it.
CALLS_A_PAIR = [2 * (block_calls(BASE_S) + (block_calls(BASE_S) >= LEAD_FROM))]
#: The slots where the fixed ABBA / BAAB order put eager (8 calls a period): "periodic" lands there.
IN_PHASE = (1, 0, 0, 1, 0, 1, 1, 0)
PERIODIC_AMPLITUDE = 0.03


@attrs.frozen
class Case:
    """One scenario: the candidate's typical-call speedup, its noise and what moves.

    ``after``: (pair, speedup from then on), a step or a fading gain. ``noise``: "iid" (lognormal
    per call), "ar" (each arm its own AR(1) of coefficient ``phi`` over its own calls),
    "skewed" (shifted exponential) or "bimodal" (20 % of calls 10 % slower). ``extra``: "drift"
    (the speedup falls 2 % over 320 pairs), "drift1" (1 %), "wander" (a random walk of the
    speedup, step sd 0.2 %), "tail" (10 % of the candidate's calls 3x slower), "throughput"
    (10 % of the candidate's calls 1.5x slower, its typical call faster so that the mean-latency
    ratio is ``ratio``), "periodic" (3 % slower calls in phase with the fixed order),
    "carry" (the candidate 2 % faster on a call right after an eager call only), "machine30"
    / "machine3x" (the machine 30 % / 3x slower for both arms from a random call among the first
    60, or from the second half of the run), "step25" / "eager25" (both arms, or eager alone, 25 %
    slower from a random pair of 20-299: a step of this project's shared CPU, the ratio steady or
    not).
    """

    label: str
    ratio: float
    after: tuple[int, float] | None = None
    noise: str = "iid"
    phi: float = 0.0
    extra: str = ""


CASES: tuple[Case, ...] = (
    Case("A/A 1.00x", 1.00),
    Case("0.97x", 0.97),
    Case("threshold 1.01x", 1.01),
    Case("1.02x (inside margin)", 1.02),
    Case("1.03x", 1.03),
    Case("1.10x", 1.10),
    Case("A/A, AR(1) phi=0.2", 1.00, noise="ar", phi=0.2),
    Case("1.01x, AR(1) phi=0.2", 1.01, noise="ar", phi=0.2),
    Case("1.01x, AR(1) phi=0.5", 1.01, noise="ar", phi=0.5),
    Case("1.01x, AR(1) phi=0.8", 1.01, noise="ar", phi=0.8),
    Case("A/A, AR(1) phi=0.5", 1.00, noise="ar", phi=0.5),
    Case("A/A, AR(1) phi=0.8", 1.00, noise="ar", phi=0.8),
    Case("1.04x for 40 pairs, then 1.01x", 1.04, after=(40, 1.01)),
    Case("1.04x for 160 pairs, then 1.01x", 1.04, after=(160, 1.01)),
    Case("1.03x for 20 pairs, then 1.00x", 1.03, after=(20, 1.00)),
    Case("1.04x for 30 pairs, then 1.01x (fading)", 1.04, after=(30, 1.01)),
    Case("1.01x, wander", 1.01, extra="wander"),
    Case("1.02x falling to 1.00x, drift", 1.02, extra="drift"),
    Case("1.015x falling to 1.005x, drift", 1.015, extra="drift1"),
    Case("typical 1.05x, 10 % of calls 3x slower", 1.05, extra="tail"),
    Case("throughput exactly 1.01x, typical call faster", 1.01, extra="throughput"),
    Case("1.01x, 2 % faster right after eager only", 1.01, extra="carry"),
    Case("A/A, skewed noise", 1.00, noise="skewed"),
    Case("1.01x, skewed noise", 1.01, noise="skewed"),
    Case("A/A, bimodal noise", 1.00, noise="bimodal"),
    Case("1.01x, bimodal noise", 1.01, noise="bimodal"),
    Case("A/A, periodic interference", 1.00, extra="periodic"),
    Case("1.01x, periodic interference", 1.01, extra="periodic"),
    Case("1.50x, machine 30 % slower from a random early call", 1.50, extra="machine30"),
    Case("1.80x, machine 3x slower for the second half", 1.80, extra="machine3x"),
    Case("A/A, machine 3x slower for the second half", 1.00, extra="machine3x"),
    Case("1.01x, both arms 25 % slower from a random pair", 1.01, extra="step25"),
    Case("1.01x, eager alone 25 % slower from a random pair", 1.01, extra="eager25"),
)


class Machine:
    """A simulated machine both fake arms run on; latencies are a function of the global call.

    ``truth`` is the candidate's true speedup (the regime a user gets) at the latest call.
    """

    def __init__(self, case: Case, sd: float, seed: int) -> None:
        """A quiet machine at call 0; ``sd``: each call's noise (log scale)."""
        self.case = case
        self.sd = sd
        self.rng = random.Random(seed)
        self.calls = 0
        self.previous = ""
        self.state = {"eager": 0.0, "candidate": 0.0}  # each arm's own AR(1) noise
        self.walk = 0.0
        self.truth = case.ratio
        early = self.rng.randrange(30) * CALLS_A_PAIR[0]  # a random call of the first 30 pairs
        self.slow_from = early if case.extra == "machine30" else 10**9
        self.slow_factor = 1.3 if case.extra == "machine30" else 3.0
        if case.extra in ("step25", "eager25"):
            self.slow_from, self.slow_factor = self.rng.randrange(20, 300) * CALLS_A_PAIR[0], 1.25

    def _noise(self, arm: str) -> float:
        """One call's log-latency noise of ``arm``."""
        kind, sd, rng = self.case.noise, self.sd, self.rng
        if kind == "ar":
            phi = self.case.phi
            self.state[arm] = phi * self.state[arm] + math.sqrt(1 - phi * phi) * rng.gauss(0, sd)
            return self.state[arm]
        if kind == "skewed":
            return sd * (rng.expovariate(1.0) - 1.0)
        if kind == "bimodal":
            return math.log(1.10) * (rng.random() < 0.20) + rng.gauss(0.0, 0.015)
        return rng.gauss(0.0, sd)

    def _speedup(self, pair: float) -> float:
        """The candidate's typical-call speedup at ``pair`` (pair-equivalents of calls so far)."""
        case = self.case
        ratio = case.ratio
        if case.after is not None and pair >= case.after[0]:
            ratio = case.after[1]
        if case.extra == "drift":
            ratio *= math.exp(min(pair, 320) / 320 * math.log(1.00 / 1.02))
        elif case.extra == "drift1":
            ratio *= math.exp(min(pair, 320) / 320 * math.log(1.005 / 1.015))
        elif case.extra == "wander":
            ratio *= math.exp(self.walk)
        return ratio

    def call(self, arm: str) -> float:
        """The latency of ``arm``'s next call, in seconds."""
        g, case = self.calls, self.case
        pair = g / CALLS_A_PAIR[0]
        if case.extra == "wander" and arm == "candidate":
            self.walk += self.rng.gauss(0.0, 0.002 / math.sqrt(CALLS_A_PAIR[0] / 2))  # per pair
        log_t = math.log(BASE_S) + self._noise(arm)
        hit = g >= self.slow_from and (arm == "eager" or case.extra != "eager25")
        speed = self.slow_factor if hit else 1.0
        if case.extra == "periodic" and IN_PHASE[(g // (CALLS_A_PAIR[0] // 2)) % 8]:
            log_t += math.log(1.0 + PERIODIC_AMPLITUDE)
        if arm == "candidate":
            ratio = self._speedup(pair)
            self.truth = ratio
            if case.extra == "throughput":  # mean of (1, 1.5 w.p. 0.1) is 1.05
                ratio *= 1.05
                if self.rng.random() < 0.10:
                    log_t += math.log(1.5)
            elif case.extra == "tail":
                self.truth = ratio / 1.2  # mean of (1, 3 w.p. 0.1): throughput 0.875x
                if self.rng.random() < 0.10:
                    log_t += math.log(3.0)
            elif case.extra == "carry" and self.previous == "eager":
                ratio *= 1.02
            log_t -= math.log(ratio)
        self.calls += 1
        self.previous = arm
        return speed * math.exp(log_t)


def _quiet() -> float:
    """The load average the simulated machine reports: quiet (the real one is not read)."""
    return 0.0


def one_run(
    case: Case, sd: float, seed: int, config: ProfilingConfig
) -> tuple[str, int, float, list[str | None]]:
    """One decision through the real loop: (verdict, pairs, truth at the end, held back per look)."""
    machine = Machine(case, sd, seed)
    clock = FakeClock()
    held: list[str | None] = []

    def on_look(n: int, decision: SpeedupDecision) -> None:
        if decision.verdict == "inconclusive":
            held.append(getattr(decision, "held_back", None))

    if case.extra == "machine3x":  # the second half of the run this case would take anyway
        machine.slow_from = CALLS_A_PAIR[0] * (20 + machine.rng.randrange(40))
    measurement = measure_speedup(
        clock.arm(lambda _i: machine.call("eager")),
        clock.arm(lambda _i: machine.call("candidate")),
        Sample(),
        1,
        config,
        timer=clock,
        on_look=on_look,
        spot_seed=seed,
    )
    result = measurement.result
    return str(result.verdict), int(result.n_baseline or 0), machine.truth, held


def _row(job: tuple[Case, int, int, float, str, str]) -> str:
    """One table row: ``runs`` decisions of one case, each seeded from ``seed``."""
    case, runs, seed, sd, gate, quantity = job
    threads.load_average = _quiet  # type: ignore[assignment]
    config = ProfilingConfig(throughput_gate=gate, quantity=quantity)
    if quantity == "typical":
        CALLS_A_PAIR[0] = 2
    out = [one_run(case, sd, seed * 100_003 + k, config) for k in range(runs)]
    verdicts = [v for v, _, _, _ in out]
    pairs = sorted(p for _, p, _, _ in out)
    rate = {v: verdicts.count(v) / runs for v in ("faster", "not_faster", "inconclusive")}
    wrong = sum(v == "faster" and t <= REQUIRED + 1e-12 for v, _, t, _ in out) / runs
    wrong_reject = sum(v == "not_faster" and t > FUTILITY_EDGE for v, _, t, _ in out) / runs
    held = collections.Counter(h or "?" for _, _, _, hs in out for h in hs)
    held_text = ", ".join(f"{k} {n}" for k, n in held.most_common()) or "—"
    se = math.sqrt(rate["faster"] * (1.0 - rate["faster"]) / runs)
    p90 = pairs[min(runs - 1, int(0.9 * runs))]
    return (
        f"| {case.label} | {rate['faster']:.1%} ± {se:.1%} | {wrong:.1%} | {wrong_reject:.1%} | "
        f"{rate['not_faster']:.1%} | {rate['inconclusive']:.1%} | {statistics.mean(pairs):.0f} | "
        f"{statistics.median(pairs):g} | {p90} | {held_text} |"
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Run every case through the real loop and print one Markdown table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--noise", type=float, default=0.06)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--jobs", type=int, default=1, help="worker processes")
    parser.add_argument(
        "--throughput-gate", choices=("point", "bound"), default="point", help="the config's"
    )
    parser.add_argument(
        "--typical", action="store_true", help="quantity='typical': single calls, not blocks"
    )
    parser.add_argument(
        "--cases", nargs="*", default=[], help="keep the cases whose label contains one of these"
    )
    args = parser.parse_args(argv)
    print(
        f"{args.runs} decisions per row through the real loop (FakeClock, default config), "
        f"per-call noise sd {args.noise:.0%}, throughput gate {args.throughput_gate}, "
        f"{'single calls' if args.typical else 'blocks (a pair: a block of each arm)'}\n"
    )
    print(
        "| case | accept (± MC s.e.) | wrong accept | wrong reject | not_faster | inconclusive "
        "| mean pairs | median pairs | p90 pairs | open looks held back by |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    jobs = [
        (
            case,
            args.runs,
            args.seed,
            args.noise,
            args.throughput_gate,
            "typical" if args.typical else "throughput",
        )
        for case in CASES
        if not args.cases or any(part in case.label for part in args.cases)
    ]
    if args.jobs > 1:
        with ProcessPoolExecutor(args.jobs) as pool:
            rows = list(pool.map(_row, jobs))
    else:
        rows = [_row(job) for job in jobs]
    for row in rows:
        print(row, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
