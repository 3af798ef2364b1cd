"""``aitune-fp report`` and ``ingest`` on a large event log, beside ``json.loads`` of the same file.

Writes a synthetic JSON-lines log of realistic tunes (started, phases, looks, baseline,
correctness, measured and rejected candidates, a failure, selected, finished; ``level`` and
``timestamp`` as ``--json-log`` writes them) of about ``--mb`` megabytes, then times, each in a
fresh interpreter: ``json.loads`` over every line (the floor), ``ingest()``, ``report`` (table)
and ``report --format json`` (output to /dev/null), with each one's peak memory (max RSS).

Usage: python benchmarks/report_speed.py [--mb 100] [--log PATH] [--repeats 1]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

_LOOKS = 12
_CANDIDATES = (
    "TorchCompileBackend(mode='max-autotune')",
    "TorchEagerBackend(dtype=torch.bfloat16)",
)


def _run_events(run_id: str, module: str, t0: float) -> list[dict[str, Any]]:
    """The events of one tune (every figure plausible and schema-valid)."""
    from aitune_fp.core.mismatch import Mismatch
    from aitune_fp.core.results import PerformanceValidationResult
    from aitune_fp.events.candidates import (
        CandidateFailed,
        CandidateMeasured,
        CandidateRejected,
        CorrectnessChecked,
    )
    from aitune_fp.events.kinds import Event
    from aitune_fp.events.validation import (
        BaselineMeasured,
        Finished,
        Look,
        PhaseEntered,
        Selected,
        Started,
    )

    out: list[Event] = [
        Started(
            run_id=run_id,
            module_name=module,
            strategy="MaxThroughputStrategy",
            device="cpu",
            decision="statistical",
            min_speedup_threshold_percent=1.0,
            required_speedup=1.01,
            batch_size=32,
        ).to_event(),
        PhaseEntered(
            run_id=run_id,
            module_name=module,
            backend_description="TorchEagerBackend()",
            phase="baseline_build",
        ).to_event(),
        BaselineMeasured(
            run_id=run_id,
            module_name=module,
            backend_description="TorchEagerBackend()",
            batch_size=32,
            throughput_samples_per_s=1000.0,
            n_calls=40,
            duration_s=1.0,
            decision="statistical",
        ).to_event(),
    ]
    for i, desc in enumerate(_CANDIDATES):
        out.append(
            PhaseEntered(
                run_id=run_id, module_name=module, backend_description=desc, phase="build"
            ).to_event()
        )
        out.append(
            PhaseEntered(
                run_id=run_id, module_name=module, backend_description=desc, phase="correctness"
            ).to_event()
        )
        mismatch = Mismatch(
            max_abs_error=1e-6,
            max_rel_error=1e-5,
            budget_used=0.01,
            atol=1e-5,
            rtol=1e-4,
            path="output",
            n_elements=4096,
        )
        out.append(CorrectnessChecked.of(run_id, module, desc, mismatch))
        out.append(
            PhaseEntered(
                run_id=run_id, module_name=module, backend_description=desc, phase="measure"
            ).to_event()
        )
        for k in range(_LOOKS):
            out.append(
                Look(
                    run_id=run_id,
                    module_name=module,
                    backend_description=desc,
                    n_pairs=10 * (k + 1),
                    max_pairs=160,
                    verdict="inconclusive",
                    estimate=1.2 - 0.3 * i,
                    ci_low=1.1 - 0.3 * i,
                    ci_high=1.3 - 0.3 * i,
                ).to_event()
            )
        faster = i == 0
        result = PerformanceValidationResult.of_flat(
            desc,
            1200.0 - 300 * i,
            1000.0,
            1.2 - 0.3 * i,
            faster,
            estimate=1.2 - 0.3 * i,
            ci_low=1.1 - 0.3 * i,
            ci_high=1.3 - 0.3 * i,
            confidence=0.95,
            n_baseline=120,
            n_candidate=120,
            batch_size=32,
            required_speedup=1.01,
            verdict="faster" if faster else "not_faster",
            decision="statistical",
            reason="lower bound clears the gate" if faster else "upper bound below the gate",
        )
        out.append(
            CandidateMeasured(
                run_id=run_id, module_name=module, result=result, duration_s=3.0
            ).to_event()
        )
        if not faster:
            out.append(CandidateRejected.of(run_id, module, result))
    out.append(
        CandidateFailed(
            run_id=run_id,
            module_name=module,
            backend_description="CudaGraphBackend()",
            stage="unavailable",
            error_type="BackendUnavailableError",
            reason="no CUDA device",
            traceback_path=None,
        ).to_event()
    )
    out.append(
        Selected.of(
            run_id,
            module,
            backend_description=_CANDIDATES[0],
            is_baseline=False,
            result=None,
            baseline_throughput=1000.0,
            info_on=True,
        )
    )
    out.append(
        Finished(
            run_id=run_id,
            module_name=module,
            outcome="candidate",
            backend_description=_CANDIDATES[0],
            n_candidates=3,
            n_measured=2,
            n_passed=1,
            n_failed=1,
            duration_s=9.0,
        ).to_event()
    )
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t0))
    return [
        {"event": e.name, "level": e.level, "timestamp": f"{stamp}.{j:06d}Z", **e.fields}
        for j, e in enumerate(out)
    ]


def write_log(path: Path, megabytes: float) -> tuple[int, int]:
    """Write about ``megabytes`` MB of tunes to ``path``; return (runs, events)."""
    target = int(megabytes * 1_000_000)
    template = [json.dumps(e) for e in _run_events("RUNID", "model_MODEL", 1.7e9)]
    n_runs = n_events = size = 0
    with open(path, "w", encoding="utf-8") as handle:
        while size < target:
            run_id = f"{n_runs:032x}"
            block = "\n".join(template).replace("RUNID", run_id).replace("MODEL", str(n_runs % 50))
            handle.write(block + "\n")
            size += len(block) + 1
            n_runs += 1
            n_events += len(template)
    return n_runs, n_events


_SIDES = {
    "json.loads (floor)": (
        "import json\nwith open(LOG, 'rb') as f:\n    n = sum(1 for line in f if json.loads(line))"
    ),
    "ingest()": "from aitune_fp.events.ingest import ingest\nr = ingest(LOG)",
    "report (table)": (
        "import sys, os\nfrom aitune_fp.cli import main\n"
        "sys.stdout = open(os.devnull, 'w')\nmain(['report', LOG])"
    ),
    "report --format json": (
        "import sys, os\nfrom aitune_fp.cli import main\n"
        "sys.stdout = open(os.devnull, 'w')\nmain(['report', LOG, '--format', 'json'])"
    ),
}
_PROBE = (
    "import resource, time, sys\nsys.path.insert(0, ROOT)\nLOG = {log!r}\nt = time.perf_counter()\n"
    "{body}\nd = time.perf_counter() - t\n"
    "print(d, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.__stdout__)"
)


def _time(body: str, log: Path) -> tuple[float, float]:
    root = str(Path(__file__).resolve().parents[1])
    code = f"ROOT = {root!r}\n" + _PROBE.format(log=str(log), body=body)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    seconds, rss_kib = done.stdout.split()[-2:]
    return float(seconds), int(rss_kib) / 1024


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--mb", type=float, default=100.0)
    parser.add_argument("--log", type=Path, default=Path("/tmp/aitune_fp_report_speed.jsonl"))
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--only", choices=list(_SIDES), action="append")
    args = parser.parse_args(argv)
    n_runs, n_events = write_log(args.log, args.mb)
    size = args.log.stat().st_size / 1e6
    print(f"log: {size:.1f} MB, {n_runs} runs, {n_events} events")
    print("| side | seconds (median) | peak RSS MiB |")
    print("|---|---|---|")
    for name, body in _SIDES.items():
        if args.only and name not in args.only:
            continue
        runs = sorted(_time(body, args.log) for _ in range(args.repeats))
        seconds, rss = runs[len(runs) // 2]
        print(f"| {name} | {seconds:.1f} | {rss:.0f} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
