"""Real runs of the choice among faster candidates on the convnet: head-to-head vs point estimates.

Runs ``aitune-fp tune --model convnet --strategy max-throughput`` with the given candidates
``--runs`` times in the statistical mode (head-to-head selection) and ``--runs`` times with
``--decision point`` (AITune's rule: the best point estimate), each as its own process, and
prints a markdown table: which candidate each run kept, the head-to-head's intervals and
eliminations, and the speedups each rule saw. Usage::

    python benchmarks/selection_real.py --runs 5 --threads 1
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from typing import Any

BACKENDS = "compile,aot-inductor,channels-last,compile-max-autotune"


def _tune(args: argparse.Namespace, decision: str, cache_dir: str) -> dict[str, Any]:
    cmd = [
        sys.executable,
        "-m",
        "aitune_fp",
        "tune",
        "--model",
        args.model,
        "--backends",
        args.backends,
        "--strategy",
        "max-throughput",
        "--decision",
        decision,
        "--threads",
        str(args.threads),
        "--cache-dir",
        cache_dir,
        "--format",
        "json",
        "-q",
    ]
    if decision == "statistical":
        cmd += [
            "--max-seconds",
            str(args.max_seconds),
            "--selection-seconds",
            str(args.max_seconds),
        ]
    start = time.monotonic()
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        return {"error": done.stderr.strip().splitlines()[-1:], "wall_s": time.monotonic() - start}
    doc = json.loads(done.stdout)
    doc["wall_s"] = time.monotonic() - start
    return doc


def _passed(run: dict[str, Any]) -> str:
    rows = [r for r in run["results"] if r["passed"]]
    return ", ".join(
        f"{r['backend_description']} {r.get('estimate') or r['speedup']:.2f}x" for r in rows
    )


def _selection(run: dict[str, Any]) -> str:
    sel = run.get("selection")
    if not sel:
        return "—"
    lost = "; ".join(
        f"{e['name']} lost to {e['lost_to']} {e['ratio']:.3f}x [{e['low']:.3f}, "
        f"{'inf' if e['high'] is None else format(e['high'], '.3f')}]"
        for e in sel["eliminated"]
    )
    pairs = "; ".join(
        f"{p['first']} vs {p['second']} {p['ratio']:.3f}x [{p['low']:.3f}, "
        f"{'inf' if p['high'] is None else format(p['high'], '.3f')}]"
        for p in sel["pairs"]
    )
    return f"{sel['outcome']} after {sel['rounds']} rounds; {lost or 'none eliminated'}; {pairs}"


def main() -> None:
    """Run the tunes and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--model", default="convnet")
    parser.add_argument("--backends", default=BACKENDS)
    parser.add_argument("--max-seconds", type=float, default=20.0)
    args = parser.parse_args()
    cache = tempfile.mkdtemp(prefix="selection-real-")  # builds cached across runs
    print("| run | rule | kept | passed the gate (estimate) | selection | wall s |")
    print("|---|---|---|---|---|---|")
    for i in range(1, args.runs + 1):
        for decision in ("statistical", "point"):
            run = _tune(args, decision, cache)
            if "error" in run:
                print(f"| {i} | {decision} | error: {run['error']} | | | {run['wall_s']:.0f} |")
                continue
            body = run["run"]
            rule = "head-to-head" if decision == "statistical" else "point estimate"
            print(
                f"| {i} | {rule} | {body['selected_backend']} | {_passed(body)} | "
                f"{_selection(body)} | {run['wall_s']:.0f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
