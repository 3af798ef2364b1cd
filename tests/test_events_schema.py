"""The events JSON Schema: generated from the event classes, every builder's payload validates,
and the built-in checker agrees with jsonschema.
"""

from __future__ import annotations

import json
import pickle
from pathlib import Path
from typing import Any

import attrs
import jsonschema
import pytest
import structlog
from hypothesis import given, reject, settings
from hypothesis import strategies as st

from aitune_fp.core.mismatch import Mismatch
from aitune_fp.core.results import PARTS, PerformanceValidationResult
from aitune_fp.errors import InvalidTypeError, InvalidValueError
from aitune_fp.events import kinds
from aitune_fp.events import schema as events_schema
from aitune_fp.events.candidates import (
    CANDIDATE_MEASURED,
    CandidateFailed,
    CandidateMeasured,
    CandidateRejected,
    CorrectnessChecked,
    HeadtoheadLook,
    LatencyChecked,
    SelectionDecided,
)
from aitune_fp.events.ingest import EventLine, event_schema, read_events
from aitune_fp.events.kinds import SCHEMA_VERSION, SWEEP_PREFIX, Event, Payload, event_names
from aitune_fp.events.kinds import event as event_kind
from aitune_fp.events.schema import (
    REGENERATE,
    SCHEMA_PATH,
    build_schema,
    property_schema,
    schema_text,
)
from aitune_fp.events.sweep import (
    SWEEP_FINISHED,
    SWEEP_STARTED,
    TASK_FAILED,
    TASK_FINISHED,
    SweepFinished,
    SweepStarted,
    TaskFailed,
    TaskFinished,
)
from aitune_fp.events.validation import (
    STARTED,
    BaselineFailed,
    BaselineMeasured,
    Disabled,
    EvalMode,
    Finished,
    Look,
    PhaseEntered,
    Selected,
    Started,
)

from .factories import fake_result, flat_result
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


def _selection_events() -> list[Event]:
    """A head-to-head look and its choice (one eliminated), and two latency checks."""
    from aitune_fp.core.quantiles import LatencyCheck, quantile_upper_bound
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
        HeadtoheadLook.of(RUN, MODULE, state),
        SelectionDecided(
            run_id=RUN, module_name=MODULE, selection=state, delta=rule.delta
        ).to_event(),
        LatencyChecked(
            run_id=RUN,
            module_name=MODULE,
            **LatencyCheck(backend_description="A()", bound=few, budget_s=0.01).to_dict(),
        ).to_event(),
        LatencyChecked(
            run_id=RUN,
            module_name=MODULE,
            **LatencyCheck(backend_description="A()", bound=many, budget_s=0.01).to_dict(),
        ).to_event(),
    ]


def _every_event() -> list[Event]:
    """One event from every builder, with representative values (None where allowed)."""
    passed = _result()
    point = flat_result("X()", 90.0, 100.0, 0.9, False)
    return [
        Started(
            run_id=RUN,
            module_name=MODULE,
            strategy="MaxThroughputStrategy",
            device="cpu",
            decision="statistical",
            min_speedup_threshold_percent=1.0,
            required_speedup=1.01,
            batch_size=32,
        ).to_event(),
        Started(
            run_id=RUN,
            module_name=MODULE,
            strategy="S",
            device="cuda:0",
            decision="point",
            min_speedup_threshold_percent=-5.0,
            required_speedup=0.95,
            batch_size=None,
        ).to_event(),
        Disabled(run_id=RUN, module_name=MODULE, strategy="FirstWinsStrategy").to_event(),
        *_selection_events(),
        EvalMode(run_id=RUN, module_name=MODULE, n_training_modules=3).to_event(),
        Look(
            run_id=RUN,
            module_name=MODULE,
            backend_description="TorchCompileBackend()",
            n_pairs=10,
            max_pairs=160,
            verdict="inconclusive",
            estimate=1.02,
            ci_low=0.97,
            ci_high=None,
        ).to_event(),
        *(
            PhaseEntered(
                run_id=RUN, module_name=MODULE, backend_description="TorchEagerBackend()", phase=p
            ).to_event()
            for p in ("baseline_build", "baseline_measure", "build", "correctness", "measure")
        ),
        BaselineMeasured(
            run_id=RUN,
            module_name=MODULE,
            backend_description="TorchEagerBackend()",
            batch_size=32,
            throughput_samples_per_s=1000.0,
            n_calls=30,
            duration_s=0.5,
            decision="point",
        ).to_event(),
        BaselineFailed(
            run_id=RUN,
            module_name=MODULE,
            error_type="RuntimeError",
            reason="boom",
            traceback_path="/tmp/tb.txt",
        ).to_event(),
        BaselineFailed(
            run_id=RUN,
            module_name=MODULE,
            error_type="RuntimeError",
            reason="boom",
            traceback_path=None,
        ).to_event(),
        CorrectnessChecked.of(
            RUN,
            MODULE,
            "Int8DynamicBackend()",
            Mismatch(
                max_abs_error=0.03,
                max_rel_error=0.2,
                budget_used=0.25,
                atol=0.1,
                rtol=0.05,
                path="output",
                n_elements=8448,
            ),
        ),
        CorrectnessChecked.of(RUN, MODULE, "X()", Mismatch(n_elements=4)),
        CandidateMeasured(run_id=RUN, module_name=MODULE, result=passed, duration_s=2.5).to_event(),
        CandidateMeasured(
            run_id=RUN,
            module_name=MODULE,
            result=_result(
                max_abs_error=0.01, max_rel_error=0.5, budget_used=0.9, atol=1e-3, rtol=0.0
            ),
            duration_s=2.5,
        ).to_event(),
        CandidateMeasured(run_id=RUN, module_name=MODULE, result=point, duration_s=0.1).to_event(),
        CandidateMeasured(
            run_id=RUN,
            module_name=MODULE,
            result=_result(ci_high=None, passed=False, verdict="inconclusive", ci_low=0.0),
            duration_s=1.0,
        ).to_event(),
        CandidateRejected.of(
            RUN, MODULE, _result(passed=False, verdict="not_faster", ci_low=0.8, ci_high=0.9)
        ),
        CandidateRejected.of(RUN, MODULE, point),
        *(
            CandidateFailed(
                run_id=RUN,
                module_name=MODULE,
                backend_description="CudaGraphBackend()",
                stage=stage,
                error_type="ValueError",
                reason="bad",
                traceback_path=None,
            ).to_event()
            for stage in ("unavailable", "build", "correctness", "profiling", "strategy")
        ),
        Selected.of(
            RUN,
            MODULE,
            backend_description="TorchCompileBackend()",
            is_baseline=False,
            result=passed,
            baseline_throughput=1000.0,
            info_on=True,
        ),
        Selected.of(
            RUN,
            MODULE,
            backend_description="TorchEagerBackend()",
            is_baseline=True,
            result=None,
            baseline_throughput=None,
            info_on=False,
        ),
        Finished(
            run_id=RUN,
            module_name=MODULE,
            outcome="candidate",
            backend_description="TorchCompileBackend()",
            n_candidates=2,
            n_measured=2,
            n_passed=1,
            n_failed=0,
            duration_s=12.0,
        ).to_event(),
        Finished(
            run_id=RUN,
            module_name=MODULE,
            outcome="error",
            backend_description=None,
            n_candidates=1,
            n_measured=0,
            n_passed=0,
            n_failed=1,
            duration_s=0.0,
            reason="strategy raised",
        ).to_event(),
        SweepStarted(
            run_id=RUN,
            module_name="sweep",
            executor="ray",
            models=["mlp", "convnet"],
            skipped_models=["convnet"],
        ).to_event(),
        TaskFinished(
            run_id=RUN,
            module_name=MODULE,
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
            duration_s=max(112.5 - 100.0, 0.0),
        ).to_event(),
        TaskFailed(
            run_id=RUN,
            module_name=MODULE,
            error_type="WorkerCrashedError",
            reason="worker died",
            tune_run_id=None,
            hostname=None,
        ).to_event(),
        SweepFinished(
            run_id=RUN,
            module_name="sweep",
            finished_models=["convnet"],
            failed_models=["mlp"],
            duration_s=30.0,
        ).to_event(),
    ]


def _line(event: Event) -> dict[str, Any]:
    return {"event": event.name, **event.fields}


VALIDATOR = jsonschema.Draft202012Validator(event_schema())


def _reads(line: dict[str, Any]) -> bool:
    """Whether ingest reads ``line`` as an event (through its class)."""
    (item,) = read_events([json.dumps(line)])
    return isinstance(item, EventLine)


class TestSchemaFile:
    def test_schema_is_valid_draft_2020_12(self) -> None:
        """The shipped schema is itself a valid draft 2020-12 schema."""
        jsonschema.Draft202012Validator.check_schema(event_schema())

    def test_schema_names_every_event(self) -> None:
        """The schema's event enum is exactly the registered event names."""
        enum = event_schema()["properties"]["event"]["enum"]
        assert sorted(enum) == sorted(event_names())

    def test_schema_version_matches(self) -> None:
        """The schema pins the schema_version events.py writes."""
        assert event_schema()["properties"]["schema_version"]["const"] == SCHEMA_VERSION


class TestBuildersValidate:
    def test_every_builder_is_covered(self) -> None:
        """The sample events cover every event name."""
        assert {e.name for e in _every_event()} == set(event_names())

    @pytest.mark.parametrize("event", _every_event(), ids=lambda e: e.name.rsplit(".", 1)[-1])
    def test_builder_payload_validates(self, event: Event) -> None:
        """Each builder's payload validates with jsonschema and reads back through its class."""
        line = _line(event)
        VALIDATOR.validate(line)
        assert _reads(line)

    @pytest.mark.parametrize("event", _every_event(), ids=lambda e: e.name.rsplit(".", 1)[-1])
    def test_rendered_json_line_validates(self, event: Event) -> None:
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
        assert _reads(parsed)

    @pytest.mark.parametrize("event", _every_event(), ids=lambda e: e.name.rsplit(".", 1)[-1])
    def test_dropping_a_required_key_fails_in_both(self, event: Event) -> None:
        """Removing any key the schema requires makes jsonschema and the reader refuse the line."""
        line = _line(event)
        schema = event_schema()
        required = list(schema["required"])
        for clause in schema["allOf"]:
            if clause["if"]["properties"]["event"]["const"] == event.name:
                required += clause["then"]["required"]
        for key in required:
            broken = {k: v for k, v in line.items() if k != key}
            assert not VALIDATOR.is_valid(broken), key
            assert not _reads(broken), key


class TestReaderAgreesWithJsonschema:
    @pytest.mark.parametrize(
        ("part", "key", "value"),
        [
            (None, "schema_version", SCHEMA_VERSION + 1),  # newer than this reader
            (None, "schema_version", True),
            (None, "run_id", 5),
            (None, "event", "aitune_fp.validation.unknown"),
            (None, "duration_s", "1"),
            ("", "speedup", -1.0),
            ("", "speedup", "fast"),
            ("", "passed", 1),
            ("", "baseline_throughput", 0.0),
            ("decided", "verdict", "maybe"),
            ("decided", "batch_size", 0),
            ("decided", "batch_size", 2.5),
            ("decided", "n_baseline", True),
            ("decided", "confidence", 1.0),
            ("decided", "ci_low", None),
            ("accuracy", "budget_used", -0.1),
            ("accuracy", "max_abs_error", "small"),
            ("accuracy", "atol", None),
            ("environment", "isolation", "thread"),
        ],
    )
    def test_bad_values_rejected_by_both(self, part: str | None, key: str, value: Any) -> None:
        """A candidate_measured line with one bad value fails both, nested or not (None ok)."""
        line = _line(
            CandidateMeasured(
                run_id=RUN, module_name=MODULE, result=_result(), duration_s=1.0
            ).to_event()
        )
        if part is None:
            line[key] = value
        elif part == "":
            line["result"][key] = value
        else:
            line["result"][part][key] = value
        assert VALIDATOR.is_valid(line) == _reads(line)

    @given(
        throughput=throughputs,
        baseline=throughputs,
        n=st.integers(min_value=0, max_value=10_000),
        passed=st.booleans(),
    )
    def test_random_results_validate(
        self, throughput: float, baseline: float, n: int, passed: bool
    ) -> None:
        """candidate_measured events built from arbitrary valid results validate and read back."""
        result = flat_result(
            "B()",
            throughput,
            baseline,
            throughput / baseline,
            passed,
            n_baseline=n,
            n_candidate=n,
            verdict="faster" if passed else "not_faster",
        )
        line = _line(
            CandidateMeasured(
                run_id=RUN, module_name=MODULE, result=result, duration_s=0.0
            ).to_event()
        )
        VALIDATOR.validate(line)
        assert _reads(line)


class TestMeasuredSummary:
    def test_statistical_line_shows_the_estimate_and_the_verdict(self) -> None:
        """An undecided 1.04x mean ratio is not called 'slower': the line shows what decided."""
        result = flat_result(
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
        summary = (
            CandidateMeasured(run_id=RUN, module_name=MODULE, result=result, duration_s=1.0)
            .to_event()
            .fields["summary"]
        )
        assert summary == (
            "📊 Int8DynamicBackend(): batch size=32, speedup 1.00x [0.999, 1.049] → inconclusive"
        )

    def test_point_line_is_aitunes(self) -> None:
        """Point mode keeps AITune's line byte for byte (its ▲/▼ is the point rule's pass)."""
        result = flat_result(
            "X()", 200.0, 100.0, 2.0, True, batch_size=8, verdict="faster", decision="point"
        )
        summary = (
            CandidateMeasured(run_id=RUN, module_name=MODULE, result=result, duration_s=1.0)
            .to_event()
            .fields["summary"]
        )
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


# --------------------------------------------------------------------------------------------
# The schema is generated from the event classes (issue 21)
# --------------------------------------------------------------------------------------------


def _from_schema(schema: dict[str, Any]) -> st.SearchStrategy[Any]:
    """Values a (generated) key schema admits: enough of JSON Schema for the events' keys."""
    if "const" in schema:
        return st.just(schema["const"])
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    kinds = schema.get("type")
    if isinstance(kinds, list):
        return st.one_of([_from_schema({**schema, "type": kind}) for kind in kinds])
    if kinds == "null":
        return st.none()
    if kinds == "boolean":
        return st.booleans()
    if kinds == "string":
        return st.text(min_size=schema.get("minLength", 0), max_size=8)
    if kinds == "integer":
        low = schema.get("minimum", schema.get("exclusiveMinimum", -(10**6) - 1) + 1)
        return st.integers(min_value=low, max_value=10**6)
    if kinds == "number":
        return st.floats(
            min_value=schema.get("minimum", schema.get("exclusiveMinimum", -1e9)),
            max_value=schema.get("exclusiveMaximum", 1e9),
            exclude_min="exclusiveMinimum" in schema,
            exclude_max="exclusiveMaximum" in schema,
            allow_nan=False,
        )
    if kinds == "array":
        return st.lists(_from_schema(schema["items"]), max_size=2)
    if kinds == "object" and "properties" in schema:
        props = schema["properties"]
        required = set(schema.get("required", ()))
        return st.fixed_dictionaries(
            {k: _from_schema(v) for k, v in props.items() if k in required},
            optional={k: _from_schema(v) for k, v in props.items() if k not in required},
        )
    if kinds == "object":
        values = _from_schema(schema.get("additionalProperties", {"type": "integer"}))
        return st.dictionaries(st.text(max_size=4), values, max_size=2)
    raise AssertionError(f"no strategy for {schema}")


def _payloads(name: str) -> st.SearchStrategy[dict[str, Any]]:
    """A payload of event ``name`` drawn from the generated schema (common keys and its own)."""
    generated = build_schema()
    block = next(b["then"] for b in generated["allOf"] if b["if"] == _if(name))
    common = {k: generated["properties"][k] for k in ("run_id", "module_name", "summary")}
    return _from_schema(
        {
            "type": "object",
            "required": [*common, *block["required"]],
            "properties": {**common, **block["properties"]},
        }
    )


def _if(name: str) -> dict[str, Any]:
    return {"properties": {"event": {"const": name}}}


class TestGeneratedSchema:
    def test_the_shipped_file_is_the_generated_one(self) -> None:
        """aitune_fp/events.schema.json is what the classes generate (regenerate it if not)."""
        assert SCHEMA_PATH.read_text(encoding="utf-8") == schema_text(), (
            f"{SCHEMA_PATH.name} is stale: run `{REGENERATE}` and commit the file"
        )
        assert event_schema() == build_schema()

    def test_main_rewrites_a_stale_file_and_checks_it(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """``--check`` says 1 on a stale file and writes nothing; a plain run rewrites it."""
        target = tmp_path / "events.schema.json"
        target.write_text("{}\n", encoding="utf-8")
        monkeypatch.setattr(events_schema, "SCHEMA_PATH", target)
        assert events_schema.main(["--check"]) == 1
        assert target.read_text(encoding="utf-8") == "{}\n"
        assert events_schema.main([]) == 0
        assert target.read_text(encoding="utf-8") == schema_text()
        assert events_schema.main(["--check"]) == 0
        capsys.readouterr()
        assert events_schema.main([]) == 0  # nothing to write: says so, writes nothing
        assert capsys.readouterr().out.strip().endswith("is up to date")
        with pytest.raises(SystemExit) as help_exit:
            events_schema.main(["--help"])
        assert help_exit.value.code == 0 and "--check" in capsys.readouterr().out

    def test_every_registered_class_has_its_block_and_nothing_else(self) -> None:
        """One block per class, in event-name order, each with exactly the class's own keys."""
        generated = build_schema()
        names = [b["if"]["properties"]["event"]["const"] for b in generated["allOf"]]
        assert names == sorted(names) == list(event_names())
        assert generated["properties"]["event"]["enum"] == list(event_names())
        for block, name in zip(generated["allOf"], names, strict=True):
            cls = kinds.registered()[name]
            assert list(block["then"]["properties"]) == list(cls.payload_keys())
            assert set(block["then"]["required"]) <= set(cls.payload_keys())

    def test_every_key_is_typed(self) -> None:
        """No key of any event is left unconstrained: each has a type, an enum or a const."""
        generated = build_schema()
        blocks = [b["then"]["properties"] for b in generated["allOf"]]
        for props in [generated["properties"], *blocks]:
            for key, sub in props.items():
                assert {"type", "enum", "const"} & set(sub), key

    def test_required_keys_are_the_fields_without_a_default(self) -> None:
        """A class's field without a default is a required key; one with a default is not."""
        for name, cls in kinds.registered().items():
            block = next(b["then"] for b in build_schema()["allOf"] if b["if"] == _if(name))
            own = [a for a in attrs.fields(cls) if a.name in cls.payload_keys()]
            assert block["required"] == [a.name for a in own if a.default is attrs.NOTHING]

    def test_candidate_measured_carries_the_result_in_its_parts(self) -> None:
        """Its keys are the result and ``duration_s``; the result's are AITune's five and its parts."""
        assert CandidateMeasured.payload_keys() == ("result", "duration_s")
        built = CandidateMeasured(
            run_id=RUN, module_name=MODULE, result=_result(), duration_s=1.0
        ).to_event()
        assert list(built.fields["result"]) == [
            a.name for a in attrs.fields(PerformanceValidationResult)
        ]
        schema = build_schema()
        block = next(b["then"] for b in schema["allOf"] if b["if"] == _if(CANDIDATE_MEASURED))
        for part, cls in PARTS.items():
            props = block["properties"]["result"]["properties"][part]["properties"]
            assert list(props) == [a.name for a in attrs.fields(cls)]

    def test_a_record_nested_in_an_event_carries_its_bounds(self) -> None:
        """A record's types, required keys and validators' bounds become its nested schema."""
        from aitune_fp.core._checks import finite, integer, not_nan, one_of, open_interval

        @attrs.frozen(kw_only=True)
        class Record:
            ratio: float = attrs.field(validator=finite(minimum=0, strict=True))
            level: float | None = attrs.field(
                default=None, validator=attrs.validators.optional(open_interval(0, 1))
            )
            count: int = attrs.field(default=3, validator=integer(minimum=2))
            mode: str | None = attrs.field(
                default=None, validator=attrs.validators.optional(one_of(("a", "b")))
            )
            high: float = attrs.field(default=1.0, validator=not_nan())
            note: str = "x"

        assert property_schema(Record) == {
            "type": "object",
            "required": ["ratio"],
            "properties": {
                "ratio": {"type": "number", "exclusiveMinimum": 0},
                "level": {"type": ["number", "null"], "exclusiveMinimum": 0, "exclusiveMaximum": 1},
                "count": {"type": "integer", "minimum": 2},
                "mode": {"enum": ["a", "b", None]},
                "high": {"type": ["number", "null"], "description": "null: unbounded (infinite)"},
                "note": {"type": "string"},
            },
        }

    @pytest.mark.parametrize("hint", [int | str, set[int], complex, "int"])
    def test_a_type_with_no_schema_is_refused(self, hint: Any) -> None:
        """A key type the generator cannot say in JSON Schema is an error, not a loose key."""
        with pytest.raises(InvalidTypeError, match="no JSON Schema"):
            property_schema(hint)

    @pytest.mark.parametrize("name", event_names())
    @settings(max_examples=25, deadline=None)
    @given(data=st.data())
    def test_drawn_payloads_round_trip_and_validate(self, name: str, data: st.DataObject) -> None:
        """A payload the schema admits builds its class (but for checks across fields); the
        class gives it back, valid and read again as the same value."""
        record = data.draw(_payloads(name))
        cls = kinds.registered()[name]
        try:
            value = cls.from_fields(record)
        except InvalidValueError:  # a check across fields (ci_low <= ci_high) the schema lacks
            reject()
        fields = value.to_fields()
        flat = {k: v for k, v in record.items() if not isinstance(v, dict)}  # records: below
        assert {k: v for k, v in fields.items() if k in flat} == flat
        assert cls.from_fields(fields) == value
        line = {"event": name, **fields}
        VALIDATOR.validate(line)
        assert _reads(line)


class TestPayloadClasses:
    def test_an_event_carries_its_typed_payload(self) -> None:
        """Each builder's Event holds the class value it was made from; its fields are that value's."""
        for built in _every_event():
            assert isinstance(built.payload, kinds.registered()[built.name])
            assert built.payload.to_fields() == dict(built.fields)
            assert built.payload.event_name == built.name

    def test_events_pickle_with_their_payloads(self) -> None:
        """An Event crosses a process boundary with its typed payload (slotted classes, all)."""
        for built in _every_event():
            back = pickle.loads(pickle.dumps(built))
            assert back == built and back.payload == built.payload
            assert type(back.payload) is type(built.payload)

    def test_absent_keys_are_left_out_and_non_finite_floats_are_null(self) -> None:
        """``started`` without a CPU has no thread keys; an infinite estimate is written null."""
        fields = Started(
            run_id=RUN,
            module_name=MODULE,
            strategy="S",
            device="cpu",
            decision="point",
            min_speedup_threshold_percent=1.0,
            required_speedup=1.01,
            batch_size=None,
            summary="s",
        ).to_fields()
        assert "threads" not in fields and "load_avg_1m" not in fields
        look = Look(
            run_id=RUN,
            module_name=MODULE,
            summary="s",
            backend_description="A()",
            n_pairs=1,
            max_pairs=2,
            verdict="inconclusive",
            estimate=1.0,
            ci_low=0.5,
            ci_high=float("inf"),
        )
        assert look.to_fields()["ci_high"] is None
        assert look.to_event().level == "debug" and look.to_event("info").level == "info"

    def test_from_fields_refuses_unknown_and_missing_keys(self) -> None:
        """A payload with a key its class lacks, or without a required key, is refused."""
        fields = Disabled(run_id=RUN, module_name=MODULE, strategy="S").to_event().fields
        assert Disabled.from_fields(fields).strategy == "S"
        with pytest.raises(InvalidValueError, match="no key"):
            Disabled.from_fields({**fields, "extra": 1})
        with pytest.raises(InvalidValueError, match="strategy"):
            Disabled.from_fields({k: v for k, v in fields.items() if k != "strategy"})

    def test_registering_refuses_a_taken_name_reserved_keys_and_plain_classes(self) -> None:
        """A name is registered once; no key may be a renderer's; the class must be attrs."""

        @attrs.frozen(kw_only=True)
        class Clash(Payload):
            timestamp: str

        class Plain(Payload):
            pass

        with pytest.raises(InvalidValueError, match="already registered"):
            event_kind(STARTED, "info")(Disabled)
        with pytest.raises(InvalidValueError, match="reserved"):
            event_kind("aitune_fp.validation.clash", "info")(Clash)
        with pytest.raises(InvalidTypeError, match="attrs Payload"):
            event_kind("aitune_fp.validation.plain", "info")(Plain)
        assert set(kinds.registered()) == set(event_names())

    def test_the_name_constants_are_the_classes_names(self) -> None:
        """``STARTED`` and the like are the registered names, unchanged."""
        assert STARTED == Started.event_name == "aitune_fp.validation.started"
        sweep = {SWEEP_FINISHED, SWEEP_STARTED, TASK_FAILED, TASK_FINISHED}
        assert sweep <= set(event_names(SWEEP_PREFIX))
        assert all(n.startswith("aitune_fp.sweep.") for n in event_names(SWEEP_PREFIX))


class TestAdditionalProperties:
    @pytest.mark.parametrize(
        ("rel_l2", "valid"),
        [({"out": 0.01}, True), ({"out": -0.5}, False), ({"out": "x"}, False), ({}, True)],
    )
    def test_noise_floor_leaves_are_checked_by_both(
        self, rel_l2: dict[str, Any], valid: bool
    ) -> None:
        """``noise_floor.rel_l2`` (any leaf name) holds non-negative numbers (jsonschema)."""
        built = BaselineMeasured(
            run_id=RUN,
            module_name=MODULE,
            backend_description="E()",
            batch_size=1,
            throughput_samples_per_s=1.0,
            n_calls=1,
            duration_s=0.1,
            decision="point",
            noise_floor_rel_l2=0.01,
            noise_floor={"rel_l2": rel_l2, "n_calls": 4},
        ).to_event()
        line = _line(built)
        assert VALIDATOR.is_valid(line) is valid
