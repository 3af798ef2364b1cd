"""The sequential decision on synthetic paired timings: v1, v2 (futility stop) and v3 side by side.

Each simulated decision draws paired log ratios ``ln(eager/candidate) = ln(true) + e_t`` with
heavy-tailed noise (Student t, 3 degrees of freedom, scaled to ``--noise`` standard deviation),
optionally AR(1)-correlated (``phi``), shifted mid-run, wandering (a slow random walk of the
ratio), drifting (a linear trend), with a tail-heavy candidate (10 % of its calls 3x slower:
its typical call and its throughput disagree), with each arm's own skewed or bimodal noise, or
under periodic interference in phase with the fixed ABBA / BAAB order (v1 and v2 run that
order, v3 and v3.1 draw each quad's orientation), and runs the group-sequential loop of
:func:`aitune_fp.core.stats.decide_at_look` over the planned looks. Per case and rule it prints
accept / not_faster / inconclusive rates and the median and p90 pairs used: the computed side of
issue 14 (the real-timing side is ``decision_quality.py``).

"wrong" counts the accepts made while the true ratio at the deciding pair (the regime the user
gets) was at most the required speedup: every accept at a constant 1.01x, only some under a
wandering, drifting or stepping ratio. Runs are spread over ``--jobs`` processes (each row keeps
its own seeded generator, so the table does not depend on ``--jobs``).

Usage: ``python benchmarks/decision_engine_sim.py [--runs 400] [--noise 0.06] [--seed 1]
[--rules v3 v3.1] [--jobs 2] [--cases 1.01x drift]``.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor

import numpy as np

from aitune_fp.core.stats import decide_at_look

#: label -> (true speedup, AR(1) phi, (shift pair, speedup after), extra): extra is "" or one of
#: "wander" (random walk of the log ratio, step sd 0.2 %), "drift" (the ratio falls 2 % over
#: 320 pairs), "drift1" (1 % over 320 pairs), "skew" (10 % of the candidate's calls 3x slower),
#: "skewed" / "bimodal" (each arm's own skewed or two-mode noise, the same law on both arms, in
#: place of the t3 ratio noise), "periodic" (a 3 % slowdown of whichever call lands on the
#: slots where the fixed ABBA / BAAB order puts eager: interference in phase with that order).
CASES: tuple[tuple[str, float, float, tuple[int, float] | None, str], ...] = (
    ("A/A 1.00x", 1.00, 0.0, None, ""),
    ("0.97x", 0.97, 0.0, None, ""),
    ("threshold 1.01x", 1.01, 0.0, None, ""),
    ("1.02x (inside margin)", 1.02, 0.0, None, ""),
    ("1.03x", 1.03, 0.0, None, ""),
    ("1.10x", 1.10, 0.0, None, ""),
    ("A/A, AR(1) phi=0.2", 1.00, 0.2, None, ""),
    ("1.01x, AR(1) phi=0.2", 1.01, 0.2, None, ""),
    ("1.01x, AR(1) phi=0.5", 1.01, 0.5, None, ""),
    ("1.01x, AR(1) phi=0.8", 1.01, 0.8, None, ""),
    ("A/A, AR(1) phi=0.5", 1.00, 0.5, None, ""),
    ("1.04x for 40 pairs, then 1.01x", 1.04, 0.0, (40, 1.01), ""),
    ("1.04x for 160 pairs, then 1.01x", 1.04, 0.0, (160, 1.01), ""),
    ("1.03x for 20 pairs, then 1.00x", 1.03, 0.0, (20, 1.00), ""),
    ("1.01x, wander", 1.01, 0.0, None, "wander"),
    ("1.02x falling to 1.00x, drift", 1.02, 0.0, None, "drift"),
    ("1.015x falling to 1.005x, drift", 1.015, 0.0, None, "drift1"),
    ("typical 1.05x, 10 % of calls 3x slower", 1.05, 0.0, None, "skew"),
    ("A/A, skewed noise", 1.00, 0.0, None, "skewed"),
    ("1.01x, skewed noise", 1.01, 0.0, None, "skewed"),
    ("A/A, bimodal noise", 1.00, 0.0, None, "bimodal"),
    ("1.01x, bimodal noise", 1.01, 0.0, None, "bimodal"),
    ("A/A, periodic interference", 1.00, 0.0, None, "periodic"),
    ("1.01x, periodic interference", 1.01, 0.0, None, "periodic"),
)

#: the fixed order's eager slots, 8 slots a period (A B B A | B A A B): the "periodic" case's
#: interference lands there, so under the fixed order it always slows eager.
_IN_PHASE = np.array([1, 0, 0, 1, 0, 1, 1, 0], dtype=float)
_PERIODIC_AMPLITUDE = 0.03

_LOOKS = (10, 20, 40, 80, 160, 320)
#: v2: the futility stop and the independence guards, quads in the fixed ABBA / BAAB order.
_V2: dict[str, object] = {
    "order": "fixed",
    "futility_margin_percent": 1.0,
    "futility_error": 0.20,
    "guard_serial_correlation": True,
    "guard_shift": True,
}
#: v3: v2 plus the audit's remedies (always widen, throughput-consistent, late spending,
#: quad orientations drawn at random); v3.1 adds the block guard.
_V3: dict[str, object] = {
    **_V2,
    "order": "random",
    "always_widen": True,
    "throughput_consistent": True,
    "spend": True,
    "block_guard": False,
}

#: name -> (looks, decide_at_look keyword arguments)
RULES: dict[str, tuple[tuple[int, ...], dict[str, object]]] = {
    "v1 symmetric": ((10, 20, 40, 80, 160), {"order": "fixed"}),
    "v2 futility": (_LOOKS, _V2),
    "v3": (_LOOKS, _V3),
    "v3.1": (_LOOKS, {**_V3, "block_guard": True}),
}


def _noise(rng: np.random.Generator, n: int, sd: float, phi: float) -> np.ndarray:
    """Heavy-tailed noise of standard deviation ``sd``, AR(1) with coefficient ``phi``."""
    t = rng.standard_t(3, size=n) / math.sqrt(3.0)  # unit variance
    if phi == 0.0:
        return sd * t
    out = np.empty(n)
    out[0] = t[0]
    scale = math.sqrt(1.0 - phi * phi)
    for i in range(1, n):
        out[i] = phi * out[i - 1] + scale * t[i]
    return sd * out


def _arm_noise(rng: np.random.Generator, n: int, sd: float, law: str) -> np.ndarray:
    """One arm's log-time noise: "skewed" (a shifted exponential, mean 0) or "bimodal" (20 % of
    calls 10 % slower, 1.5 % jitter). Both arms draw the same law, so the typical call and the
    throughput ratio both equal the true speedup; "skewed" scales so the ratio's sd is ``sd``."""
    if law == "skewed":
        return (sd / math.sqrt(2.0)) * (rng.exponential(1.0, size=n) - 1.0)
    return math.log(1.10) * (rng.random(n) < 0.20) + rng.normal(0.0, 0.015, size=n)


def _baseline_first(n: int, order: str, rng: np.random.Generator) -> np.ndarray:
    """Whether each pair times eager first: quads ABBA / BAAB, alternating or drawn at random."""
    quads = (n + 1) // 2
    abba = np.arange(quads) % 2 == 0 if order == "fixed" else rng.random(quads) < 0.5
    first = np.repeat(abba, 2)[:n]
    first[1::2] = ~first[1::2]
    return first


def _one(
    rng: np.random.Generator,
    true: float,
    phi: float,
    shift: tuple[int, float] | None,
    extra: str,
    looks: Sequence[int],
    options: dict[str, object],
    sd: float,
) -> tuple[str, int, bool]:
    n = looks[-1]
    level = np.full(n, math.log(true))
    if shift is not None:
        level[shift[0] :] = math.log(shift[1])
    if extra == "wander":
        level += np.cumsum(rng.normal(0.0, 0.002, size=n))
    elif extra == "drift":
        level += np.linspace(0.0, math.log(1.00 / 1.02), n)
    elif extra == "drift1":
        level += np.linspace(0.0, math.log(1.005 / 1.015), n)
    if extra in ("skewed", "bimodal"):
        d = level + _arm_noise(rng, n, sd, extra) - _arm_noise(rng, n, sd, extra)
    else:
        d = level + _noise(rng, n, sd, phi)
    base = 0.01 * np.exp(rng.normal(0.0, 0.03, size=n))
    cand = base * np.exp(-d)
    if extra == "periodic":  # each call slowed by the interference in its time slot
        first = _baseline_first(n, str(options.get("order", "random")), rng)
        pair_slot = 2 * np.arange(n)
        eager_slot = np.where(first, pair_slot, pair_slot + 1)
        cand_slot = np.where(first, pair_slot + 1, pair_slot)
        base = base * (1.0 + _PERIODIC_AMPLITUDE * _IN_PHASE[eager_slot % 8])
        cand = cand * (1.0 + _PERIODIC_AMPLITUDE * _IN_PHASE[cand_slot % 8])
    if extra == "skew":
        cand = np.where(rng.random(n) < 0.10, cand * 3.0, cand)
    kwargs = {k: v for k, v in options.items() if k not in ("spend", "order")}
    verdict, used = "inconclusive", n
    for k, look in enumerate(looks, start=1):
        if options.get("spend"):
            kwargs["look"] = k
        decision = decide_at_look(
            base[:look].tolist(),
            cand[:look].tolist(),
            1.0,
            confidence=0.95,
            n_looks=len(looks),
            **kwargs,  # type: ignore[arg-type]
        )
        verdict, used = decision.verdict, look
        if verdict != "inconclusive":
            break
    wrong = verdict == "faster" and math.exp(level[used - 1]) <= 1.01 + 1e-12
    return verdict, used, wrong


def _row(
    job: tuple[str, float, float, tuple[int, float] | None, str, str, int, int, float],
) -> str:
    """One table row: ``runs`` decisions of one case under one rule, its own seeded generator."""
    label, true, phi, shift, extra, name, runs_n, seed, sd = job
    looks, options = RULES[name]
    rng = np.random.default_rng(seed)
    runs = [_one(rng, true, phi, shift, extra, looks, options, sd) for _ in range(runs_n)]
    verdicts = [v for v, _, _ in runs]
    pairs = sorted(p for _, p, _ in runs)
    rate = {v: verdicts.count(v) / len(runs) for v in ("faster", "not_faster", "inconclusive")}
    wrong = sum(w for _, _, w in runs) / len(runs)
    p90 = pairs[min(len(pairs) - 1, int(0.9 * len(pairs)))]
    se = math.sqrt(rate["faster"] * (1.0 - rate["faster"]) / len(runs))
    se_wrong = math.sqrt(wrong * (1.0 - wrong) / len(runs))
    return (
        f"| {label} | {name} | {rate['faster']:.1%} ± {se:.1%} | {wrong:.1%} ± {se_wrong:.1%} | "
        f"{rate['not_faster']:.1%} | {rate['inconclusive']:.1%} | {statistics.mean(pairs):.1f} | "
        f"{statistics.median(pairs):g} | {p90} |"
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Run every case under every rule and print one Markdown table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=400)
    parser.add_argument("--noise", type=float, default=0.06)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--rules", nargs="*", default=[], help="v1, v2, v3, v3.1 (default: all)")
    parser.add_argument("--jobs", type=int, default=1, help="worker processes")
    parser.add_argument(
        "--cases", nargs="*", default=[], help="keep the cases whose label contains one of these"
    )
    args = parser.parse_args(argv)
    print(f"{args.runs} simulated decisions per row, paired noise sd {args.noise:.0%} (t3)\n")
    print(
        "| case | rule | accept (± MC s.e.) | wrong accept (± s.e.) | not_faster | inconclusive "
        "| mean pairs | median pairs | p90 pairs |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    jobs = [
        (label, true, phi, shift, extra, name, args.runs, args.seed, args.noise)
        for label, true, phi, shift, extra in CASES
        for name in RULES
        if not args.rules or name.split()[0] in args.rules
        if not args.cases or any(part in label for part in args.cases)
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
