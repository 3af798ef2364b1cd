"""Head-to-head selection on synthetic latencies: how often the chosen one is within delta of the best.

Each simulated selection has ``k`` contenders (2-5); one, drawn at random, is the truly fastest and
the others are slower by ``gap`` (0 %, 1 %, 3 %, 10 %). Latency of contender ``i`` at call time
``t`` = ``scale_i * drift(t) * round_factor * noise``: a slow machine drift (a random direction,
up to 2 % per window of calls, see below), a per-round factor shared by the contenders timed in
that round (sd 2 %), and per-call noise: ``lognormal`` (sd 5 %) or ``spikes`` (sd 3 % and, on
5 % of calls, a 2-5x spike). Build times are drawn at random, so the tie-break says nothing of
speed.

Rules:

- **head-to-head** (:mod:`aitune_fp.core.selection`, default :class:`SelectionRule`: delta 2 %,
  95 %, looks 10..320 rounds): every round times each remaining contender once, in a random
  order; :func:`select_at_look` at each look.
- **max of point estimates** (the reference): each contender's mean latency from its own window
  of calls, one window after the other, each window as long as the head-to-head's run of the same
  replicate (same calls per contender); the lowest mean wins. The drift moves the level between
  windows.

"Correct" means the chosen one's true latency is within delta (2 %) of the best's: any choice is
correct at gaps 0 % and 1 %. Usage: ``python benchmarks/selection_quality.py [--reps 400]
[--workers 2] [--seed 1]``; prints a markdown table (95 % Wilson intervals for the rates).
"""

from __future__ import annotations

import argparse
import math
import multiprocessing
import random
import statistics
import sys
import time
from collections.abc import Sequence

from aitune_fp.core.selection import Contender, SelectionRule, SelectionState, select_at_look

NOISES = ("lognormal", "spikes")
KS = (2, 3, 4, 5)
GAPS = (0.0, 0.01, 0.03, 0.10)
#: Largest machine drift per window of calls (each replicate draws one in [-DRIFT, DRIFT]).
DRIFT = 0.02
ROUND_SD = 0.02


class _Noise:
    """Per-call noise of one contender; with ``phi`` its log is AR(1) (slow and fast spells)."""

    def __init__(self, rng: random.Random, kind: str, phi: float) -> None:
        self.rng, self.kind, self.phi, self.state = rng, kind, phi, rng.gauss(0.0, 1.0)

    def __call__(self) -> float:
        rng = self.rng
        self.state = self.phi * self.state + math.sqrt(1 - self.phi**2) * rng.gauss(0.0, 1.0)
        if self.kind == "lognormal":
            return math.exp(0.05 * self.state)
        value = math.exp(0.03 * self.state)
        return value * rng.uniform(2.0, 5.0) if rng.random() < 0.05 else value


def _replicate(
    noise: str, k: int, gap: float, seed: int, rule: SelectionRule, phi: float = 0.0
) -> tuple[int, ...]:
    """One selection by both rules: ours correct, ours best, rounds, outcome, ref correct, held."""
    rng = random.Random(seed)
    noises = [_Noise(rng, noise, phi) for _ in range(k)]
    best = rng.randrange(k)
    scales = [1.0 if i == best else 1.0 + gap for i in range(k)]
    contenders = [Contender(f"c{i}", i, rng.uniform(5.0, 60.0)) for i in range(k)]
    drift = rng.uniform(-DRIFT, DRIFT)  # per window of `rounds` calls; per call below
    latencies: dict[str, list[float]] = {c.name: [] for c in contenders}
    state: SelectionState | None = None
    remaining = [c.name for c in contenders]
    rounds = 0
    calls = 0  # calls made so far, on the machine's clock
    largest = rule.looks[-1]
    for look, target in enumerate(rule.looks, 1):
        while rounds < target:
            common = rng.lognormvariate(0.0, ROUND_SD)
            for name in rng.sample(remaining, len(remaining)):
                level = math.exp(drift * calls / largest)
                i = int(name[1:])
                latencies[name].append(scales[i] * level * common * noises[i]())
                calls += 1
            rounds += 1
        state = select_at_look(
            contenders, {n: latencies[n] for n in remaining}, look, rule, previous=state
        )
        remaining = list(state.remaining)
        if state.done:
            break
    assert state is not None and state.chosen is not None
    chosen = int(state.chosen[1:])
    ours_ok = scales[chosen] <= scales[best] * (1.0 + rule.delta)
    # what the state promised: within delta, or within its gap bound when the looks ran out
    promised = max(1.0 + rule.delta, state.gap_bound or math.inf)
    held = scales[chosen] <= scales[best] * promised
    # the reference: windows of `rounds` calls, one contender after the other, in a random order
    window = max(rounds, 10)
    means = {}
    start = 0
    for i in rng.sample(range(k), k):
        total = 0.0
        for j in range(window):
            level = math.exp(drift * (start + j) / window)
            common = rng.lognormvariate(0.0, ROUND_SD)
            total += scales[i] * level * common * noises[i]()
        means[i] = total / window
        start += window
    ref = min(means, key=means.__getitem__)
    ref_ok = scales[ref] <= scales[best] * (1.0 + rule.delta)
    outcome = ("one_left", "settled", "looks_spent").index(state.outcome)
    return (int(ours_ok), int(chosen == best), rounds, outcome, int(ref_ok), int(held))


def _job(args: tuple[str, int, float, int, int, float]) -> list[tuple[int, ...]]:
    noise, k, gap, seed, reps, phi = args
    rule = SelectionRule()
    return [_replicate(noise, k, gap, seed * 1_000_003 + r, rule, phi) for r in range(reps)]


def _wilson(hits: int, n: int) -> tuple[float, float]:
    z = 1.959964
    p = hits / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def _rate(hits: int, n: int) -> str:
    low, high = _wilson(hits, n)
    return f"{100 * hits / n:.1f} % [{100 * low:.1f}, {100 * high:.1f}]"


def _quantile(values: Sequence[int], q: float) -> int:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1)]


def main(argv: Sequence[str] | None = None) -> int:
    """Run every row and print the table; exit 1 when a row of ours misses 95 %."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=400, help="selections per row")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--gaps", type=float, nargs="+", default=GAPS, help="e.g. 0.021")
    parser.add_argument("--ks", type=int, nargs="+", default=KS)
    parser.add_argument("--noises", nargs="+", default=NOISES, choices=NOISES)
    parser.add_argument("--phi", type=float, default=0.0, help="AR(1) of each one's noise")
    args = parser.parse_args(argv)
    rows = [(noise, k, gap) for noise in args.noises for k in args.ks for gap in args.gaps]
    chunks = 4
    per = -(-args.reps // chunks)
    jobs = [
        (noise, k, gap, args.seed * 10_007 + 97 * r + c, per, args.phi)
        for r, (noise, k, gap) in enumerate(rows)
        for c in range(chunks)
    ]
    started = time.perf_counter()
    with multiprocessing.Pool(args.workers) as pool:
        results = pool.map(_job, jobs, chunksize=1)
    elapsed = time.perf_counter() - started
    print(
        f"{per * chunks} selections per row, seed {args.seed}, delta 2 %, confidence 95 %, "
        f"looks 10/20/40/80/160/320 rounds, noise AR(1) phi {args.phi:g}, "
        f"{elapsed:.0f} s on {args.workers} workers\n"
    )
    print(
        "| noise | k | gap | head-to-head: within 2 % [95 % CI] | chose the best | rounds "
        "median (p90) | one left / settled / looks spent | promise held | "
        "max of point estimates: within 2 % |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    misses = 0
    for r, (noise, k, gap) in enumerate(rows):
        reps = [rep for c in range(chunks) for rep in results[r * chunks + c]]
        n = len(reps)
        ok = sum(rep[0] for rep in reps)
        rounds = [rep[2] for rep in reps]
        outcomes = [sum(rep[3] == o for rep in reps) for o in range(3)]
        misses += ok < 0.95 * n
        best = f"{100 * sum(rep[1] for rep in reps) / n:.1f} %" if gap > 0 else "-"
        print(
            f"| {noise} | {k} | {gap:.1%} | {_rate(ok, n)} | "
            f"{best} | {statistics.median(rounds):.0f} "
            f"({_quantile(rounds, 0.9)}) | {' / '.join(str(o) for o in outcomes)} | "
            f"{100 * sum(rep[5] for rep in reps) / n:.1f} % | "
            f"{_rate(sum(rep[4] for rep in reps), n)} |"
        )
    print(f"\nrows of ours below 95 %: {misses}")
    return 1 if misses else 0


if __name__ == "__main__":
    sys.exit(main())
