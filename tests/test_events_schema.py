"""The events JSON Schema: every builder's payload validates, and the built-in checker agrees."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest
import structlog
from hypothesis import given
from hypothesis import strategies as st

from aitune_fp import events
from aitune_fp.core.mismatch import Mismatch
from aitune_fp.core.results import PerformanceValidationResult
from aitune_fp.ingest import event_schema, validate_event

from .factories import fake_result
from .strategies import throughputs

RUN = "0123456789abcdef"
MODULE = "mlp"


def _result(**overrides: Any) -> PerformanceValidationResult:
    """A ``faster`` compile candidate (1.2x mean ratio, estimate 1.19)."""
    values: dict[str, Any] = {
        "throughput": 1200.0,
        "baseline_throughput": 1000.0,
        "speedup": 1.2,
        "passed": True,
        "estimate": 1.19,
        "ci_low": 1.1,
        "ci_high": 1.3,
        "confidence": 0.95,
        "n_baseline": 20,
        "n_candidate": 20,
        "verdict": "faster",
        "reason": "ci_low 1.100 > required 1.010",
    }
    return fake_result("TorchCompileBackend()", **{**values, **overrides})


def _selection_events() -> list[events.Event]:
    """A head-to-head look and its choice (one eliminated), and two latency checks."""
    from aitune_fp.core.choice import LatencyCheck
    from aitune_fp.core.quantiles import quantile_upper_bound
    from aitune_fp.core.selection import Contender, SelectionRule, select_at_look

    rule = SelectionRule()
    contenders = [Contender("A()", 0, 1.5), Contender("B()", 1, None)]
    rounds = 20
    latencies = {
        "A()": [1.0 + 0.01 * (i % 3) for i in range(rounds)],
        "B()": [2.0 + 0.01 * (i % 5) for i in range(rounds)],
    }
    state = select_at_look(contenders, latencies, 1, rule)
    few = quantile_upper_bound([0.001] * 5, 0.99)  # too few calls: no finite bound
    many = quantile_upper_bound([0.001 + 1e-6 * i for i in range(100)], 0.9)
    return [
        events.headtohead_look(RUN, MODULE, state),
        events.selection_decided(RUN, MODULE, state, delta=rule.delta),
        events.latency_checked(
            RUN, MODULE, LatencyCheck(backend_description="A()", bound=few, budget_s=0.01)
        ),
        events.latency_checked(
            RUN, MODULE, LatencyCheck(backend_description="A()", bound=many, budget_s=0.01)
        ),
    ]


def _every_event() -> list[events.Event]:
    """One event from every builder, with representative values (None where allowed)."""
    passed = _result()
    point = PerformanceValidationResult("X()", 90.0, 100.0, 0.9, False)
    return [
        events.started(
            RUN,
            MODULE,
            strategy="MaxThroughputStrategy",
            device="cpu",
            decision="statistical",
            min_speedup_threshold_percent=1.0,
            required_speedup=1.01,
            batch_size=32,
        ),
        events.started(
            RUN,
            MODULE,
            strategy="S",
            device="cuda:0",
            decision="point",
            min_speedup_threshold_percent=-5.0,
            required_speedup=0.95,
            batch_size=None,
        ),
        events.disabled(RUN, MODULE, strategy="FirstWinsStrategy"),
        *_selection_events(),
        events.eval_mode(RUN, MODULE, n_training_modules=3),
        events.look(
            RUN,
            MODULE,
            backend_description="TorchCompileBackend()",
            n_pairs=10,
            max_pairs=160,
            verdict="inconclusive",
            estimate=1.02,
            ci_low=0.97,
            ci_high=None,
        ),
        *(
            events.phase(RUN, MODULE, backend_description="TorchEagerBackend()", phase=p)
            for p in ("baseline_build", "baseline_measure", "build", "correctness", "measure")
        ),
        events.baseline_measured(
            RUN,
            MODULE,
            backend_description="TorchEagerBackend()",
            batch_size=32,
            throughput_samples_per_s=1000.0,
            n_calls=30,
            duration_s=0.5,
            decision="point",
        ),
        events.baseline_failed(
            RUN, MODULE, error_type="RuntimeError", reason="boom", traceback_path="/tmp/tb.txt"
        ),
        events.baseline_failed(
            RUN, MODULE, error_type="RuntimeError", reason="boom", traceback_path=None
        ),
        events.correctness_checked(
            RUN,
            MODULE,
            backend_description="Int8DynamicBackend()",
            mismatch=Mismatch(
                max_abs_error=0.03,
                max_rel_error=0.2,
                budget_used=0.25,
                atol=0.1,
                rtol=0.05,
                path="output",
                n_elements=8448,
            ),
        ),
        events.correctness_checked(
            RUN, MODULE, backend_description="X()", mismatch=Mismatch(n_elements=4)
        ),
        events.candidate_measured(RUN, MODULE, passed, duration_s=2.5),
        events.candidate_measured(
            RUN,
            MODULE,
            _result(max_abs_error=0.01, max_rel_error=0.5, budget_used=0.9, atol=1e-3, rtol=0.0),
            duration_s=2.5,
        ),
        events.candidate_measured(RUN, MODULE, point, duration_s=0.1),
        events.candidate_measured(
            RUN,
            MODULE,
            _result(ci_high=None, passed=False, verdict="inconclusive", ci_low=0.0),
            duration_s=1.0,
        ),
        events.candidate_rejected(
            RUN, MODULE, _result(passed=False, verdict="not_faster", ci_low=0.8, ci_high=0.9)
        ),
        events.candidate_rejected(RUN, MODULE, point),
        *(
            events.candidate_failed(
                RUN,
                MODULE,
                backend_description="CudaGraphBackend()",
                stage=stage,
                error_type="ValueError",
                reason="bad",
                traceback_path=None,
            )
            for stage in ("unavailable", "build", "correctness", "profiling", "strategy")
        ),
        events.selected(
            RUN,
            MODULE,
            backend_description="TorchCompileBackend()",
            is_baseline=False,
            result=passed,
            baseline_throughput=1000.0,
            info_on=True,
        ),
        events.selected(
            RUN,
            MODULE,
            backend_description="TorchEagerBackend()",
            is_baseline=True,
            result=None,
            baseline_throughput=None,
            info_on=False,
        ),
        events.finished(
            RUN,
            MODULE,
            outcome="candidate",
            backend_description="TorchCompileBackend()",
            n_candidates=2,
            n_measured=2,
            n_passed=1,
            n_failed=0,
            duration_s=12.0,
        ),
        events.finished(
            RUN,
            MODULE,
            outcome="error",
            backend_description=None,
            n_candidates=1,
            n_measured=0,
            n_passed=0,
            n_failed=1,
            duration_s=0.0,
            reason="strategy raised",
        ),
        events.sweep_started(
            RUN, "sweep", executor="ray", models=["mlp", "convnet"], skipped=["convnet"]
        ),
        events.task_finished(
            RUN,
            MODULE,
            tune_run_id="fedcba9876543210",
            outcome="candidate",
            hostname="node-1",
            device="cuda",
            device_name="NVIDIA H200",
            pid=4242,
            threads=2,
            started_unix_s=1_700_000_000.0,
            finished_unix_s=1_700_000_012.5,
            started_monotonic_s=100.0,
            finished_monotonic_s=112.5,
        ),
        events.task_failed(RUN, MODULE, error_type="WorkerCrashedError", reason="worker died"),
        events.sweep_finished(RUN, "sweep", finished=["convnet"], failed=["mlp"], duration_s=30.0),
    ]


def _line(event: events.Event) -> dict[str, Any]:
    return {"event": event.name, **event.fields}


VALIDATOR = jsonschema.Draft202012Validator(event_schema())


class TestSchemaFile:
    def test_schema_is_valid_draft_2020_12(self) -> None:
        """The shipped schema is itself a valid draft 2020-12 schema."""
        jsonschema.Draft202012Validator.check_schema(event_schema())

    def test_schema_names_every_event(self) -> None:
        """The schema's event enum is exactly events.EVENT_NAMES."""
        enum = event_schema()["properties"]["event"]["enum"]
        assert sorted(enum) == sorted(events.EVENT_NAMES)

    def test_schema_version_matches(self) -> None:
        """The schema pins the schema_version events.py writes."""
        assert event_schema()["properties"]["schema_version"]["const"] == events.SCHEMA_VERSION


class TestBuildersValidate:
    def test_every_builder_is_covered(self) -> None:
        """The sample events cover every event name."""
        assert {e.name for e in _every_event()} == set(events.EVENT_NAMES)

    @pytest.mark.parametrize("event", _every_event(), ids=lambda e: e.name.rsplit(".", 1)[-1])
    def test_builder_payload_validates(self, event: events.Event) -> None:
        """Each builder's payload validates with jsonschema and with the built-in checker."""
        line = _line(event)
        VALIDATOR.validate(line)
        assert validate_event(line) == []

    @pytest.mark.parametrize("event", _every_event(), ids=lambda e: e.name.rsplit(".", 1)[-1])
    def test_rendered_json_line_validates(self, event: events.Event) -> None:
        """A line as the CLI's JSON renderer writes it (timestamp, level, logger) validates."""
        chain = [
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.JSONRenderer(),
        ]
        event_dict: Any = {"event": event.name, "logger": "aitune_fp", **event.fields}
        for processor in chain:
            event_dict = processor(None, event.level, event_dict)
        parsed = json.loads(event_dict)
        VALIDATOR.validate(parsed)
        assert validate_event(parsed) == []

    @pytest.mark.parametrize("event", _every_event(), ids=lambda e: e.name.rsplit(".", 1)[-1])
    def test_dropping_a_required_key_fails_in_both(self, event: events.Event) -> None:
        """Removing any key the schema requires makes both validators refuse the line."""
        line = _line(event)
        schema = event_schema()
        required = list(schema["required"])
        for clause in schema["allOf"]:
            if clause["if"]["properties"]["event"]["const"] == event.name:
                required += clause["then"]["required"]
        for key in required:
            broken = {k: v for k, v in line.items() if k != key}
            assert not VALIDATOR.is_valid(broken), key
            assert validate_event(broken), key


class TestCheckerAgreesWithJsonschema:
    @pytest.mark.parametrize(
        "mutation",
        [
            {"schema_version": 2},
            {"schema_version": True},
            {"run_id": ""},
            {"run_id": 5},
            {"event": "aitune_fp.validation.unknown"},
            {"speedup": -1.0},
            {"speedup": "fast"},
            {"passed": 1},
            {"verdict": "maybe"},
            {"batch_size": 0},
            {"batch_size": 2.5},
            {"n_baseline": True},
            {"confidence": 1.0},
            {"ci_low": None},
            {"baseline_throughput_samples_per_s": 0.0},
            {"budget_used": -0.1},
            {"max_abs_error": "small"},
            {"atol": None},
        ],
    )
    def test_bad_values_rejected_by_both(self, mutation: dict[str, Any]) -> None:
        """A candidate_measured line with one bad value fails both validators (None ci is ok)."""
        line = _line(events.candidate_measured(RUN, MODULE, _result(), duration_s=1.0))
        line.update(mutation)
        assert VALIDATOR.is_valid(line) == (validate_event(line) == [])

    @given(
        throughput=throughputs,
        baseline=throughputs,
        n=st.integers(min_value=0, max_value=10_000),
        passed=st.booleans(),
    )
    def test_random_results_validate(
        self, throughput: float, baseline: float, n: int, passed: bool
    ) -> None:
        """candidate_measured events built from arbitrary valid results validate in both."""
        result = PerformanceValidationResult(
            "B()",
            throughput,
            baseline,
            throughput / baseline,
            passed,
            n_baseline=n,
            n_candidate=n,
            verdict="faster" if passed else "not_faster",
        )
        line = _line(events.candidate_measured(RUN, MODULE, result, duration_s=0.0))
        VALIDATOR.validate(line)
        assert validate_event(line) == []


class TestMeasuredSummary:
    def test_statistical_line_shows_the_estimate_and_the_verdict(self) -> None:
        """An undecided 1.04x mean ratio is not called 'slower': the line shows what decided."""
        result = PerformanceValidationResult(
            "Int8DynamicBackend()",
            976.0,
            937.0,
            1.04,
            False,
            estimate=1.002,
            ci_low=0.999,
            ci_high=1.049,
            confidence=0.98,
            n_baseline=160,
            n_candidate=160,
            batch_size=32,
            required_speedup=1.01,
            verdict="inconclusive",
            decision="statistical",
            reason="r",
        )
        summary = events.candidate_measured(RUN, MODULE, result, duration_s=1.0).fields["summary"]
        assert summary == (
            "📊 Int8DynamicBackend(): batch size=32, speedup 1.00x [0.999, 1.049] → inconclusive"
        )

    def test_point_line_is_aitunes(self) -> None:
        """Point mode keeps AITune's line byte for byte (its ▲/▼ is the point rule's pass)."""
        result = PerformanceValidationResult(
            "X()", 200.0, 100.0, 2.0, True, batch_size=8, verdict="faster", decision="point"
        )
        summary = events.candidate_measured(RUN, MODULE, result, duration_s=1.0).fields["summary"]
        assert (
            summary == "📊 X(): batch size=8, throughput=200.00 samples/s, speedup=2.00x (▲ faster)"
        )


def test_the_schema_knows_every_failure_stage_and_no_other() -> None:
    """``candidate_failed.stage``: the schema's enum is the report's STAGES (one list, not two)."""
    from aitune_fp.core.report import STAGES

    schema = event_schema()
    enums = [
        branch["then"]["properties"]["stage"]["enum"]
        for branch in schema.get("allOf", [])
        if "stage" in branch.get("then", {}).get("properties", {})
    ]
    assert enums and all(sorted(enum) == sorted(STAGES) for enum in enums)
