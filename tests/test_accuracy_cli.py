"""Issue 25, what came after the criteria: calibration per tune, the flags, sweep keys, int8.

``Closeness(calibrate=True)`` measures eager's own noise floor once per tune and records it in
``baseline_measured``; a model that refuses a float64 copy is noted, not failed. The accuracy
settings reach the check from ``aitune-fp tune`` flags and a sweep's ``[accuracy]`` table, and
adjust whichever budget a backend has. int8 backends are judged by the norm criteria.
"""

from __future__ import annotations

import argparse
import copy
from pathlib import Path
from typing import Any, ClassVar

import pytest
import torch
from structlog.testing import LogCapture

from aitune_fp.adapters.validation import validation_of
from aitune_fp.backends.quantized import Int8DynamicBackend
from aitune_fp.cli import main
from aitune_fp.cli.tune_args import accuracy_options
from aitune_fp.core.accuracy import NoiseFloor, accuracy_conflict
from aitune_fp.correctness.closeness import Closeness
from aitune_fp.correctness.compare import compare_outputs
from aitune_fp.correctness.failures import CorrectnessError
from aitune_fp.correctness.tolerances import TIERS, Tolerances
from aitune_fp.errors import InvalidTypeError, InvalidValueError
from aitune_fp.pipeline.strategies import FirstWinsStrategy
from aitune_fp.sweep.spec import parse_sweep
from tests.cli_checks import usage_error
from tests.factories import schema_errors
from tests.validation_helpers import Pruned, gated, make_case

_BASELINE = "aitune_fp.validation.baseline_measured"


def _baseline_event(logs: LogCapture) -> dict[str, Any]:
    found = [e for e in logs.entries if e["event"] == _BASELINE]
    assert len(found) == 1
    errors = schema_errors(found[0])
    assert not errors, errors
    return found[0]


class TestCalibration:
    def test_the_floor_is_measured_once_and_used(self, tmp_path: Path, logs: LogCapture) -> None:
        """calibrate=True: the floor is in the event, the report and the candidates' check."""
        strategy = gated(FirstWinsStrategy([Pruned()]), closeness=Closeness(calibrate=True))
        module, spec, data = make_case()
        strategy.tune(module, "m", spec, data, "cpu", tmp_path)
        event = _baseline_event(logs)
        assert 0 < event["noise_floor_rel_l2"] < 1e-5  # float32 rounding
        assert event["noise_floor"]["rel_l2"] == {"output": event["noise_floor_rel_l2"]}
        assert "noise_floor_note" not in event
        report = validation_of(strategy).last_report
        assert report is not None and report.noise_floor_rel_l2 == event["noise_floor_rel_l2"]

    def test_no_calibration_adds_no_field(self, tmp_path: Path, logs: LogCapture) -> None:
        strategy = gated(FirstWinsStrategy([Pruned()]))
        module, spec, data = make_case()
        strategy.tune(module, "m", spec, data, "cpu", tmp_path)
        event = _baseline_event(logs)
        assert not any(key.startswith("noise_floor") for key in event)
        report = validation_of(strategy).last_report
        assert report is not None and report.noise_floor_rel_l2 is None

    def test_a_given_floor_is_kept_and_merged(self, tmp_path: Path, logs: LogCapture) -> None:
        """A floor the caller measured stays the larger one where it is larger."""
        given = NoiseFloor(rel_l2={"output": 0.5}, n_calls=1)
        closeness = Closeness(calibrate=True, noise_floor=given)
        strategy = gated(FirstWinsStrategy([Pruned()]), closeness=closeness)
        module, spec, data = make_case()
        strategy.tune(module, "m", spec, data, "cpu", tmp_path)
        event = _baseline_event(logs)
        assert event["noise_floor_rel_l2"] == 0.5
        assert event["noise_floor"]["n_calls"] > 1

    def test_a_model_refusing_float64_is_noted_not_failed(
        self, tmp_path: Path, logs: LogCapture
    ) -> None:
        """A module whose float64 copy cannot be made: no floor, a note, the tune goes on."""

        class NoDouble(torch.nn.Module):
            def __init__(self, inner: torch.nn.Module) -> None:
                super().__init__()
                self.inner = inner

            def forward(self, x: torch.Tensor) -> torch.Tensor:
                return self.inner(x)  # type: ignore[no-any-return]

            def double(self) -> NoDouble:
                raise TypeError("this model stays in float32")

        inner, spec, data = make_case()

        class PrunedInner(Pruned):
            def _infer(self, *args: Any, **kwargs: Any) -> Any:
                return self.module.inner.useful_forward(*args, **kwargs)

        strategy = gated(FirstWinsStrategy([PrunedInner()]), closeness=Closeness(calibrate=True))
        chosen = strategy.tune(NoDouble(inner), "m", spec, data, "cpu", tmp_path)
        assert isinstance(chosen, PrunedInner)
        event = _baseline_event(logs)
        assert "noise_floor_rel_l2" not in event
        assert "stays in float32" in event["noise_floor_note"]

    def test_the_header_shows_the_floor(self, capsys: pytest.CaptureFixture[str]) -> None:
        """``tune --calibrate-noise``: the eager baseline line names eager's noise floor."""
        flags = [
            "--backends",
            "eager",
            "--calibrate-noise",
            "--max-seconds",
            "1",
            "--looks",
            "10",
        ]
        code = main(["tune", *flags, "-q"])
        assert code == 0
        out = capsys.readouterr().out
        assert "eager's noise floor (float32 vs float64) rel L2" in " ".join(out.split())


def _args(**given: Any) -> argparse.Namespace:
    values = {
        "criteria": None,
        "rel_l2": None,
        "outlier_share": None,
        "calibrate": False,
        "noise_factor": None,
    }
    return argparse.Namespace(**{**values, **given})


class TestFlags:
    def test_flags_become_closeness_settings(self) -> None:
        options = accuracy_options(
            _args(criteria="norm", rel_l2=0.05, calibrate=True, noise_factor=4.0)
        )
        assert options == {
            "criteria": "norm",
            "rel_l2": 0.05,
            "calibrate": True,
            "noise_factor": 4.0,
        }
        assert accuracy_options(_args()) == {}

    @pytest.mark.parametrize(
        ("args", "match"),
        [
            (["--accuracy", "elementwise", "--rel-l2", "0.1"], "--rel-l2 applies to the norm"),
            (["--accuracy", "elementwise", "--calibrate-noise"], "--calibrate-noise applies"),
            (["--accuracy", "elementwise", "--outlier-share", "0"], "--outlier-share applies"),
            (["--noise-factor", "3"], "give it with --calibrate-noise"),
            (["--rel-l2", "-1"], "--rel-l2 must be >= 0"),
            (["--rel-l2", "nan"], "--rel-l2 must be finite"),
            (["--outlier-share", "2"], "--outlier-share must be at most 1"),
            (["--calibrate-noise", "--noise-factor", "-2"], "--noise-factor must be >= 0"),
            (["--accuracy", "loose"], "--accuracy: invalid choice"),
            (["--rel-l2", "x"], "--rel-l2: invalid float value"),
        ],
    )
    def test_bad_values_exit_2_naming_the_flag(
        self, args: list[str], match: str, capsys: pytest.CaptureFixture[str]
    ) -> None:
        assert match in usage_error(["tune", *args], capsys)


class TestClosenessSettings:
    def test_elementwise_keeps_each_backends_own_budget(self) -> None:
        """criteria="elementwise" turns the norm tiers off, on the backend's own budget."""
        own = Int8DynamicBackend().tolerances
        assert own is not None
        budget = Closeness(criteria="elementwise").budget(Int8DynamicBackend())
        assert budget == Tolerances(**{**_fields(own), "norm_tiers": ()})
        assert Closeness(criteria="elementwise").budget(object()) == Tolerances(norm_tiers=())

    def test_norm_and_budgets(self) -> None:
        budget = Closeness(criteria="norm", rel_l2=0.05, outlier_share=0.01).budget(object())
        assert budget is not None and budget.norm_tiers == TIERS
        assert (budget.float32_rel_l2, budget.reduced_rel_l2) == (0.05, 0.05)
        assert budget.outlier_share == 0.01
        assert Closeness().budget(object()) is None  # nothing asked: the default tiers

    def test_explicit_tolerances_are_adjusted_too(self) -> None:
        given = Tolerances(reduced_rel_l2=0.5)
        budget = Closeness(tolerances=given, outlier_share=0.2).budget(Int8DynamicBackend())
        assert budget == Tolerances(reduced_rel_l2=0.5, outlier_share=0.2)

    @pytest.mark.parametrize(
        ("kwargs", "error", "match"),
        [
            ({"criteria": "loose"}, InvalidValueError, "criteria must be one of"),
            ({"criteria": "elementwise", "rel_l2": 0.1}, InvalidValueError, "applies to the norm"),
            ({"noise_factor": 3.0}, InvalidValueError, "give it with calibrate"),
            ({"calibrate": 1}, InvalidTypeError, "calibrate"),
            ({"outlier_share": 1.5}, InvalidValueError, "at most 1"),
        ],
    )
    def test_refused(self, kwargs: dict[str, Any], error: type[Exception], match: str) -> None:
        with pytest.raises(error, match=match):
            Closeness(**kwargs)

    def test_noise_factor_with_a_given_floor(self) -> None:
        floor = NoiseFloor(rel_l2={"output": 0.1})
        assert Closeness(noise_floor=floor, noise_factor=2.0).budget(object()) is not None

    def test_conflict_names_the_callers_spelling(self) -> None:
        problem = accuracy_conflict("elementwise", ["rel_l2"], {"rel_l2": "accuracy.rel_l2"})
        assert problem is not None and problem.startswith("accuracy.rel_l2 applies")
        assert accuracy_conflict("auto", ["rel_l2", "calibrate", "noise_factor"]) is None


def _fields(tol: Tolerances) -> dict[str, Any]:
    import attrs

    return attrs.asdict(tol)


class TestSweepAccuracy:
    _BASE: ClassVar[dict[str, Any]] = {"models": [{"model": "mlp"}]}

    def test_the_table_reaches_the_spec(self) -> None:
        spec = parse_sweep(
            {**self._BASE, "accuracy": {"criteria": "norm", "rel_l2": 0.05, "calibrate": True}}
        )
        assert dict(spec.accuracy) == {"criteria": "norm", "rel_l2": 0.05, "calibrate": True}
        Closeness(**dict(spec.accuracy))  # what each task builds
        assert parse_sweep(self._BASE).accuracy == ()

    def test_the_tasks_carry_it(self) -> None:
        from aitune_fp.sweep.task import make_tasks

        spec = parse_sweep({**self._BASE, "accuracy": {"outlier_share": 0.01}})
        (task,) = make_tasks(spec, "s", "/tmp/unused")
        assert task.spec.accuracy == (("outlier_share", 0.01),)

    @pytest.mark.parametrize(
        ("table", "match"),
        [
            ({"tolerance": 1}, "tolerance"),
            ({"criteria": "loose"}, "accuracy.criteria"),
            ({"rel_l2": "big"}, "accuracy.rel_l2 must be a real number"),
            ({"rel_l2": -1}, "accuracy.rel_l2 must be >= 0"),
            ({"outlier_share": 2}, "accuracy.outlier_share must be at most 1"),
            ({"calibrate": "yes"}, "accuracy.calibrate must be a bool"),
            ({"criteria": "elementwise", "rel_l2": 0.1}, "accuracy.rel_l2 applies"),
            ({"noise_factor": 2}, "give it with accuracy.calibrate"),
        ],
    )
    def test_bad_keys_are_named(self, table: dict[str, Any], match: str) -> None:
        with pytest.raises((InvalidValueError, InvalidTypeError), match=match):
            parse_sweep({**self._BASE, "accuracy": table})


class TestInt8UsesTheNormCriteria:
    @pytest.mark.parametrize("scheme", ["dynamic", "weight-only"])
    def test_its_budget_opts_float32_in(self, scheme: Any) -> None:
        tol = Int8DynamicBackend(scheme).tolerances
        assert tol is not None and tol.norm_decides(torch.float32)

    def test_rounding_passes_and_a_wrong_output_fails(self, tmp_path: Path) -> None:
        """The real int8 copy passes by norms; the same outputs permuted fail, by how much."""
        torch.manual_seed(0)
        net = torch.nn.Sequential(
            torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10)
        ).eval()
        x = torch.randn(64, 64)
        backend = Int8DynamicBackend()
        from aitune_fp.inputs import GraphSpec, Sample

        backend.build(net, GraphSpec(max_batch_size=64), [Sample((x,))], "cpu", tmp_path)
        with torch.no_grad():
            expected, actual = net(x), backend(x)
        found = compare_outputs(actual, expected, tolerances=backend.tolerances)
        names = [c.name for c in found.criteria]
        assert names == ["rel_l2", "outlier_share", "top1_agreement"]
        wrong = copy.deepcopy(actual).flip(0)
        with pytest.raises(CorrectnessError, match=r"rel L2 .* > budget 0\.1"):
            compare_outputs(wrong, expected, tolerances=backend.tolerances)
