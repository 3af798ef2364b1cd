"""A model zoo: ``aitune-fp tune`` on real architectures (random weights), verdicts checked.

Each model is tuned in its own ``aitune-fp tune`` process with ``--calibrate-noise`` and
``--format json --json-log``; the table gives, per candidate, the verdict, the speedup with its
interval, and the accuracy criteria the correctness check measured (the ``correctness_checked``
event: the worst value of each criterion over the recorded and held-out inputs, against its
budget), or the failure and its reason. The machine's load is stated.

With ``--check`` every candidate is also measured independently after its model's tune, in a
fresh process with the same threads: eager and the candidate built by hand the way the backend
builds it (``torch.autocast("cpu", dtype=torch.bfloat16)`` for ``eager-bf16``,
``torch.ao.quantization.quantize_dynamic`` of Linear/LSTM/GRU to qint8 for ``int8-dynamic``,
``torch.compile`` for ``compile``), both under ``torch.no_grad()``, timed by
``torch.utils.benchmark.Timer.blocked_autorange`` in ``--check-rounds`` interleaved rounds (the
order rotates each round). The independent ratio is the median over rounds of eager's median
over the candidate's median, with the rounds' smallest and largest ratio as its noise; it
agrees with ``faster`` when the smallest ratio is above the gate (1.01 by default) and with
``not_faster`` when the largest is below it. The table then gives, per model, its parameters,
eager's call time (the tune's baseline) and the wall time of its tune.

Models: ``examples/resnet18.py:factory`` (ResNet-18, 11.7 M parameters, 2 images of 224 x 224),
``examples/gpt2_tiny.py:factory`` (a 2-layer GPT-2 with its cache on, 2 x 16 tokens), the
embedded ``transformer``, and from transformers' own classes and configs (the ``hf`` extra):
``examples/bert_base.py`` (BERT-base, 1 x 128 tokens), ``examples/distilbert.py`` (DistilBERT,
1 x 128 tokens), ``examples/vit_b16.py`` (ViT-B/16, 1 image of 224 x 224),
``examples/t5_small_encoder.py`` (T5-small's encoder, 1 x 128 tokens),
``examples/whisper_tiny_encoder.py`` (Whisper-tiny's encoder, 30 s of 80 mel bins) and
``examples/mobilenet_v2.py`` (MobileNetV2, 2 images of 224 x 224).

``--wait-load L`` waits (polling every 30 s, up to ``--wait-minutes``) for the 1-minute load
average to fall below L before the first model, and up to ``--wait-between`` minutes before each
later one; the load at the start and end of each model is in the notes.

Usage: python benchmarks/zoo.py [--backends eager-bf16,int8-dynamic] [--threads 1]
[--max-seconds 20] [--models examples/gpt2_tiny.py:factory,transformer] [--out table.md]
[--backends-for examples/resnet18.py:factory=compile,eager-bf16,int8-dynamic] [--check]
[--check-seconds 2] [--check-rounds 3] [--wait-load 1.2] [--wait-minutes 20] [--wait-between 3]
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from aitune_fp.core.results import flat

ROOT = Path(__file__).resolve().parent.parent
MODELS = (
    "examples/resnet18.py:factory",
    "examples/gpt2_tiny.py:factory",
    "transformer",
    "examples/mobilenet_v2.py:factory",
    "examples/t5_small_encoder.py:factory",
    "examples/distilbert.py:factory",
    "examples/bert_base.py:factory",
    "examples/whisper_tiny_encoder.py:factory",
    "examples/vit_b16.py:factory",
)
#: Short names for the table.
LABELS = {
    "examples/resnet18.py:factory": "ResNet-18",
    "examples/gpt2_tiny.py:factory": "GPT-2 (tiny, cache on)",
    "transformer": "transformer (embedded)",
    "examples/mobilenet_v2.py:factory": "MobileNetV2 (2 x 224²)",
    "examples/t5_small_encoder.py:factory": "T5-small encoder (1 x 128)",
    "examples/distilbert.py:factory": "DistilBERT (1 x 128)",
    "examples/bert_base.py:factory": "BERT-base (1 x 128)",
    "examples/whisper_tiny_encoder.py:factory": "Whisper-tiny encoder (1 x 30 s)",
    "examples/vit_b16.py:factory": "ViT-B/16 (1 x 224²)",
}
#: The gate's futility margin is the tool's; the independent check only needs the gate.
POLL_S = 30.0


def tune(model: str, backends: str, args: argparse.Namespace, folder: Path) -> dict[str, Any]:
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
        backends,
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
    for r in map(flat, run["results"]):
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


# --- the independent check (torch.utils.benchmark, in a fresh process) -------------------------


def _builders() -> dict[str, Callable[[Any, Any], Callable[[], Any]]]:
    """Each checkable backend name: (module, sample) -> a no-argument call, built by hand."""
    import contextlib

    import torch

    def call(module: Any, sample: Any, dtype: Any = None) -> Callable[[], Any]:
        def run() -> Any:
            autocast = (
                torch.autocast("cpu", dtype=dtype)
                if dtype is not None
                else contextlib.nullcontext()
            )
            with torch.no_grad(), autocast:
                return module(*sample.args, **sample.kwargs)

        return run

    def int8(module: Any, sample: Any) -> Callable[[], Any]:
        layers = {torch.nn.Linear, torch.nn.LSTM, torch.nn.GRU}
        quantized = torch.ao.quantization.quantize_dynamic(
            copy.deepcopy(module), layers, dtype=torch.qint8
        )
        return call(quantized, sample)

    def compiled(dtype: Any) -> Callable[[Any, Any], Callable[[], Any]]:
        return lambda module, sample: call(torch.compile(module), sample, dtype)

    return {
        "eager": call,
        "eager-bf16": lambda m, s: call(m, s, torch.bfloat16),
        "int8-dynamic": int8,
        "compile": compiled(None),
        "compile-bf16": compiled(torch.bfloat16),
    }


def check_worker(
    model: str, backends: list[str], threads: int, seconds: float, rounds: int
) -> None:
    """Time eager and each candidate with torch.utils.benchmark; print one JSON object."""
    import torch
    from torch.utils.benchmark import Timer

    from aitune_fp.backends.registry import make_backend
    from aitune_fp.models import load_model

    torch.set_num_threads(threads)
    loaded = load_model(model)
    module, sample = loaded.module.eval(), loaded.sample
    builders = _builders()
    out: dict[str, Any] = {
        "params": sum(p.numel() for p in module.parameters()),
        "candidates": {},
        "skipped": {},
    }
    fns: dict[str, Callable[[], Any]] = {"eager": builders["eager"](module, sample)}
    for name in backends:
        description = make_backend(name, "cpu").describe()
        if name not in builders:
            out["skipped"][description] = f"no hand-built {name} in the check"
            continue
        start = time.perf_counter()
        fns[description] = builders[name](module, sample)
        for _ in range(3):  # warm-up (and, for compile, the build)
            fns[description]()
        out["candidates"][description] = {"name": name, "build_s": time.perf_counter() - start}
    fns["eager"]()
    medians: dict[str, list[float]] = {key: [] for key in fns}
    keys = list(fns)
    for r in range(rounds):
        for key in keys[r % len(keys) :] + keys[: r % len(keys)]:
            timer = Timer(stmt="fn()", globals={"fn": fns[key]}, num_threads=threads)
            medians[key].append(timer.blocked_autorange(min_run_time=seconds).median)
    out["eager_median_s"] = sorted(medians["eager"])[len(medians["eager"]) // 2]
    for description, entry in out["candidates"].items():
        ratios = sorted(e / c for e, c in zip(medians["eager"], medians[description], strict=True))
        entry.update(
            ratio=ratios[len(ratios) // 2],
            low=ratios[0],
            high=ratios[-1],
            candidate_medians_s=medians[description],
        )
    out["eager_medians_s"] = medians["eager"]
    print(json.dumps(out))


def check(model: str, backends: str, args: argparse.Namespace) -> dict[str, Any]:
    """Run :func:`check_worker` in a fresh process (threads set before torch loads)."""
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), MKL_NUM_THREADS=str(args.threads))
    command = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--check-worker",
        model,
        "--backends",
        backends,
        "--threads",
        str(args.threads),
        "--check-seconds",
        str(args.check_seconds),
        "--check-rounds",
        str(args.check_rounds),
    ]
    start = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    if done.returncode != 0 or not done.stdout.strip():
        return {"error": " ".join(done.stderr.strip().splitlines()[-1:]), "wall_s": wall}
    found: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    found["wall_s"] = wall
    return found


def _agrees(verdict: str, gate: float, entry: dict[str, Any] | None) -> str:
    """Whether the independent ratio's noise band lies on the verdict's side of the gate."""
    if entry is None:
        return "—"
    if entry["low"] > gate:
        independent = "faster"
    elif entry["high"] < gate:
        independent = "not_faster"
    else:
        return f"within noise of {gate:g}"
    if verdict not in ("faster", "not_faster"):
        return f"no verdict (independent: {independent})"
    return "yes" if verdict == independent else "**no**"


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.0f} ms" if seconds >= 0.01 else f"{seconds * 1e3:.2f} ms"


def checked_rows(outcome: dict[str, Any], checked: dict[str, Any]) -> list[list[str]]:
    """The rows of one model with the independent ratios next to the tune's estimates."""
    label = LABELS.get(outcome["model"], outcome["model"])
    params = f"{checked['params'] / 1e6:.1f} M" if "params" in checked else "—"
    wall = f"{outcome['wall_s']:.0f} s"
    if "doc" not in outcome:
        error = " ".join(outcome["error"])
        return [[label, params, "—", "—", "tune failed", "—", "—", "—", "—", wall, error]]
    run, events = outcome["doc"]["run"], outcome["events"]
    eager = (
        _ms(run["batch_size"] / run["baseline_throughput"])
        if run.get("baseline_throughput")
        else "—"
    )
    found = []
    for r in map(flat, run["results"]):
        name = r["backend_description"]
        verdict = r.get("verdict") or ("faster" if r["passed"] else "not_faster")
        entry = checked.get("candidates", {}).get(name)
        ratio = (
            f"{entry['ratio']:.2f}x [{entry['low']:.2f}, {entry['high']:.2f}]"
            if entry
            else checked.get("error", checked.get("skipped", {}).get(name, "—"))
        )
        gate = r.get("required_speedup") or 1.01
        pairs = str(r.get("n_baseline", "—"))
        found.append(
            [
                *(label, params, eager, name, verdict, _speedup(r), pairs, ratio),
                *(_agrees(verdict, gate, entry), wall, _criteria(events, name)),
            ]
        )
    for f in run["failures"]:
        if f["stage"] == "strategy":
            continue
        reason = f["reason"].replace("|", "\\|").replace("\n", " ")
        reason = reason if len(reason) <= 300 else reason[:297] + "..."
        found.append(
            [
                *(label, params, eager, f["backend_description"], f"failed ({f['stage']})"),
                *("—", "—", "—", "—", wall, reason),
            ]
        )
    return found


def _load() -> str:
    one, five, _ = os.getloadavg()
    return f"{one:.2f} (1 min), {five:.2f} (5 min)"


def wait_quiet(below: float, minutes: float) -> str:
    """Poll the 1-minute load average every 30 s until it is below ``below`` (or time is up)."""
    start = time.monotonic()
    while os.getloadavg()[0] >= below and time.monotonic() - start < minutes * 60:
        time.sleep(POLL_S)
    waited = time.monotonic() - start
    state = "below" if os.getloadavg()[0] < below else "still not below"
    return f"waited {waited:.0f} s, 1-min load {state} {below:g}: {_load()}"


def _backends_for(args: argparse.Namespace) -> dict[str, str]:
    found = {}
    for item in args.backends_for or []:
        model, sep, backends = item.partition("=")
        if not sep or not backends:
            raise SystemExit(f"--backends-for wants MODEL=BACKENDS, got {item!r}")
        found[model] = backends
    return found


def main() -> None:
    """Run the zoo and print (or write) the markdown table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", default="eager-bf16,int8-dynamic")
    parser.add_argument(
        "--backends-for",
        action="append",
        metavar="MODEL=BACKENDS",
        help="this model's candidates instead of --backends (repeatable)",
    )
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--max-seconds", type=float, default=20.0)
    parser.add_argument("--check", action="store_true", help="the independent measurement")
    parser.add_argument("--check-seconds", type=float, default=2.0, help="min_run_time a block")
    parser.add_argument("--check-rounds", type=int, default=3)
    parser.add_argument("--wait-load", type=float, default=0.0, help="0: no wait")
    parser.add_argument("--wait-minutes", type=float, default=20.0)
    parser.add_argument("--wait-between", type=float, default=3.0)
    parser.add_argument("--out", help="also write the markdown here")
    parser.add_argument("--check-worker", metavar="MODEL", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.check_worker:
        check_worker(
            args.check_worker,
            args.backends.split(","),
            args.threads,
            args.check_seconds,
            args.check_rounds,
        )
        return
    per_model = _backends_for(args)
    run_start = time.perf_counter()
    waited = wait_quiet(args.wait_load, args.wait_minutes) if args.wait_load else None
    lines = [
        f"Backends `{args.backends}`"
        + "".join(f"; `{LABELS.get(m, m)}`: `{b}`" for m, b in per_model.items())
        + f"; `--threads {args.threads} --max-seconds {args.max_seconds:g}"
        f" --selection-seconds {args.max_seconds:g} --calibrate-noise`; {os.cpu_count()} cores; "
        f"load average at the start {_load()}" + (f" ({waited})." if waited else "."),
        "",
    ]
    if args.check:
        lines += [
            "| model | params | eager call | candidate | verdict | estimate [interval] | pairs "
            "| independent ratio [round min, max] (torch.utils.benchmark) | agrees? "
            "| wall time of the model's tune | accuracy criteria (worst, vs budget) |",
            "|---|---|---|---|---|---|---|---|---|---|---|",
        ]
    else:
        lines += [
            "| model | backend | verdict | speedup [interval] | accuracy criteria (worst, vs budget) |",
            "|---|---|---|---|---|",
        ]
    notes = []
    with tempfile.TemporaryDirectory(prefix="aitune_fp-zoo-") as tmp:
        for i, model in enumerate(args.models.split(",")):
            if i and args.wait_load:
                notes.append(
                    f"- before {LABELS.get(model, model)}: "
                    + wait_quiet(args.wait_load, args.wait_between)
                )
            folder = Path(tmp) / f"{i:02d}"
            folder.mkdir()
            backends = per_model.get(model, args.backends)
            load_start = _load()
            outcome = tune(model, backends, args, folder)
            load_end = _load()
            checked = check(model, backends, args) if args.check else {}
            if args.check:
                lines += ["| " + " | ".join(row) + " |" for row in checked_rows(outcome, checked)]
            else:
                lines += ["| " + " | ".join(row) + " |" for row in rows(outcome)]
            label = LABELS.get(model, model)
            noise = plan = None
            for e in outcome.get("events", []):
                if e["event"].endswith(".baseline_measured"):
                    noise = e.get("noise_floor_rel_l2", e.get("noise_floor_note"))
                    plan = e.get("budget_plan")
            floor = f"{noise:.2g}" if isinstance(noise, float) else str(noise)
            note = (
                f"- {label}: tune took {outcome['wall_s']:.0f} s; eager's noise floor "
                f"(float32 vs float64, rel L2): {floor}"
            )
            if args.check:
                note += (
                    f"; budget: {plan}; load at its start {load_start}, at its end {load_end}"
                    f"; the independent check took {checked['wall_s']:.0f} s"
                )
                if "eager_median_s" in checked:
                    note += f" (eager {_ms(checked['eager_median_s'])} a call there)"
                if "error" in checked:
                    note += f" and failed: {checked['error']}"
            for r in outcome.get("doc", {}).get("run", {}).get("results", []):
                if r.get("verdict") not in ("faster", "not_faster") and r.get("reason"):
                    note += f"; {r['backend_description']} {r.get('verdict')}: {r['reason']}"
            notes.append(note)
            print(notes[-1], file=sys.stderr, flush=True)
    total = time.perf_counter() - run_start
    lines += ["", *notes, f"- load average at the end {_load()}; the whole run took {total:.0f} s"]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
