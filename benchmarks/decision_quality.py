"""Decision quality on real timings: how often each rule accepts candidates of known true speedup.

Baseline: an eager MLP (512 -> 2048 -> 2048 -> 512, GELU, fp32, eval, no_grad) at batch 64 with a
fixed intra-op thread count. Candidates with the same input and output shapes:

- ``A/A``: a copy of the baseline (true speedup 1.00x);
- ``0.90x``, ``0.97x``: the baseline plus a fixed extra matmul sized to ~11 % / ~3 % of its FLOPs;
- ``1.10x``, ``1.50x``, ``2.00x``: narrower MLPs with ~1/s of the baseline's FLOPs;
- ``1.03x``: the 1.10x MLP plus extra work sized to bring it to ~1.03x (see ``MIXED_FROM``).

Labels are nominal; each case's true speedup is measured once with a long interleaved reference
run (``--reference-pairs``, median of per-pair ratios) and printed beside the decisions. Then
every (case, mode, repeat) decision runs in one shuffled order so all modes share the machine's
conditions. ``statistical`` is today's rule, ``statistical-v1`` the rule before issue 14 and
``point`` reproduces AITune: the baseline is measured once per decision, before the
candidate. Output: a Markdown table (``--out FILE`` writes it) and the statistical mode's targets.

Usage: ``python benchmarks/decision_quality.py [--repeats 20] [--reference-pairs 400] [--quick]``.
"""

from __future__ import annotations

import argparse
import collections
import copy
import math
import os
import random
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import torch
from torch import nn

from aitune_fp import PerformanceValidationResult as Measurement
from aitune_fp.core.config import ProfilingConfig
from aitune_fp.inputs import Sample
from aitune_fp.measure import measure_baseline_point, measure_speedup
from aitune_fp.profiling import InterleavedRun

#: (label, kind, nominal speedup): kind "same", "extra" (slower) or "narrow" (faster).
CASES: tuple[tuple[str, str, float], ...] = (
    ("A/A", "same", 1.0),
    ("0.90x", "extra", 0.90),
    ("0.97x", "extra", 0.97),
    ("1.02x", "mixed", 1.02),
    ("1.03x", "mixed", 1.03),
    ("1.10x", "narrow", 1.10),
    ("1.50x", "narrow", 1.50),
    ("2.00x", "narrow", 2.00),
)
#: mode -> ProfilingConfig fields: the v2 rule (today's defaults: futility stop, sixth look,
#: guards), the v1 rule it replaced (symmetric, five looks, no guards), and AITune's point rule.
MODES: dict[str, dict[str, object]] = {
    "statistical": {},
    "statistical-v1": {
        "looks": (10, 20, 40, 80, 160),
        "futility_margin_percent": 0.0,
        "futility_error": 0.05,
        "guard_serial_correlation": False,
        "guard_shift": False,
    },
    "point": {"decision": "point"},
}
#: A "mixed" case starts from the narrow MLP of this speedup and adds wasted work to slow it to
#: its nominal speedup: narrowing alone cannot make ~1.03x, since any hidden width other than the
#: power of two 2048 already runs ~1.08x faster on this machine (measured; likely cache-set
#: aliasing of the 2048-float rows), far more than its FLOP ratio says.
MIXED_FROM = 1.10


class MLP(nn.Module):
    """``d_in -> hidden -> hidden -> d_in`` with GELU."""

    def __init__(self, d_in: int, hidden: int) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(d_in, hidden),
            nn.GELU(),
            nn.Linear(hidden, hidden),
            nn.GELU(),
            nn.Linear(hidden, d_in),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class WithExtraWork(nn.Module):
    """The baseline's computation plus a wasted matmul of ``extra`` output columns."""

    def __init__(self, base: nn.Module, d_in: int, extra: int) -> None:
        super().__init__()
        self.base = base
        self.waste = nn.Linear(d_in, extra, bias=False)
        self.sink = torch.zeros(())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.base(x)
        self.sink = self.waste(x).sum()  # kept so the work cannot be skipped
        return out


def macs(d_in: int, hidden: int) -> int:
    """Multiply-accumulates per row of the MLP."""
    return 2 * d_in * hidden + hidden * hidden


def hidden_for(d_in: int, hidden: int, speedup: float, multiple: int = 32) -> int:
    """Hidden width whose MLP does about 1/speedup of the baseline's MACs.

    Rounded to a multiple of ``multiple`` so the GEMMs keep regular shapes (odd widths can pick
    other kernels and move the true speedup away from the FLOP ratio).
    """
    target = macs(d_in, hidden) / speedup
    exact = (-2 * d_in + math.sqrt(4 * d_in * d_in + 4 * target)) / 2
    return max(multiple, multiple * round(exact / multiple))


def build_candidate(
    kind: str, nominal: float, base: nn.Module, d_in: int, hidden: int
) -> nn.Module:
    """The candidate module of one case (eval mode, fixed seed)."""
    torch.manual_seed(1)
    if kind == "same":
        return copy.deepcopy(base).eval()
    if kind == "extra":
        extra = max(1, round((1.0 / nominal - 1.0) * macs(d_in, hidden) / d_in))
        return WithExtraWork(base, d_in, extra).eval()
    if kind == "mixed":
        narrow = MLP(d_in, hidden_for(d_in, hidden, MIXED_FROM))
        extra = max(1, round((1.0 / nominal - 1.0 / MIXED_FROM) * macs(d_in, hidden) / d_in))
        return WithExtraWork(narrow, d_in, extra).eval()
    return MLP(d_in, hidden_for(d_in, hidden, nominal)).eval()


def reference_speedup(
    base: nn.Module, cand: nn.Module, batch: Sample, pairs: int, threads: int
) -> tuple[float, float]:
    """True speedup of a case (median of eager/candidate per-pair ratios over a long interleaved
    run) and the robust spread of the log ratios (1.4826 * MAD), the noise a decision faces."""
    with InterleavedRun(base, cand, batch, threads=threads) as run:
        run.warm_up(window=5, tolerance=0.10, max_calls=30)
        run.extend(pairs)
        timings = run.timings()
    d = [math.log(b / c) for b, c in zip(timings.baseline_s, timings.candidate_s, strict=True)]
    centre = statistics.median(d)
    return math.exp(centre), 1.4826 * statistics.median(abs(x - centre) for x in d)


def decide(
    mode: str, base: nn.Module, cand: nn.Module, batch: Sample, size: int, threads: int, pct: float
) -> tuple[Measurement, float]:
    """One decision; returns it and its wall seconds (point: baseline measured now, once)."""
    start = time.perf_counter()
    config = ProfilingConfig(threads=threads, **MODES[mode])  # type: ignore[arg-type]
    if config.decision == "point":
        _, base_lat = measure_baseline_point(base, batch, size, config)
        m = measure_speedup(base, cand, batch, size, config, pct, baseline_latencies=base_lat)
    else:
        m = measure_speedup(base, cand, batch, size, config, pct)
    return m.result, time.perf_counter() - start


def _pct(k: int, n: int) -> str:
    return f"{100.0 * k / n:.0f} %" if n else "-"


def table(
    rows: dict[tuple[str, str], list[tuple[Measurement, float]]], truth: dict[str, float]
) -> str:
    """Markdown table: per case and mode, accept/reject/inconclusive rates, calls, wall time."""
    lines = [
        "| case | true speedup | mode | n | accepted | rejected | inconclusive | median calls/arm | max calls/arm | median wall s | flagged |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for label, _, _ in CASES:
        for mode in MODES:
            results = rows.get((label, mode), [])
            n = len(results)
            verdicts = [m.verdict for m, _ in results]
            calls = [m.n_candidate for m, _ in results] or [0]
            walls = [w for _, w in results] or [0.0]
            lines.append(
                f"| {label} | {truth[label]:.3f}x | {mode} | {n} | {_pct(verdicts.count('faster'), n)} "
                f"| {_pct(verdicts.count('not_faster'), n)} | {_pct(verdicts.count('inconclusive'), n)} "
                f"| {statistics.median(calls):g} | {max(calls)} | {statistics.median(walls):.3f} "
                f"| {sum(bool(m.flags) for m, _ in results)} |"
            )
    return "\n".join(lines)


def targets(
    rows: dict[tuple[str, str], list[tuple[Measurement, float]]], truth: dict[str, float]
) -> list[str]:
    """The statistical mode's targets (issues 3 and 14), each with its measured figure and PASS/MISS."""

    def stat(label: str) -> list[Measurement]:
        return [m for m, _ in rows.get((label, "statistical"), [])]

    def rate(labels: Sequence[str]) -> tuple[int, int]:
        ms = [m for label in labels for m in stat(label)]
        return sum(m.passed for m in ms), len(ms)

    out = []
    k, n = rate(["A/A", "0.90x", "0.97x"])
    out.append(
        f"A/A + slower accepted <= 2 %: {_pct(k, n)} ({k}/{n}) {'PASS' if k <= 0.02 * n else 'MISS'}"
    )
    for labels, floor in ((["1.10x", "1.50x", "2.00x"], 0.98), (["1.03x"], 0.90)):
        k, n = rate(labels)
        ok = n > 0 and k >= floor * n
        out.append(
            f"{'+'.join(labels)} accepted >= {floor:.0%}: {_pct(k, n)} ({k}/{n}) {'PASS' if ok else 'MISS'}"
        )
    clear = [label for label, _, nominal in CASES if nominal <= 0.9 or nominal >= 1.5]
    calls = [m.n_candidate for label in clear for m in stat(label)]
    worst = max(calls, default=0)
    out.append(
        f"clear cases ({', '.join(clear)}) decided in <= 20 calls/arm: "
        f"max {worst} {'PASS' if worst <= 20 else 'MISS'}"
    )
    aa = [m.n_candidate for m in stat("A/A")]
    med = statistics.median(aa) if aa else 0
    out.append(f"A/A median pairs <= 60: {med:g} {'PASS' if med <= 60 else 'MISS'}")
    open_ = sum(m.verdict == "inconclusive" for m in stat("A/A"))
    out.append(
        f"A/A inconclusive <= 10 %: {_pct(open_, len(aa))} ({open_}/{len(aa)}) "
        f"{'PASS' if open_ <= 0.10 * len(aa) else 'MISS'}"
    )
    k, n = rate(["1.02x"])
    out.append(f"1.02x (inside the futility margin) accepted: {_pct(k, n)} ({k}/{n}), no target")
    return out


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--repeats", type=int, default=20, help="decisions per case and mode")
    parser.add_argument("--reference-pairs", type=int, default=400, help="pairs per reference run")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2, help="intra-op threads, both arms")
    parser.add_argument(
        "--threshold", type=float, default=1.0, help="min speedup threshold, percent"
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the shuffled run order")
    parser.add_argument(
        "--quick", action="store_true", help="smoke test: tiny model, 1 thread, 2 repeats"
    )
    parser.add_argument("--out", type=Path, help="write the Markdown table here")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    d_in, hidden, size = 512, 2048, args.batch
    repeats, ref_pairs = args.repeats, args.reference_pairs
    if args.quick:
        d_in, hidden, size, repeats, ref_pairs = 64, 256, 16, 2, 30
        args.threads = 1
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    base = MLP(d_in, hidden).eval()
    batch = Sample((torch.randn(size, d_in),))
    cands = {label: build_candidate(kind, s, base, d_in, hidden) for label, kind, s in CASES}

    started = time.perf_counter()
    load_at_start = os.getloadavg()[0]
    truth: dict[str, float] = {}
    for label, _, _ in CASES:
        truth[label], spread = reference_speedup(base, cands[label], batch, ref_pairs, args.threads)
        print(
            f"reference {label}: {truth[label]:.3f}x, log-ratio spread {spread:.3f} "
            f"({ref_pairs} pairs)",
            file=sys.stderr,
        )

    plan = [(label, mode) for label, _, _ in CASES for mode in MODES for _ in range(repeats)]
    random.Random(args.seed).shuffle(plan)
    rows: dict[tuple[str, str], list[tuple[Measurement, float]]] = {}
    for label, mode in plan:
        result = decide(mode, base, cands[label], batch, size, args.threads, args.threshold)
        rows.setdefault((label, mode), []).append(result)

    flags = collections.Counter(
        flag.split("_after_")[0]
        for results in rows.values()
        for m, _ in results
        for flag in m.flags
    )
    print(f"flags over all decisions: {dict(flags)}", file=sys.stderr)
    header = (
        f"MLP {d_in}->{hidden}->{hidden}->{d_in} GELU fp32, batch {size}, {args.threads} threads, "
        f"threshold {args.threshold:g} %, {repeats} decisions per case and mode, "
        f"reference {ref_pairs} pairs, torch {torch.__version__}, "
        f"{time.perf_counter() - started:.0f} s in all, load average at the start "
        f"{load_at_start:.2f} and at the end {os.getloadavg()[0]:.2f}"
    )
    text = "\n".join(
        [header, "", table(rows, truth), "", *(f"- {t}" for t in targets(rows, truth))]
    )
    print(text)
    if args.out is not None:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
