"""Every CPU backend on the embedded models: the gate's verdict, estimate and interval over N tunes.

Each tune is a real, independent run through the public API: ``with_performance_validation(
OneBackendStrategy(make_candidate(name, "cpu")))`` and ``strategy.tune(...)`` on a fresh copy of
the embedded model (build, correctness against eager, interleaved timing, statistical decision,
default ``ProfilingConfig``, 1 % gate). Tunes run round-robin (round 1: every model x backend,
then round 2, ...) so a slow spell of the machine is spread over all candidates. A backend that
cannot run here (a CUDA-only name, a missing extra) is reported ``unavailable`` with its reason,
one that cannot handle a model as a build failure with its reason.

Build seconds come from the library's own events (``phase`` build -> correctness); the worst
mismatch is the result's ``max_abs_error`` and ``budget_used`` (share of the accuracy budget).

Usage: ``python benchmarks/backends.py [--tunes 5] [--models mlp,convnet,transformer]
[--backends eager,compile,...] [--json FILE]``.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import MutableMapping, Sequence
from pathlib import Path
from typing import Any

import structlog
import torch

from aitune_fp.adapters.validation import validation_of, with_performance_validation
from aitune_fp.backends.registry import BACKENDS, backend_names, make_candidate
from aitune_fp.models import MODELS
from aitune_fp.pipeline.strategies import OneBackendStrategy

#: Every registry name that runs on CPU, in registry order.
CPU_BACKENDS = tuple(n for n in backend_names() if "cpu" in BACKENDS[n].devices)


class PhaseClock:
    """A structlog processor that notes when each candidate enters each phase (perf_counter)."""

    def __init__(self) -> None:
        self.times: dict[tuple[str, str], float] = {}

    def __call__(self, logger: Any, method: str, event: MutableMapping[str, Any]) -> Any:
        name = str(event.get("event", ""))
        who = str(event.get("backend_description", ""))
        if name.endswith(".phase"):
            self.times[(who, str(event.get("phase")))] = time.perf_counter()
        elif name.endswith(".candidate_failed"):
            self.times[(who, "failed")] = time.perf_counter()
        raise structlog.DropEvent

    def build_seconds(self, who: str) -> float | None:
        start = self.times.get((who, "build"))
        end = self.times.get((who, "correctness"), self.times.get((who, "failed")))
        return None if start is None or end is None else end - start


def one_tune(model_name: str, backend_name: str, cache: Path) -> dict[str, Any]:
    """One real tune of one backend on one embedded model; its figures as a dict."""
    clock = PhaseClock()
    structlog.configure(processors=[clock])
    model = MODELS[model_name]()
    backend = make_candidate(backend_name, "cpu")
    strategy = with_performance_validation(OneBackendStrategy(backend))
    start = time.perf_counter()
    strategy.tune(model.module, model.name, model.graph_spec, [model.sample], "cpu", cache)
    wall = time.perf_counter() - start
    report = validation_of(strategy).last_report
    assert report is not None
    row: dict[str, Any] = {
        "model": model_name,
        "backend": backend_name,
        "description": backend.describe(),
        "wall_s": wall,
        "build_s": clock.build_seconds(backend.describe()),
    }
    if report.results:
        r = report.results[-1]
        row.update(
            outcome=r.verdict,
            estimate=r.estimate,
            ci_low=r.ci_low,
            ci_high=r.ci_high,
            n_pairs=r.n_candidate,
            max_abs_error=r.max_abs_error,
            budget_used=r.budget_used,
        )
    elif report.candidate_failures:
        f = report.candidate_failures[-1]
        row.update(outcome=f.stage, reason=f.reason)
    else:
        row.update(outcome="error", reason=report.baseline_error or "no result")
    return row


def _fmt(value: float | None, spec: str = ".2f") -> str:
    return "—" if value is None else format(value, spec)


def summarize(rows: Sequence[dict[str, Any]], tunes: int) -> str:
    """A Markdown table: one line per model x backend over its tunes."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = collections.defaultdict(list)
    for row in rows:
        groups[(row["model"], row["backend"])].append(row)
    lines = [
        "| model | backend | verdicts | median estimate (range) | median interval "
        "| build s (median) | worst abs error | budget used (max) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for (model, backend), group in groups.items():
        counts = collections.Counter(r["outcome"] for r in group)
        verdicts = ", ".join(f"{k} {v}/{len(group)}" for k, v in counts.most_common())
        measured = [r for r in group if r.get("estimate") is not None]
        builds = [r["build_s"] for r in group if r.get("build_s") is not None]
        build = _fmt(statistics.median(builds), ".1f") if builds else "—"
        if measured:
            est = [r["estimate"] for r in measured]
            lows = [r["ci_low"] for r in measured]
            highs = [r["ci_high"] for r in measured if r["ci_high"] is not None]
            estimate = f"{statistics.median(est):.2f}x ({min(est):.2f}–{max(est):.2f})"
            high = f"{statistics.median(highs):.3f}" if len(highs) == len(measured) else "∞"
            interval = f"[{statistics.median(lows):.3f}, {high}]"
            errors = [r["max_abs_error"] for r in measured if r.get("max_abs_error") is not None]
            used = [r["budget_used"] for r in measured if r.get("budget_used") is not None]
            worst = f"{max(errors):.2g}" if errors else "—"
            budget = f"{max(used):.0%}" if used else "—"
        else:
            reason = group[-1].get("reason", "")
            estimate, interval, worst, budget = (f"— ({reason[:120]})", "—", "—", "—")
        lines.append(
            f"| {model} | `{backend}` | {verdicts} | {estimate} | {interval} | {build} "
            f"| {worst} | {budget} |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tunes", type=int, default=5, help="tunes per model x backend (5)")
    parser.add_argument("--models", default=",".join(MODELS), help="comma list of models")
    parser.add_argument(
        "--backends", default=",".join(CPU_BACKENDS), help="comma list of registry names"
    )
    parser.add_argument("--json", help="write every tune's figures to this file")
    args = parser.parse_args(argv)
    models = [m for m in args.models.split(",") if m]
    names = [n for n in args.backends.split(",") if n]
    for m in models:
        if m not in MODELS:
            parser.error(f"--models: unknown model {m!r}; choose from {', '.join(MODELS)}")
    for n in names:
        if n not in BACKENDS:
            parser.error(f"--backends: unknown backend {n!r}; choose from {', '.join(BACKENDS)}")
    print(
        f"# {args.tunes} tunes x {len(models)} models x {len(names)} backends; torch "
        f"{torch.__version__}, {torch.get_num_threads()} threads, {os.cpu_count()} CPUs",
        file=sys.stderr,
    )
    rows: list[dict[str, Any]] = []
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="aitune_fp-bench-") as tmp:
        for round_no in range(1, args.tunes + 1):
            for model in models:
                for name in names:
                    row = one_tune(model, name, Path(tmp) / f"{model}-{round_no}")
                    row["round"] = round_no
                    rows.append(row)
                    print(
                        f"round {round_no} {model} {name}: {row['outcome']} "
                        f"{_fmt(row.get('estimate'))} [{_fmt(row.get('ci_low'), '.3f')}, "
                        f"{_fmt(row.get('ci_high'), '.3f')}] build {_fmt(row['build_s'], '.1f')}"
                        f" s, wall {row['wall_s']:.1f} s",
                        file=sys.stderr,
                        flush=True,
                    )
    print(
        f"# {len(rows)} tunes in {time.perf_counter() - started:.0f} s, "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}"
    )
    print(summarize(rows, args.tunes))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
