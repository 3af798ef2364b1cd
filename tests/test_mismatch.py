"""The worst mismatch a passing correctness check reports, against the accuracy budget."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jsonschema
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from structlog.testing import LogCapture

from aitune_fp.adapters.validation import with_performance_validation
from aitune_fp.backends.base import BackendBase
from aitune_fp.backends.quantized import Int8DynamicBackend
from aitune_fp.core.mismatch import Mismatch
from aitune_fp.correctness.check import check_correctness
from aitune_fp.correctness.compare import compare_outputs
from aitune_fp.correctness.tolerances import Tolerances
from aitune_fp.errors import InvalidTypeError, InvalidValueError
from aitune_fp.events.ingest import event_schema, ingest
from aitune_fp.inputs import GraphSpec, Sample
from aitune_fp.pipeline.strategies import OneBackendStrategy, try_candidate

from .validation_helpers import CLOCK, FAST_CONFIG, Pruned, make_case

errors = st.floats(min_value=0, max_value=1e6, allow_nan=False, allow_infinity=False)
tols = st.one_of(st.none(), st.floats(min_value=0, max_value=1, allow_nan=False))
mismatches = st.builds(
    Mismatch,
    max_abs_error=errors,
    max_rel_error=errors,
    budget_used=st.floats(min_value=0, max_value=2, allow_nan=False),
    atol=tols,
    rtol=tols,
    path=st.one_of(st.none(), st.sampled_from(["output", "output[0]", "output['x']"])),
    n_elements=st.integers(min_value=0, max_value=10**6),
)


class TestMismatchValue:
    @given(mismatches, mismatches)
    def test_merge_is_commutative(self, a: Mismatch, b: Mismatch) -> None:
        """Merging in either order gives the same worst case."""
        assert a.merge(b) == b.merge(a)

    @given(mismatches, mismatches, mismatches)
    def test_merge_is_associative(self, a: Mismatch, b: Mismatch, c: Mismatch) -> None:
        """Checks can be merged leaf by leaf, sample by sample, in any grouping."""
        assert a.merge(b).merge(c) == a.merge(b.merge(c))

    @given(st.lists(mismatches, max_size=6))
    def test_combine_keeps_the_worst_of_each(self, parts: list[Mismatch]) -> None:
        """The worst abs/rel error and budget use, the summed count, the worst use's tolerances."""
        total = Mismatch.combine(parts)
        assert total.max_abs_error == max((p.max_abs_error for p in parts), default=0.0)
        assert total.max_rel_error == max((p.max_rel_error for p in parts), default=0.0)
        assert total.budget_used == max((p.budget_used for p in parts), default=0.0)
        assert total.n_elements == sum(p.n_elements for p in parts)
        if parts:
            assert any(
                (p.budget_used, p.atol, p.rtol, p.path)
                == (total.budget_used, total.atol, total.rtol, total.path)
                for p in parts
            )
        assert total.within_budget == (total.budget_used <= 1.0)

    @pytest.mark.parametrize(
        ("field", "value", "error"),
        [
            ("max_abs_error", -1.0, InvalidValueError),
            ("budget_used", float("nan"), InvalidValueError),
            ("atol", float("inf"), InvalidValueError),
            ("n_elements", 1.5, InvalidTypeError),
            ("path", 3, InvalidTypeError),
        ],
    )
    def test_bad_values_name_the_field(self, field: str, value: object, error: type) -> None:
        """A negative, non-finite or wrong-typed figure is refused, naming the field."""
        with pytest.raises(error, match=field):
            Mismatch(**{field: value})  # type: ignore[arg-type]

    def test_merge_refuses_another_type(self) -> None:
        """Only mismatches merge."""
        with pytest.raises(TypeError, match="Mismatch"):
            Mismatch().merge(0.5)  # type: ignore[arg-type]


class TestReportedWhenPassing:
    def test_figures_of_a_close_tensor(self) -> None:
        """Abs and rel error, budget share, tolerances and path of a passing comparison."""
        expected = torch.tensor([1.0, 2.0, 0.0, -4.0])
        actual = expected + torch.tensor([5e-4, 0.0, 1e-4, 0.0])
        m = compare_outputs((actual,), (expected,))
        assert m.max_abs_error == pytest.approx(5e-4, rel=1e-3)
        assert m.max_rel_error == pytest.approx(5e-4, rel=1e-3)  # the 0 reference is left out
        assert m.budget_used == pytest.approx(5e-4 / (1e-3 + 1e-3 * 1.0), rel=1e-3)
        assert (m.atol, m.rtol, m.path, m.n_elements) == (1e-3, 1e-3, "output[0]", 4)
        assert m.within_budget

    def test_exact_outputs_use_nothing(self) -> None:
        """Identical floats and equal integers: zero errors, nothing of the budget used."""
        m = compare_outputs(
            {"a": torch.ones(3), "n": torch.arange(2)}, {"a": torch.ones(3), "n": torch.arange(2)}
        )
        assert (m.max_abs_error, m.max_rel_error, m.budget_used) == (0.0, 0.0, 0.0)
        assert m.n_elements == 5

    def test_the_budget_decides_the_share(self) -> None:
        """The same error uses ten times less of a ten times wider budget."""
        e = torch.full((8,), 2.0)
        a = e + 1e-3
        narrow = compare_outputs(a, e, tolerances=Tolerances(float32_atol=1e-2, float32_rtol=0.0))
        wide = compare_outputs(a, e, tolerances=Tolerances(float32_atol=1e-1, float32_rtol=0.0))
        assert narrow.budget_used == pytest.approx(10 * wide.budget_used, rel=1e-3)
        assert narrow.atol == 1e-2 and wide.atol == 1e-1

    def test_check_correctness_returns_the_worst_over_samples(self) -> None:
        """Over every sample and both batch sizes, the worst case is returned."""
        module = torch.nn.Linear(4, 4).eval()

        def candidate(x: torch.Tensor) -> torch.Tensor:
            return module(x) + 2e-4 * x.abs().max()

        data = [Sample((torch.ones(1, 4),)), Sample((torch.full((1, 4), 3.0),))]
        m = check_correctness(candidate, module, GraphSpec(4), data)
        assert m.max_abs_error == pytest.approx(6e-4, rel=1e-2)  # the second sample's
        assert 0 < m.budget_used <= 1

    def test_a_scalar_float_output_counts(self) -> None:
        """A float leaf is measured like a one-element tensor."""
        m = compare_outputs(1.0005, 1.0)
        assert m.max_abs_error == pytest.approx(5e-4)
        assert m.budget_used == pytest.approx(5e-4 / 2e-3)


def _events(cap: LogCapture, suffix: str) -> list[dict[str, Any]]:
    return [e for e in cap.entries if str(e["event"]).endswith(suffix)]


class TestRecorded:
    def test_in_the_result_and_the_correctness_event(
        self, logs: LogCapture, tmp_path: Path
    ) -> None:
        """A gated candidate's result carries its worst mismatch; so does correctness_checked."""
        module, spec, data = make_case()
        strategy = with_performance_validation(
            OneBackendStrategy(Pruned()), profiling_config=FAST_CONFIG, timer=CLOCK
        )
        strategy.tune(module, "m", spec, data, "cpu", tmp_path)
        (result,) = strategy.perf_validation_results
        (checked,) = _events(logs, ".correctness_checked")
        assert checked["backend_description"] == result.backend_description
        for key in ("max_abs_error", "max_rel_error", "budget_used", "atol", "rtol"):
            assert getattr(result, key) is not None, key
        assert result.budget_used is not None and result.budget_used <= 1.0
        # the result also covers the spot checks while timing: never less than before timing
        assert result.max_abs_error >= checked["max_abs_error"]  # type: ignore[operator]
        assert result.budget_used >= checked["budget_used"]
        assert "of the budget" in checked["summary"]
        validator = jsonschema.Draft202012Validator(event_schema())
        for entry in logs.entries:
            line = {k: v for k, v in entry.items() if k != "log_level"}
            validator.validate(line)
        (measured,) = _events(logs, ".candidate_measured")
        assert measured["result"]["accuracy"]["budget_used"] == result.budget_used

    def test_ingest_rebuilds_it(self, tmp_path: Path) -> None:
        """A result read back from the JSON-lines log has the same mismatch figures."""
        import json

        import structlog

        path = tmp_path / "events.jsonl"
        with path.open("w") as out:
            structlog.configure(
                processors=[structlog.processors.JSONRenderer()],
                logger_factory=structlog.PrintLoggerFactory(out),
            )
            module, spec, data = make_case()
            strategy = with_performance_validation(
                OneBackendStrategy(Pruned()), profiling_config=FAST_CONFIG, timer=CLOCK
            )
            strategy.tune(module, "m", spec, data, "cpu", tmp_path)
        (run,) = ingest(path).runs
        (result,) = strategy.perf_validation_results
        assert run.results[0].budget_used == result.budget_used
        assert run.results[0].max_abs_error == result.max_abs_error
        assert any(
            json.loads(line)["event"].endswith("correctness_checked")
            for line in path.read_text().splitlines()
        )

    def test_plain_outcome_carries_it(self, tmp_path: Path) -> None:
        """Without timing (try_candidate outside a tune) the outcome still says how close."""
        module, spec, data = make_case()
        outcome = try_candidate(Pruned(), module, "m", spec, data, "cpu", tmp_path)
        assert outcome.ok and outcome.mismatch is not None
        assert outcome.mismatch.within_budget


class TestPerBackendOverride:
    def test_an_override_changes_the_budget_the_check_uses(self, tmp_path: Path) -> None:
        """int8 on the MLP: passes its own budget, fails a float32 one, passes a wider one."""
        from aitune_fp.models import MODELS

        def run(backend: BackendBase) -> Any:
            model = MODELS["mlp"]()
            return try_candidate(
                backend, model.module, "mlp", model.graph_spec, [model.sample], "cpu", tmp_path
            )

        default = run(Int8DynamicBackend())
        # the atol used: 0.04 plus 5 % of the output's RMS (the MLP's outputs are small)
        assert default.ok and 0.04 < default.mismatch.atol < 0.07
        strict = Int8DynamicBackend()
        strict.tolerances = Tolerances()
        failed = run(strict)
        assert failed.stage == "correctness" and "atol=0.001" in failed.reason
        wide = Int8DynamicBackend()
        wide.tolerances = Tolerances(float32_atol=1.0, float32_rtol=0.5)
        loose = run(wide)
        assert loose.ok and loose.mismatch.atol == 1.0
        assert loose.mismatch.budget_used < default.mismatch.budget_used
        # the override belongs to that object only: a new backend has the default again
        assert Int8DynamicBackend().tolerances == Int8DynamicBackend.default_tolerances

    def test_weight_only_has_its_own_budget(self) -> None:
        """The weight-only setting declares a tighter relative budget than dynamic."""
        dynamic, weight_only = Int8DynamicBackend(), Int8DynamicBackend("weight-only")
        assert dynamic.tolerances is not None and weight_only.tolerances is not None
        assert weight_only.tolerances == Int8DynamicBackend.weight_only_tolerances
        assert weight_only.tolerances.float32_rtol < dynamic.tolerances.float32_rtol
        mine = Tolerances(float32_atol=0.3)
        weight_only.tolerances = mine
        assert weight_only.tolerances is mine
        weight_only.tolerances = None  # back to the setting's default
        assert weight_only.tolerances == Int8DynamicBackend.weight_only_tolerances


def test_docs_override_example_runs(capsys: pytest.CaptureFixture[str]) -> None:
    """The override example in docs/backends.md runs and prints what its comments say."""
    import re

    text = (Path(__file__).parent.parent / "docs" / "backends.md").read_text()
    section = text[text.index("## Accuracy budgets") : text.index("## Unavailable backends")]
    block = re.search(r"```python\n(.*?)```", section, re.S)
    assert block is not None
    namespace: dict[str, Any] = {}
    exec(compile(block.group(1), "docs/backends.md", "exec"), namespace)
    assert capsys.readouterr().out.split() == ["0.04", "0.02"]
    assert namespace["int8"].tolerances.float32_atol == 0.05
    for name in ("Int8DynamicBackend()", 'scheme="weight-only"', "OnnxRuntimeBackend()"):
        assert name in section
