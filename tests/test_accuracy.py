"""Norm-based accuracy criteria (issue 25): the pure core, the torch reductions, calibration.

Reduced precision is judged by relative L2 error, outlier share and top-1 agreement, so a
handful of rounding outliers does not reject while a wrong output still does; float32 keeps the
element-wise check. Eager's own float32-vs-float64 error can lift a budget; a user metric can
decide too.
"""

from __future__ import annotations

import copy
import itertools
import math
import pickle
from typing import Any

import jsonschema
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from aitune_fp.core.accuracy import (
    Criterion,
    LeafStats,
    NoiseFloor,
    NormBudgets,
    degradation,
    judge_leaf,
    metric_criterion,
    rel_l2,
    rel_l2_budget,
    worst_per_criterion,
)
from aitune_fp.core.mismatch import Mismatch
from aitune_fp.correctness.check import check_correctness
from aitune_fp.correctness.closeness import Closeness
from aitune_fp.correctness.compare import compare_outputs
from aitune_fp.correctness.failures import CorrectnessError
from aitune_fp.correctness.noise import eager_noise_floor
from aitune_fp.correctness.tolerances import Tolerances
from aitune_fp.errors import InvalidTypeError, InvalidValueError
from aitune_fp.events.candidates import CorrectnessChecked
from aitune_fp.events.ingest import event_schema
from aitune_fp.inputs import GraphSpec, Sample
from tests.factories import schema_errors

SPEC = GraphSpec(4, min_batch_size=1)
ELEMENTWISE = Tolerances(norm_tiers=())  # today's behaviour in every tier

figures = st.floats(min_value=0, max_value=1e6, allow_nan=False)
shares = st.floats(min_value=0, max_value=1)
names = st.sampled_from(["rel_l2", "outlier_share", "metric"])


def criteria() -> st.SearchStrategy[Criterion]:
    ceilings = st.builds(
        Criterion, name=names, value=figures, budget=figures, path=st.sampled_from(["a", "b"])
    )
    floors = st.builds(
        Criterion, name=st.just("top1_agreement"), value=shares, budget=shares, path=st.none()
    )
    return st.one_of(ceilings, floors)


# ---- the pure core ----------------------------------------------------------------------------


class TestCore:
    @given(criteria())
    def test_passed_is_within_the_whole_budget(self, c: Criterion) -> None:
        """A criterion passes exactly when it used at most its whole budget."""
        assert c.passed == (c.used <= 1.0) or math.isclose(c.used, 1.0)

    @given(figures, figures, st.floats(min_value=1e-3, max_value=1e3))
    def test_rel_l2_is_scale_free(self, diff_sq: float, ref_sq: float, k: float) -> None:
        """Scaling both outputs by k leaves the relative L2 error unchanged."""
        base, scaled = rel_l2(diff_sq, ref_sq), rel_l2(diff_sq * k * k, ref_sq * k * k)
        if ref_sq > 1e-100 and diff_sq > 1e-100:
            assert math.isclose(base, scaled, rel_tol=1e-9)

    @given(figures, st.none() | figures, st.floats(min_value=0, max_value=100))
    def test_budget_is_the_larger_of_floor_and_noise(
        self, floor: float, noise: float | None, factor: float
    ) -> None:
        budget = rel_l2_budget(floor, noise, factor)
        assert budget >= floor
        assert budget == (floor if noise is None else max(floor, factor * noise))

    @given(st.lists(criteria(), max_size=8), st.randoms())
    def test_worst_per_criterion_is_order_free(self, items: list[Criterion], rnd: Any) -> None:
        shuffled = items[:]
        rnd.shuffle(shuffled)
        worst = worst_per_criterion(items)
        assert worst == worst_per_criterion(shuffled)
        assert len({c.name for c in worst}) == len(worst)
        for c in worst:
            assert all(c.used >= o.used for o in items if o.name == c.name)

    @given(st.lists(criteria(), max_size=4), st.lists(criteria(), max_size=4))
    def test_mismatch_merge_keeps_each_criterions_worst(
        self, left: list[Criterion], right: list[Criterion]
    ) -> None:
        a, b = Mismatch(criteria=left), Mismatch(criteria=right)
        assert a.merge(b).criteria == b.merge(a).criteria == worst_per_criterion(left + right)

    @given(
        st.dictionaries(st.sampled_from(["output", "output[0]"]), figures),
        st.dictionaries(st.sampled_from(["output", "output[1]"]), figures),
    )
    def test_noise_floor_merge_takes_each_leafs_max(
        self, a: dict[str, float], b: dict[str, float]
    ) -> None:
        left, right = NoiseFloor(rel_l2=a, n_calls=1), NoiseFloor(rel_l2=b, n_calls=2)
        merged = left.merge(right)
        assert merged == right.merge(left)
        assert merged.n_calls == 3
        for path in {*a, *b}:
            assert merged.of(path) == max(a.get(path, 0.0), b.get(path, 0.0))

    @given(st.lists(st.tuples(figures, figures), min_size=1, max_size=6), figures)
    def test_metric_is_the_mean_drop(self, pairs: list[tuple[float, float]], cap: float) -> None:
        base, score = zip(*pairs, strict=True)
        found = metric_criterion(base, score, cap)
        drops = [max(0.0, b - s) for b, s in pairs]
        assert math.isclose(found.value, sum(drops) / len(drops), rel_tol=1e-9, abs_tol=1e-12)
        assert found.passed == (found.value <= cap)

    def test_judge_leaf(self) -> None:
        """Each figure against its budget; top-1 only where there are classifier rows."""
        budgets = NormBudgets(rel_l2=1e-2, outlier_share=1e-3, top1_agreement=0.99)
        stats = LeafStats(n_elements=1000, diff_sq=9.61e-4, ref_sq=1.0, outliers=7)
        found = {c.name: c for c in judge_leaf(stats, budgets, "output")}
        assert set(found) == {"rel_l2", "outlier_share"}
        assert found["rel_l2"].describe() == "rel L2 0.031 > budget 0.01 (3.1x over)"
        assert found["outlier_share"].describe() == "outlier share 0.007 > budget 0.001 (7x over)"
        rows = LeafStats(n_elements=10, diff_sq=0, ref_sq=1, outliers=0, rows=10, rows_agreeing=9)
        top1 = judge_leaf(rows, budgets, None)[-1]
        assert top1.name == "top1_agreement" and not top1.passed
        assert top1.describe() == "top-1 agreement 0.9 < budget 0.99 (10x over)"

    def test_edges_and_refusals(self) -> None:
        assert rel_l2(0.0, 0.0) == 0.0
        assert rel_l2(1.0, 0.0) > 1e300  # capped, not infinite
        assert degradation(0.9, 0.95) == 0.0
        with pytest.raises(InvalidValueError, match="at most 1"):
            Criterion(name="top1_agreement", value=1.5, budget=0.9)
        with pytest.raises(InvalidValueError, match="cannot exceed"):
            LeafStats(n_elements=1, diff_sq=0, ref_sq=0, outliers=2)
        with pytest.raises(InvalidValueError, match="at least one"):
            metric_criterion([], [], 0.1)
        with pytest.raises(InvalidTypeError):
            NoiseFloor(rel_l2={1: 0.1})
        with pytest.raises(InvalidValueError):
            Tolerances(top1_agreement=1.5)
        with pytest.raises(InvalidValueError):
            Tolerances(norm_tiers=("float16",))
        with pytest.raises(InvalidTypeError):
            Closeness(accuracy=0.5)  # type: ignore[arg-type]


# ---- the criteria on constructed outputs ------------------------------------------------------


def _one_outlier() -> tuple[torch.Tensor, torch.Tensor]:
    """100k eager values, and their bfloat16 rounding with one element off by 0.5."""
    gen = torch.Generator().manual_seed(0)
    ref = torch.randn(100_000, generator=gen)
    candidate = ref.bfloat16()
    candidate[12_345] += 0.5
    return candidate, ref


class TestCriteria:
    def test_one_outlier_passes_the_norm_criteria_not_the_elementwise_check(self) -> None:
        candidate, ref = _one_outlier()
        found = compare_outputs(candidate, ref, expected_dtype=torch.bfloat16)
        assert {c.name for c in found.criteria} == {"rel_l2", "outlier_share"}
        assert all(c.passed for c in found.criteria) and found.within_budget
        with pytest.raises(CorrectnessError, match="1 of 100000 elements") as info:
            compare_outputs(candidate, ref, expected_dtype=torch.bfloat16, tolerances=ELEMENTWISE)
        assert info.value.check == "values" and info.value.mismatch is None

    def test_a_wrong_output_fails_every_criterion(self) -> None:
        gen = torch.Generator().manual_seed(1)
        ref = torch.randn(1000, 100, generator=gen)
        wrong = torch.randn(1000, 100, generator=gen).bfloat16()
        with pytest.raises(CorrectnessError, match=r"rel L2 .*x over") as info:
            compare_outputs(wrong, ref, expected_dtype=torch.bfloat16)
        mismatch = info.value.mismatch
        assert mismatch is not None and not mismatch.within_budget
        assert {c.name for c in mismatch.failed_criteria} == {
            "rel_l2",
            "outlier_share",
            "top1_agreement",
        }
        rel = next(c for c in mismatch.criteria if c.name == "rel_l2")
        assert rel.value > 1 and rel.budget == Tolerances().reduced_rel_l2
        with pytest.raises(CorrectnessError):
            compare_outputs(wrong, ref, expected_dtype=torch.bfloat16, tolerances=ELEMENTWISE)
        again = pickle.loads(pickle.dumps(info.value))
        assert again.mismatch == mismatch

    def test_float32_keeps_the_elementwise_check(self) -> None:
        """Without a declared reduced dtype one outlier rejects, as before."""
        _, ref = _one_outlier()
        candidate = ref.clone()
        candidate[7] += 0.5
        with pytest.raises(CorrectnessError, match=r"beyond atol=0\.001"):
            compare_outputs(candidate, ref)

    def test_top1_counts_a_near_tie_as_agreeing_and_a_real_flip_not(self) -> None:
        ref = torch.tensor([[5.0, 4.999, 0.0], [5.0, 1.0, 0.0]]).repeat(50, 1)
        tie = ref.clone()
        tie[:, 1] += 0.002  # the near tie flips: within both elements' allowances
        found = compare_outputs(tie.bfloat16(), ref, expected_dtype=torch.bfloat16)
        top1 = next(c for c in found.criteria if c.name == "top1_agreement")
        assert top1.value == 1.0
        flip = ref.clone()
        flip[1::2, 1] = 6.0  # half the rows now pick class 1 where eager says 5 vs 1
        with pytest.raises(CorrectnessError, match=r"top-1 agreement 0\.5 < budget 0\.99"):
            compare_outputs(flip, ref, expected_dtype=torch.bfloat16)
        off = Tolerances(top1_agreement=None, reduced_rel_l2=1.0, outlier_share=1.0)
        found = compare_outputs(flip, ref, expected_dtype=torch.bfloat16, tolerances=off)
        assert "top1_agreement" not in {c.name for c in found.criteria}

    def test_norm_tiers_choose_who_decides(self) -> None:
        """float32 can opt in to the norm criteria; its budget is far tighter."""
        _, ref = _one_outlier()
        candidate = ref.clone()
        candidate[12_345] += 0.2  # rel L2 6e-4: one element beyond 1e-3
        with pytest.raises(CorrectnessError, match="1 of 100000 elements"):
            compare_outputs(candidate, ref)
        found = compare_outputs(candidate, ref, tolerances=Tolerances(norm_tiers=("float32",)))
        assert found.criteria
        with pytest.raises(CorrectnessError, match="rel L2"):
            compare_outputs(
                candidate,
                ref,
                tolerances=Tolerances(norm_tiers=("float32",), float32_rel_l2=1e-4),
            )

    def test_the_event_carries_each_criterion(self) -> None:
        candidate, ref = _one_outlier()
        mismatch = compare_outputs(candidate, ref, expected_dtype=torch.bfloat16)
        event = CorrectnessChecked.of("r", "m", "X()", mismatch)
        line = {"event": event.name, **event.fields}
        assert [c["name"] for c in line["criteria"]] == ["rel_l2", "outlier_share"]
        assert "rel L2" in line["summary"]
        assert schema_errors(line) == []
        jsonschema.Draft202012Validator(event_schema()).validate(line)
        assert mismatch.to_dict()["criteria"][0]["passed"] is True


# ---- a bf16 convnet: accepted by the default criteria, rejected element-wise ------------------


def _convnet() -> torch.nn.Module:
    """A small classifier whose logits have the scale of ResNet-18's (RMS about 2)."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, 3, padding=1),
        torch.nn.BatchNorm2d(16),
        torch.nn.ReLU(),
        torch.nn.Conv2d(16, 16, 3, padding=1),
        torch.nn.BatchNorm2d(16),
        torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(16, 1000),
    ).eval()
    head = net[-1]
    assert isinstance(head, torch.nn.Linear)
    with torch.no_grad():
        head.weight.mul_(40)
    return net


def _images() -> list[Sample]:
    gen = torch.Generator().manual_seed(2)
    return [Sample((torch.randn(4, 3, 16, 16, generator=gen),)) for _ in range(2)]


class TestBf16Convnet:
    def test_accepted_by_default_rejected_elementwise(self) -> None:
        net = _convnet()
        half = copy.deepcopy(net).to(torch.bfloat16)

        def bf16(x: torch.Tensor) -> torch.Tensor:
            return half(x.bfloat16())  # type: ignore[no-any-return]

        found = check_correctness(bf16, net, SPEC, _images(), expected_dtype=torch.bfloat16)
        rel = next(c for c in found.criteria if c.name == "rel_l2")
        assert rel.passed and rel.value < 1e-2
        assert found.max_abs_error > 1e-2  # beyond the element-wise atol somewhere
        with pytest.raises(CorrectnessError, match="values differ") as info:
            check_correctness(
                bf16, net, SPEC, _images(), expected_dtype=torch.bfloat16, tolerances=ELEMENTWISE
            )
        assert info.value.check == "values"


# ---- calibration to eager's own noise ---------------------------------------------------------


def _mlp() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(32, 64), torch.nn.Tanh(), torch.nn.Linear(64, 8)
    ).eval()


def _rows() -> list[Sample]:
    gen = torch.Generator().manual_seed(3)
    return [Sample((torch.randn(3, 32, generator=gen),)) for _ in range(2)]


class TestNoiseFloor:
    def test_measures_float32_against_float64(self) -> None:
        net = _mlp()
        before = copy.deepcopy(net.state_dict())
        floor = eager_noise_floor(net, _rows())
        assert floor.n_calls == 2
        figure = floor.of("output")
        assert figure is not None and 0 < figure < 1e-5  # float32 rounding, nothing more
        assert all(torch.equal(before[k], v) for k, v in net.state_dict().items())
        batched = eager_noise_floor(net, _rows(), graph_spec=SPEC)
        assert batched.n_calls == 4  # two samples at the smallest and largest batch size

    def test_dict_outputs_get_one_figure_per_leaf(self) -> None:
        class Two(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.inner = _mlp()

            def forward(self, x: torch.Tensor) -> dict[str, Any]:
                return {"logits": self.inner(x), "ids": x.argmax(-1)}

        floor = eager_noise_floor(Two(), _rows())
        assert [path for path, _ in floor.rel_l2] == ["output['logits']"]

    def test_a_budget_is_a_factor_of_eagers_error_when_larger(self) -> None:
        net = _mlp()
        floor = eager_noise_floor(net, _rows())
        noise = floor.of("output")
        assert noise is not None

        def noisy(x: torch.Tensor) -> torch.Tensor:  # five times eager's own error
            out: torch.Tensor = net(x)
            shift = 5 * noise * float(out.detach().norm()) / math.sqrt(out.numel())
            return out + shift

        strict = Tolerances(norm_tiers=("float32",), float32_rel_l2=0.0, noise_factor=10)
        found = check_correctness(noisy, net, SPEC, _rows(), tolerances=strict, noise_floor=floor)
        rel = next(c for c in found.criteria if c.name == "rel_l2")
        assert rel.budget == pytest.approx(10 * noise)
        with pytest.raises(CorrectnessError, match="rel L2"):
            check_correctness(noisy, net, SPEC, _rows(), tolerances=strict)

    def test_refuses_what_it_cannot_measure(self) -> None:
        with pytest.raises(InvalidTypeError):
            eager_noise_floor(lambda x: x, _rows())  # type: ignore[arg-type]
        with pytest.raises(InvalidValueError):
            eager_noise_floor(_mlp(), [])


# ---- a user's accuracy metric -----------------------------------------------------------------


def top1(reference: torch.Tensor, candidate: torch.Tensor) -> float:
    """Share of rows whose argmax agrees with eager's."""
    return float((reference.argmax(-1) == candidate.argmax(-1)).float().mean())


class TestMetric:
    def test_identical_passes_and_a_permutation_fails(self) -> None:
        net = _mlp()
        closeness = Closeness(accuracy=top1, max_degradation=0.05)
        found = closeness.check(net, net, SPEC, _rows(), expected_dtype=None, tolerances=None)
        assert found is not None
        metric = next(c for c in found.criteria if c.name == "metric")
        assert metric.value == 0.0 and metric.budget == 0.05

        def permuted(x: torch.Tensor) -> torch.Tensor:
            out: torch.Tensor = net(x)
            return out.roll(1, dims=-1)

        # the values pass (and the variation criterion is off): only the metric can reject
        loose = Tolerances(float32_atol=100.0, variation=None)
        with pytest.raises(CorrectnessError, match=r"top1 dropped .*metric degradation") as info:
            closeness.check(permuted, net, SPEC, _rows(), expected_dtype=None, tolerances=loose)
        assert info.value.mismatch is not None
        assert [c.name for c in info.value.mismatch.failed_criteria] == ["metric"]

    def test_a_broken_metric_is_named(self) -> None:
        net = _mlp()

        def broken(reference: Any, candidate: Any) -> float:
            raise KeyError("labels")

        with pytest.raises(InvalidValueError, match="broken failed"):
            check_correctness(net, net, SPEC, _rows(), accuracy=broken)
        with pytest.raises(InvalidTypeError, match="finite float"):
            check_correctness(net, net, SPEC, _rows(), accuracy=lambda r, c: "high")  # type: ignore[arg-type,return-value]

    def test_the_decorator_carries_the_closeness(self) -> None:
        from aitune_fp.adapters.validation import validation_of, with_performance_validation
        from aitune_fp.pipeline.tune import TuneSession
        from aitune_fp.pipeline.values import TuneTarget

        class Plain:
            def tune(self, *args: Any) -> None:
                return None

        closeness = Closeness(accuracy=top1, max_degradation=0.01)
        wrapped = with_performance_validation(Plain(), closeness=closeness)
        options = validation_of(wrapped).validation_options
        assert options.closeness is closeness
        target = TuneTarget.of(_mlp(), "m", SPEC, _rows(), "cpu", ".")
        assert TuneSession(target, options, strategy="Plain").closeness is closeness
        assert TuneSession(target, None, strategy="Plain").closeness == Closeness()


def test_every_criterion_name_is_in_the_schema() -> None:
    """The schema's enum lists the core's criteria (kept in sync by hand)."""
    from aitune_fp.core.accuracy import CRITERIA

    text = str(event_schema())
    for name in CRITERIA:
        assert f"'{name}'" in text
    assert list(itertools.chain(CRITERIA)) == [
        "rel_l2",
        "outlier_share",
        "top1_agreement",
        "variation",
        "metric",
    ]
