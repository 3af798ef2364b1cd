"""Reading event logs back: runs, rebuilt results, and bad lines that never stop the read."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from aitune_fp.core.results import unstructure
from aitune_fp.events.candidates import (
    CandidateFailed,
    CandidateMeasured,
    CandidateRejected,
    SelectionDecided,
)
from aitune_fp.events.ingest import MAX_LINE_BYTES, BadLine, EventLine, ingest, read_events
from aitune_fp.events.kinds import Event
from aitune_fp.events.validation import BaselineMeasured, Finished, PhaseEntered, Selected, Started
from tests.factories import flat_result, read_back, result_of

RESULT = flat_result(
    "TorchCompileBackend()",
    1500.0,
    1000.0,
    1.5,
    True,
    estimate=1.49,
    ci_low=1.4,
    ci_high=1.6,
    confidence=0.95,
    n_baseline=10,
    n_candidate=10,
    batch_size=32,
    required_speedup=1.01,
    verdict="faster",
    decision="statistical",
    reason="lower bound 1.400x clears 1.010x",
)
SLOW = flat_result(
    "TorchEagerBackend(dtype=torch.bfloat16)",
    500.0,
    1000.0,
    0.5,
    False,
    ci_low=0.45,
    ci_high=0.55,
    verdict="not_faster",
    reason="upper bound below",
)


def _line(event: Event, **extra: Any) -> str:
    return json.dumps({"event": event.name, "level": event.level, **extra, **event.fields})


def _run_lines(run_id: str, module: str = "mlp") -> list[str]:
    """A complete tune: started, baseline, a passing and a failing candidate, a failure, selected."""
    return [
        _line(
            Started(
                run_id=run_id,
                module_name=module,
                strategy="MaxThroughputStrategy",
                device="cpu",
                decision="statistical",
                min_speedup_threshold_percent=1.0,
                required_speedup=1.01,
                batch_size=32,
            ).to_event()
        ),
        _line(
            PhaseEntered(
                run_id=run_id, module_name=module, backend_description="E()", phase="baseline_build"
            ).to_event()
        ),
        _line(
            BaselineMeasured(
                run_id=run_id,
                module_name=module,
                backend_description="TorchEagerBackend()",
                batch_size=32,
                throughput_samples_per_s=1000.0,
                n_calls=40,
                duration_s=1.0,
                decision="statistical",
            ).to_event()
        ),
        _line(
            CandidateMeasured(
                run_id=run_id, module_name=module, result=RESULT, duration_s=3.0
            ).to_event()
        ),
        _line(
            CandidateMeasured(
                run_id=run_id, module_name=module, result=SLOW, duration_s=1.0
            ).to_event()
        ),
        _line(CandidateRejected.of(run_id, module, SLOW)),
        _line(
            CandidateFailed(
                run_id=run_id,
                module_name=module,
                backend_description="CudaGraphBackend()",
                stage="build",
                error_type="RuntimeError",
                reason="no CUDA",
                traceback_path="/tmp/x.log",
            ).to_event()
        ),
        _line(
            Selected.of(
                run_id,
                module,
                backend_description="TorchCompileBackend()",
                is_baseline=False,
                result=RESULT,
                baseline_throughput=1000.0,
                info_on=True,
            )
        ),
        _line(
            Finished(
                run_id=run_id,
                module_name=module,
                outcome="candidate",
                backend_description="TorchCompileBackend()",
                n_candidates=3,
                n_measured=2,
                n_passed=1,
                n_failed=1,
                duration_s=5.0,
            ).to_event()
        ),
    ]


class TestIngestRuns:
    def test_one_run_is_rebuilt(self) -> None:
        """Every figure of a run comes back: baseline, results in order, failures, selection."""
        report = ingest(_run_lines("r1"))
        assert report.bad_lines == ()
        (run,) = report.runs
        assert run.run_id == "r1"
        assert run.module_name == "mlp"
        assert run.strategy == "MaxThroughputStrategy"
        assert run.baseline_throughput == 1000.0
        assert run.batch_size == 32
        assert run.results == (RESULT, SLOW)
        assert run.rejected == (SLOW.backend_description,)
        assert [f.stage for f in run.failures] == ["build"]
        assert run.selected_backend == "TorchCompileBackend()"
        assert run.selected_is_baseline is False
        assert run.outcome == "candidate"
        assert run.duration_s == 5.0
        assert report.n_events == 9

    def test_interleaved_runs_are_separated(self) -> None:
        """Lines of two runs interleaved are grouped by run_id, in order of first appearance."""
        a, b = _run_lines("a", "m1"), _run_lines("b", "m2")
        mixed = [line for pair in zip(a, b, strict=True) for line in pair]
        report = ingest(mixed)
        assert [r.run_id for r in report.runs] == ["a", "b"]
        assert [r.module_name for r in report.runs] == ["m1", "m2"]
        assert all(r.results == (RESULT, SLOW) for r in report.runs)

    def test_reads_a_path(self, tmp_path: Path) -> None:
        """A path is read line by line with the same outcome as the lines themselves."""
        path = tmp_path / "events.jsonl"
        path.write_text("\n".join(_run_lines("p")) + "\n", encoding="utf-8")
        assert ingest(path) == ingest(_run_lines("p"))
        assert ingest(str(path)).runs[0].run_id == "p"

    def test_to_dict_is_json(self) -> None:
        """The report converts to JSON-ready data (results as dicts, in order)."""
        data = json.loads(json.dumps(ingest(_run_lines("j")).to_dict()))
        assert data["runs"][0]["results"][0] == unstructure(RESULT)


class TestBadLines:
    def test_bad_lines_are_counted_with_numbers(self) -> None:
        """Non-JSON, non-object, foreign and invalid lines are reported; the run still reads."""
        lines = _run_lines("r")
        lines.insert(0, "not json at all")
        lines.insert(2, "[1, 2]")
        lines.insert(4, json.dumps({"event": "http.request", "path": "/"}))
        lines.insert(6, json.dumps({"event": "aitune_fp.validation.selected", "schema_version": 1}))
        lines.append("")
        lines.append(json.dumps({**json.loads(lines[1]), "schema_version": 99}))
        report = ingest(lines)
        numbers = [n for n, _ in report.bad_lines]
        assert numbers == [1, 3, 5, 7, 15]
        reasons = [why for _, why in report.bad_lines]
        assert reasons[0].startswith("not JSON")
        assert "not a JSON object" in reasons[1]
        assert "not an aitune_fp event" in reasons[2]
        assert "missing the required keys" in reasons[3]
        assert "newer than this reader" in reasons[4]
        assert report.runs[0].results == (RESULT, SLOW)

    def test_non_finite_and_non_utf8(self) -> None:
        """NaN in a line and bytes that are not UTF-8 are bad lines, not crashes."""
        good = _run_lines("r")[0]
        items = list(read_events([good.replace("1.01", "NaN").encode(), b"\xff\xfe{}\n"]))
        assert all(isinstance(i, BadLine) for i in items)
        assert "not UTF-8" in items[1].reason  # type: ignore[union-attr]

    def test_inconsistent_result_is_bad_line(self) -> None:
        """A candidate_measured event whose verdict contradicts passed is a bad line."""
        line = json.loads(_run_lines("r")[3])
        line["result"]["passed"] = False
        report = ingest([json.dumps(line)])
        assert len(report.bad_lines) == 1
        assert "contradicts" in report.bad_lines[0][1]

    def test_a_wrong_type_or_an_unknown_key_is_a_bad_line_naming_it(self) -> None:
        """Reading through the classes checks types and keys, nested records included."""
        line = json.loads(_run_lines("r")[3])
        wrong = {**line, "duration_s": "3"}
        nested = {**line, "result": {**line["result"], "raw": {"latencies_from": "x"}}}
        extra = {**line, "surprise": 1}
        reasons = [
            why for _, why in ingest([json.dumps(x) for x in (wrong, nested, extra)]).bad_lines
        ]
        assert "duration_s" in reasons[0] and "latencies_from" in reasons[1]
        assert "surprise" in reasons[2]

    def test_overlong_line_is_skipped(self, tmp_path: Path) -> None:
        """A line over MAX_LINE_BYTES is reported and the next line still reads."""
        path = tmp_path / "big.jsonl"
        with open(path, "w", encoding="utf-8") as handle:
            handle.write("x" * (MAX_LINE_BYTES + 10) + "\n")
            handle.write(_run_lines("r")[0] + "\n")
        items = list(read_events(path))
        assert isinstance(items[0], BadLine)
        assert items[0].line_no == 1
        assert isinstance(items[1], EventLine)
        assert items[1].line_no == 2

    @given(st.lists(st.one_of(st.text(), st.binary()), max_size=20))
    def test_arbitrary_input_never_crashes(self, lines: list[str | bytes]) -> None:
        """Whatever the lines hold, ingest returns a report and every reported line is numbered."""
        report = ingest(lines)
        assert all(n >= 1 for n, _ in report.bad_lines)

    @given(
        st.recursive(
            st.none() | st.booleans() | st.floats() | st.text(),
            lambda c: st.lists(c) | st.dictionaries(st.text(), c),
        )
    )
    def test_arbitrary_json_never_crashes(self, value: Any) -> None:
        """Arbitrary JSON values are read without exceptions."""
        try:
            text = json.dumps(value)
        except ValueError:
            return
        report = ingest([text])
        assert report.n_events + len(report.bad_lines) <= 1


class TestResultFromEvent:
    def test_roundtrip(self) -> None:
        """candidate_measured carries exactly the result it was built from, and reads back equal."""
        event = CandidateMeasured(
            run_id="r", module_name="m", result=RESULT, duration_s=1.0
        ).to_event()
        assert isinstance(event.payload, CandidateMeasured)
        assert event.payload.result is RESULT
        assert result_of({"event": event.name, **event.fields}) == RESULT


#: A version 1 line (before the result was nested in parts), as tune --json-log wrote it.
V1_MEASURED = {
    "event": "aitune_fp.validation.candidate_measured",
    "level": "info",
    "timestamp": "2026-12-02T17:23:05.101137Z",
    "schema_version": 1,
    "run_id": "5c74189f98434008a20d0b3de1268d7a",
    "module_name": "mlp",
    "backend_description": "TorchCompileBackend()",
    "throughput_samples_per_s": 2566.16,
    "baseline_throughput_samples_per_s": 2592.47,
    "duration_s": 6.82,
    "speedup": 0.99,
    "passed": False,
    "estimate": 0.9006,
    "ci_low": 0.8389,
    "ci_high": 0.9663,
    "confidence": 0.98,
    "n_baseline": 80,
    "n_candidate": 80,
    "batch_size": 32,
    "required_speedup": 1.01,
    "verdict": "not_faster",
    "decision": "statistical",
    "reason": "upper bound 0.966x is below required 1.010x at 80 pairs",
    "threads": 2,
    "flags": ["oversubscribed"],
    "max_abs_error": 0.001,
    "baseline_latencies_s": [0.01, 0.011],
    "candidate_latencies_s": [0.012, 0.011],
    "latencies_from": 0,
    "device_isolation": "unknown",
    "summary": "📊 TorchCompileBackend(): batch size=32, speedup 0.90x [0.839, 0.966] → not_faster",
}
V1_SELECTION = {
    "event": "aitune_fp.validation.selection_decided",
    "schema_version": 1,
    "run_id": "r",
    "module_name": "mlp",
    "delta": 0.02,
    "summary": "🥇 kept A()",
    "contenders": [{"name": "A()", "order": 0, "build_s": 1.5}, {"name": "B()", "order": 1}],
    "remaining": ["A()"],
    "eliminated": [
        {"name": "B()", "lost_to": "A()", "ratio": 1.5, "low": 1.2, "high": None, "at_rounds": 20}
    ],
    "failed": [],
    "pairs": [],
    "rounds": 20,
    "look": 1,
    "settled": False,
    "chosen": "A()",
    "outcome": "one_left",
    "reason": "kept A()",
    "gap_bound": None,
    "gap_unbounded": True,
    "confidence": 0.95,
}


class TestVersionOneLines:
    def test_a_flat_result_reads_into_its_parts(self) -> None:
        """A version 1 candidate_measured line: every flat key lands in its part."""
        r = result_of(V1_MEASURED)
        assert (r.throughput, r.baseline_throughput, r.decided.rule) == (
            2566.16,
            2592.47,
            "statistical",
        )
        assert (r.decided.ci_high, r.environment.threads, r.accuracy.max_abs_error) == (
            0.9663,
            2,
            0.001,
        )
        assert (
            r.raw.candidate_latencies_s == (0.012, 0.011) and r.device.device_isolation == "unknown"
        )
        assert r.flags == ("oversubscribed",)

    def test_a_flat_selection_reads_with_its_infinite_bounds(self) -> None:
        """A version 1 selection_decided line: the selection's keys nest, null bounds are infinite."""
        payload = read_back(V1_SELECTION)
        assert isinstance(payload, SelectionDecided)
        state = payload.selection
        assert state.chosen == "A()" and state.eliminated[0].high == math.inf
        assert state.gap_bound == math.inf and state.contenders[1].build_s is None

    def test_an_unknown_flat_key_is_still_refused(self) -> None:
        line = {**V1_MEASURED, "surprise": 1}
        (bad,) = ingest([json.dumps(line)]).bad_lines
        assert "surprise" in bad[1]
