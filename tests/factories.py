"""The tests' one set of result and event-log factories (no torch, no timing).

:func:`fake_result` builds a measured candidate's record; :func:`fake_log` the JSON lines one
run writes with ``tune --json-log``, through the library's own event builders, so ``report``
reads what a tune writes; :func:`write_log` puts lines in a file; :func:`tune_one` tunes a model
with one candidate and returns the report (torch imported when it is called).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from aitune_fp.core.report import TuneReport
from aitune_fp.core.results import PerformanceValidationResult
from aitune_fp.events.candidates import (
    CandidateFailed,
    CandidateMeasured,
)
from aitune_fp.events.kinds import Event, Payload
from aitune_fp.events.validation import BaselineMeasured, Finished, Selected, Started

#: A statistical ``not_faster`` record whose mean ratio (1.37) differs from its estimate (0.95).
DEFAULT_FIELDS: dict[str, Any] = {
    "throughput": 4110.0 * 1.37,
    "baseline_throughput": 4061.0,
    "speedup": 1.37,
    "estimate": 0.95,
    "ci_low": 0.892,
    "ci_high": 0.999,
    "confidence": 0.98,
    "batch_size": 32,
    "required_speedup": 1.01,
    "verdict": "not_faster",
    "decision": "statistical",
    "reason": "upper bound 0.999x is below required 1.010x at 20 pairs",
}


def flat_result(
    desc: str, throughput: float, baseline: float, speedup: float, passed: bool, **flat: Any
) -> PerformanceValidationResult:
    """A result from AITune's five fields and any flat names (``ci_low=...``), put in their parts."""
    return PerformanceValidationResult.of_flat(desc, throughput, baseline, speedup, passed, **flat)


def fake_result(desc: str = "B()", **overrides: Any) -> PerformanceValidationResult:
    """A measured candidate: :data:`DEFAULT_FIELDS` with ``overrides`` (any flat name).

    ``passed`` follows the verdict (``faster``) unless given.
    """
    fields = {**DEFAULT_FIELDS, **overrides}
    passed = fields.pop("passed", fields["verdict"] == "faster")
    throughput = fields.pop("throughput")
    baseline = fields.pop("baseline_throughput")
    speedup = fields.pop("speedup")
    return flat_result(desc, throughput, baseline, speedup, passed, **fields)


def event_line(event: Event, **extra: Any) -> str:
    """``event`` as one JSON line, with ``extra`` keys (a timestamp) after its fields."""
    return json.dumps({"event": event.name, **event.fields, **extra}, ensure_ascii=False)


def fake_log(
    run: str = "r1",
    *,
    results: tuple[PerformanceValidationResult, ...] = (),
    failures: tuple[tuple[str, str], ...] = (),
    baseline: float = 518.0,
    selected: str | None = "TorchEagerBackend()",
    outcome: str = "baseline",
    stamp: bool = True,
) -> list[str]:
    """The event lines of one tune of "mlp" (timestamps like --json-log's when ``stamp``).

    ``failures``: (backend, reason) pairs, failed at build (at "strategy" for backend "S").
    """
    made = [
        Started(
            run_id=run,
            module_name="mlp",
            strategy="S",
            device="cpu",
            decision="statistical",
            min_speedup_threshold_percent=1.0,
            required_speedup=1.01,
            batch_size=32,
        ).to_event(),
        BaselineMeasured(
            run_id=run,
            module_name="mlp",
            backend_description="TorchEagerBackend()",
            batch_size=32,
            throughput_samples_per_s=baseline,
            n_calls=20,
            duration_s=0.1,
            decision="statistical",
        ).to_event(),
    ]
    made += [
        CandidateMeasured(run_id=run, module_name="mlp", result=r, duration_s=1.0).to_event()
        for r in results
    ]
    made += [
        CandidateFailed(
            run_id=run,
            module_name="mlp",
            backend_description=desc,
            stage="strategy" if desc == "S" else "build",
            error_type="RuntimeError",
            reason=reason,
            traceback_path=None,
        ).to_event()
        for desc, reason in failures
    ]
    if selected is not None:
        chosen = next((r for r in results if r.backend_description == selected), None)
        made.append(
            Selected.of(
                run,
                "mlp",
                backend_description=selected,
                is_baseline=chosen is None,
                result=chosen,
                baseline_throughput=baseline,
                info_on=True,
            )
        )
    made.append(
        Finished(
            run_id=run,
            module_name="mlp",
            outcome=outcome,
            backend_description=selected,
            n_candidates=len(results) + len(failures),
            n_measured=len(results),
            n_passed=0,
            n_failed=len(failures),
            duration_s=2.0,
        ).to_event()
    )
    return [
        event_line(e, **({"timestamp": f"2025-01-02T12:00:{i:02d}.5Z"} if stamp else {}))
        for i, e in enumerate(made)
    ]


def write_log(tmp_path: Path, lines: list[str], name: str = "log.jsonl") -> Path:
    """``lines`` written to ``tmp_path / name``, one a line."""
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def read_back(line: dict[str, Any]) -> Payload:
    """The typed payload ingest reads from ``line`` (a JSON object with its ``event`` key)."""
    from aitune_fp.events.ingest import EventLine, read_events

    (item,) = read_events([json.dumps(line)])
    assert isinstance(item, EventLine), item
    return item.payload


def result_of(line: dict[str, Any]) -> PerformanceValidationResult:
    """The result a ``candidate_measured`` line carries, as ingest reads it."""
    payload = read_back(line)
    assert isinstance(payload, CandidateMeasured)
    return payload.result


def schema_errors(line: dict[str, Any], schema: dict[str, Any] | None = None) -> list[str]:
    """Why ``line`` fails the shipped events schema (or ``schema``), checked by ``jsonschema``."""
    import jsonschema

    from aitune_fp.events.ingest import event_schema

    checker = jsonschema.Draft202012Validator(event_schema() if schema is None else schema)
    return [error.message for error in checker.iter_errors(line)]


def tune_one(
    candidate: Any, model: Any, data: list[Any], cache: Path, *, spec: Any = None, **options: Any
) -> TuneReport:
    """The report of tuning ``model`` on ``data`` with ``candidate`` alone, validated by ``options``."""
    from aitune_fp.adapters.validation import validation_of, with_performance_validation
    from aitune_fp.inputs import GraphSpec
    from aitune_fp.pipeline.strategies import OneBackendStrategy

    strategy = with_performance_validation(OneBackendStrategy(candidate), **options)
    strategy.tune(model, "m", GraphSpec(8) if spec is None else spec, data, "cpu", cache)
    report = validation_of(strategy).last_report
    assert report is not None
    return report
