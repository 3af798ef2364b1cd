"""A model zoo: ``aitune-fp tune`` on real architectures (random weights), verdicts and accuracy.

Each model is tuned in its own ``aitune-fp tune`` process with ``--calibrate-noise`` and
``--format json --json-log``; the table gives, per candidate, the verdict, the speedup with its
interval, and the accuracy criteria the correctness check measured (the ``correctness_checked``
event: the worst value of each criterion over the recorded and held-out inputs, against its
budget), or the failure and its reason. The machine's load is stated.

Models: ``examples/resnet18.py:factory`` (ResNet-18, 11.7 M parameters, 2 images of 224 x 224),
``examples/gpt2_tiny.py:factory`` (a 2-layer GPT-2 with its cache on, 2 x 16 tokens; needs the
``hf`` extra) and the embedded ``transformer``.

Usage: python benchmarks/zoo.py [--backends eager-bf16,int8-dynamic] [--threads 1]
[--max-seconds 20] [--models examples/gpt2_tiny.py:factory,transformer] [--out table.md]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
MODELS = ("examples/resnet18.py:factory", "examples/gpt2_tiny.py:factory", "transformer")
#: Short names for the table.
LABELS = {
    "examples/resnet18.py:factory": "ResNet-18",
    "examples/gpt2_tiny.py:factory": "GPT-2 (tiny, cache on)",
    "transformer": "transformer (embedded)",
}


def tune(model: str, args: argparse.Namespace, folder: Path) -> dict[str, Any]:
    """One ``aitune-fp tune`` run: its JSON document and its events."""
    log = folder / "events.jsonl"
    command = [
        sys.executable,
        "-m",
        "aitune_fp",
        "tune",
        "--model",
        model,
        "--backends",
        args.backends,
        "--threads",
        str(args.threads),
        "--max-seconds",
        str(args.max_seconds),
        "--selection-seconds",
        str(args.max_seconds),
        "--calibrate-noise",
        "--cache-dir",
        str(folder / "cache"),
        "--json-log",
        str(log),
        "--format",
        "json",
        "-q",
    ]
    start = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    if done.returncode != 0 or not done.stdout.strip():
        return {"model": model, "error": done.stderr.strip().splitlines()[-1:], "wall_s": wall}
    events = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    return {"model": model, "doc": json.loads(done.stdout), "events": events, "wall_s": wall}


def _criteria(events: list[dict[str, Any]], description: str) -> str:
    """The worst of each criterion for one candidate (its last correctness check)."""
    checks = [
        e
        for e in events
        if e["event"].endswith(".correctness_checked") and e["backend_description"] == description
    ]
    if not checks:
        return "—"
    found = checks[-1].get("criteria") or []
    if not found:
        worst = checks[-1].get("max_abs_error")
        return f"element-wise; max abs error {worst:.3g}" if worst is not None else "element-wise"
    sign = {"top1_agreement": ">="}
    return "; ".join(
        f"{c['name']} {c['value']:.3g} {sign.get(c['name'], '<=')} {c['budget']:.3g}" for c in found
    )


def _speedup(result: dict[str, Any]) -> str:
    estimate = result.get("estimate")
    if estimate is None:
        return "—"
    low, high = result.get("ci_low"), result.get("ci_high")
    interval = f" [{low:.2f}, {'∞' if high is None else f'{high:.2f}'}]" if low is not None else ""
    return f"{estimate:.2f}x{interval}"


def rows(outcome: dict[str, Any]) -> list[list[str]]:
    """The table rows of one model: measured candidates, then failed ones."""
    label = LABELS.get(outcome["model"], outcome["model"])
    if "doc" not in outcome:
        return [[label, "—", "tune failed", "—", " ".join(outcome["error"])]]
    run, events = outcome["doc"]["run"], outcome["events"]
    found = []
    for r in run["results"]:
        name = r["backend_description"]
        verdict = r.get("verdict") or ("faster" if r["passed"] else "not faster")
        found.append([label, name, verdict, _speedup(r), _criteria(events, name)])
    for f in run["failures"]:
        if f["stage"] == "strategy":
            continue
        reason = f["reason"].replace("|", "\\|")
        reason = reason if len(reason) <= 300 else reason[:297] + "..."
        found.append([label, f["backend_description"], f"failed ({f['stage']})", "—", reason])
    return found


def _load() -> str:
    one, five, _ = os.getloadavg()
    return f"{one:.2f} (1 min), {five:.2f} (5 min)"


def main() -> None:
    """Run the zoo and print (or write) the markdown table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", default="eager-bf16,int8-dynamic")
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--max-seconds", type=float, default=20.0)
    parser.add_argument("--out", help="also write the markdown here")
    args = parser.parse_args()
    lines = [
        f"Backends `{args.backends}`, `--threads {args.threads} --max-seconds {args.max_seconds:g}"
        f" --selection-seconds {args.max_seconds:g} --calibrate-noise`; {os.cpu_count()} cores; "
        f"load average at the start {_load()}.",
        "",
        "| model | backend | verdict | speedup [interval] | accuracy criteria (worst, vs budget) |",
        "|---|---|---|---|---|",
    ]
    notes = []
    with tempfile.TemporaryDirectory(prefix="aitune_fp-zoo-") as tmp:
        for i, model in enumerate(args.models.split(",")):
            folder = Path(tmp) / f"{i:02d}"
            folder.mkdir()
            outcome = tune(model, args, folder)
            lines += ["| " + " | ".join(row) + " |" for row in rows(outcome)]
            label = LABELS.get(model, model)
            noise = None
            for e in outcome.get("events", []):
                if e["event"].endswith(".baseline_measured"):
                    noise = e.get("noise_floor_rel_l2", e.get("noise_floor_note"))
            floor = f"{noise:.2g}" if isinstance(noise, float) else str(noise)
            notes.append(
                f"- {label}: tune took {outcome['wall_s']:.0f} s; eager's noise floor "
                f"(float32 vs float64, rel L2): {floor}"
            )
    lines += ["", *notes, f"- load average at the end {_load()}"]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
