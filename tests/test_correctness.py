"""Correctness against eager: finite, structure, shape, dtype, values, non-tensor outputs."""

from __future__ import annotations

import pickle
from collections import namedtuple
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from aitune_fp.correctness.check import check_correctness, served_batch_sizes
from aitune_fp.correctness.compare import compare_outputs
from aitune_fp.correctness.failures import CorrectnessError
from aitune_fp.correctness.tolerances import Tolerances
from aitune_fp.inputs import GraphSpec, Sample

SPEC = GraphSpec(4, min_batch_size=1)


def make_mlp() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4)
    ).eval()


def data() -> list[Sample]:
    torch.manual_seed(1)
    return [Sample((torch.randn(2, 8),)), Sample((torch.randn(3, 8),))]


Out = namedtuple("Out", ["logits", "aux"])


class TestCheckCorrectness:
    def test_identical_candidate_passes(self) -> None:
        """The module checked against itself passes for every sample."""
        module = make_mlp()
        check_correctness(module, module, SPEC, data())

    def test_runs_every_sample_at_every_batch_size_served(self) -> None:
        """The candidate sees each sample at the ends and every power of two between (once when
        the ends are equal), then the first sample at the largest size with grad enabled.
        """
        seen: list[tuple[int, bool]] = []

        def recording(x: torch.Tensor) -> torch.Tensor:
            seen.append((x.shape[0], torch.is_grad_enabled()))
            return x * 2

        check_correctness(recording, lambda x: x * 2, SPEC, data())
        sizes = [size for size, _ in seen]
        assert sizes == [1, 2, 4, 1, 2, 4, 4]
        assert [grad for _, grad in seen] == [False] * 6 + [True]
        seen.clear()
        check_correctness(
            recording, lambda x: x * 2, GraphSpec(3, min_batch_size=3), data()[:1], grad_mode=False
        )
        assert seen == [(3, False)]

    @given(
        low=st.integers(1, 64),
        span=st.integers(0, 200),
        extra=st.lists(st.integers(1, 300), max_size=4),
    )
    def test_served_sizes_cover_the_ends_powers_of_two_and_the_asked(
        self, low: int, span: int, extra: list[int]
    ) -> None:
        high = low + span
        sizes = served_batch_sizes(low, high, extra)
        assert sizes == sorted(set(sizes)) and sizes[0] == low and sizes[-1] == high
        assert all(low <= s <= high for s in sizes)
        assert {2**k for k in range(10) if low <= 2**k <= high} <= set(sizes)
        assert {s for s in extra if low <= s <= high} <= set(sizes)

    def test_a_candidate_wrong_only_with_grad_enabled_fails(self) -> None:
        def candidate(x: torch.Tensor) -> torch.Tensor:
            return x * 2 + (1.0 if torch.is_grad_enabled() else 0.0)

        with pytest.raises(CorrectnessError, match="with grad enabled"):
            check_correctness(candidate, lambda x: x * 2, SPEC, data())

    def test_a_candidate_wrong_only_at_a_middle_batch_size_fails(self) -> None:
        def candidate(x: torch.Tensor) -> torch.Tensor:
            return x * 2 + (1.0 if x.shape[0] == 2 else 0.0)

        with pytest.raises(CorrectnessError, match="batch size 2"):
            check_correctness(candidate, lambda x: x * 2, SPEC, data())

    def test_changed_weights_fail_with_worst_mismatch(self) -> None:
        """A candidate with perturbed weights fails ``values`` naming max abs/rel error and index."""
        reference = make_mlp()
        candidate = make_mlp()
        with torch.no_grad():
            candidate[2].weight.add_(0.1)
        with pytest.raises(CorrectnessError) as info:
            check_correctness(candidate, reference, SPEC, data(), name="mlp")
        err = info.value
        assert err.check == "values"
        assert err.path == "output"
        assert err.sample_index == 0
        assert err.batch_size == 1
        message = str(err)
        assert message.startswith("mlp: sample 0 at batch size 1: output: values differ")
        assert "max abs error" in message
        assert "max rel error" in message
        assert "worst at index (0, " in message
        assert "atol=0.001, rtol=0.001" in message

    def test_nan_injection_fails_finite(self) -> None:
        """NaN in the candidate output fails ``finite`` with the count and first index."""

        def candidate(x: torch.Tensor) -> torch.Tensor:
            out = x * 2
            out[0, 3] = float("nan")
            return out

        with pytest.raises(CorrectnessError) as info:
            check_correctness(candidate, lambda x: x * 2, SPEC, data())
        assert info.value.check == "finite"
        assert "contains NaN values (1 of 8 elements, first at index (0, 3))" in str(info.value)
        assert "eager reference is finite there" in str(info.value)

    def test_inf_is_reported_before_nan(self) -> None:
        """With both inf and NaN in the output, infinity is reported (AITune's order)."""
        out = torch.tensor([float("nan"), float("inf"), 1.0])
        with pytest.raises(CorrectnessError, match="infinity") as info:
            compare_outputs(out, torch.ones(3))
        assert info.value.check == "finite"

    def test_wrong_shape_fails_shape(self) -> None:
        """A candidate returning a wrongly shaped tensor fails ``shape`` with both shapes."""
        with pytest.raises(CorrectnessError) as info:
            check_correctness(lambda x: x[:, :4], lambda x: x, SPEC, data())
        assert info.value.check == "shape"
        assert "expected shape (1, 8) but got (1, 4)" in str(info.value)

    def test_wrong_structure_fails_structure(self) -> None:
        """A candidate returning a tuple where eager returns a dict fails ``structure``."""
        with pytest.raises(CorrectnessError) as info:
            check_correctness(lambda x: (x,), lambda x: {"logits": x}, SPEC, data())
        assert info.value.check == "structure"
        assert info.value.path == "output"
        assert "expected a mapping" in str(info.value)

    def test_wrong_dtype_fails_dtype(self) -> None:
        """A float64 output where eager gives float32 fails ``dtype``."""
        with pytest.raises(CorrectnessError) as info:
            check_correctness(lambda x: x.double(), lambda x: x, SPEC, data())
        assert info.value.check == "dtype"
        assert "expected dtype torch.float32 but got torch.float64" in str(info.value)

    def test_candidate_exception_is_wrapped(self) -> None:
        """An exception in the candidate becomes ``exception`` with the original as its cause."""

        def broken(x: torch.Tensor) -> torch.Tensor:
            raise KeyError("boom")

        with pytest.raises(CorrectnessError) as info:
            check_correctness(broken, lambda x: x, SPEC, data())
        assert info.value.check == "exception"
        assert "the candidate raised KeyError" in str(info.value)
        assert isinstance(info.value.__cause__, KeyError)

    def test_reference_exception_is_not_blamed_on_the_candidate(self) -> None:
        """A failing reference raises RuntimeError, not CorrectnessError."""

        def broken(x: torch.Tensor) -> torch.Tensor:
            raise ValueError("eager broke")

        with pytest.raises(RuntimeError, match="reference \\(eager\\) failed") as info:
            check_correctness(lambda x: x, broken, SPEC, data())
        assert not isinstance(info.value, CorrectnessError)

    def test_inputs_are_never_mutated(self) -> None:
        """In-place ops in either callable touch copies, never the stored samples or each other;
        a candidate that changes its input where eager does not is named (check ``inputs``)."""
        samples = data()
        before = [s.args[0].clone() for s in samples]

        def mutating(x: torch.Tensor) -> torch.Tensor:
            return x.mul_(1.0).add_(0.0)

        check_correctness(mutating, mutating, SPEC, samples)

        def destructive(x: torch.Tensor) -> torch.Tensor:
            y = x.clone()
            x.zero_()
            return y

        with pytest.raises(CorrectnessError) as caught:
            check_correctness(destructive, lambda x: x.clone(), SPEC, samples)
        assert caught.value.check == "inputs"
        check_correctness(destructive, destructive, SPEC, samples)  # as eager does: kept
        for sample, original in zip(samples, before, strict=True):
            assert torch.equal(sample.args[0], original)

    def test_kwargs_and_tuple_samples(self) -> None:
        """Plain ``(args, kwargs)`` samples work and kwargs reach both callables."""
        samples = [((torch.ones(2, 8),), {"scale": 3.0})]
        check_correctness(lambda x, scale: x * scale, lambda x, scale: x * scale, SPEC, samples)
        with pytest.raises(CorrectnessError, match="values"):
            check_correctness(lambda x, scale: x, lambda x, scale: x * scale, SPEC, samples)

    def test_empty_data_is_an_error(self) -> None:
        """The check needs at least one sample; the message names the graph spec."""
        with pytest.raises(ValueError, match=r"at least one sample.*'0'"):
            check_correctness(lambda x: x, lambda x: x, SPEC, [])

    def test_bf16_passes_with_bf16_tolerances_and_fails_with_fp32_ones(self) -> None:
        """bf16 autocast vs fp32 eager passes by default and fails with fp32-level tolerances."""
        module = make_mlp()

        def bf16(x: torch.Tensor) -> torch.Tensor:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                return module(x)

        check_correctness(bf16, module, SPEC, data(), expected_dtype=torch.bfloat16)
        strict = Tolerances(reduced_atol=1e-3, reduced_rtol=1e-3, norm_tiers=())
        with pytest.raises(CorrectnessError) as info:
            check_correctness(
                bf16, module, SPEC, data(), expected_dtype=torch.bfloat16, tolerances=strict
            )
        assert info.value.check == "values"
        assert "torch.bfloat16 tolerances" in str(info.value)
        assert info.value.mismatch is None  # the element-wise check decided
        tight = Tolerances(reduced_rel_l2=1e-5)  # the norm criteria, at a float32-level budget
        with pytest.raises(CorrectnessError, match=r"rel L2 .* > budget 1e-05") as info:
            check_correctness(
                bf16, module, SPEC, data(), expected_dtype=torch.bfloat16, tolerances=tight
            )
        assert info.value.mismatch is not None
        assert info.value.mismatch.failed_criteria[0].name == "rel_l2"


class TestCompareOutputs:
    def test_nested_paths(self) -> None:
        """Paths name list indices and dict keys: ``output[0]['logits']``."""
        expected = [{"logits": torch.ones(2)}, torch.zeros(1)]
        actual = [{"logits": torch.tensor([1.0, 2.0])}, torch.zeros(1)]
        with pytest.raises(CorrectnessError) as info:
            compare_outputs(actual, expected)
        assert info.value.path == "output[0]['logits']"
        assert "worst at index (1,): got 2, expected 1" in str(info.value)

    def test_namedtuple_paths_use_field_names(self) -> None:
        """Namedtuples are compared as sequences and named by field."""
        compare_outputs(Out(torch.ones(2), None), Out(torch.ones(2), None))
        with pytest.raises(CorrectnessError) as info:
            compare_outputs(Out(torch.ones(2), 1), Out(torch.ones(2), 2))
        assert info.value.path == "output.aux"
        assert info.value.check == "values"

    def test_missing_and_extra_keys(self) -> None:
        """Dict outputs must have the reference's keys, no more, no fewer."""
        with pytest.raises(CorrectnessError, match=r"missing keys \['b'\]") as info:
            compare_outputs({"a": torch.ones(1)}, {"a": torch.ones(1), "b": torch.ones(1)})
        assert info.value.check == "structure"
        with pytest.raises(CorrectnessError, match=r"unexpected keys \['c'\]"):
            compare_outputs({"a": torch.ones(1), "c": 1}, {"a": torch.ones(1)})

    def test_sequence_length_and_type(self) -> None:
        """Sequences must match in type and length."""
        with pytest.raises(CorrectnessError, match="expected 2 items but got 1") as info:
            compare_outputs((torch.ones(1),), (torch.ones(1), torch.ones(1)))
        assert info.value.check == "structure"
        with pytest.raises(CorrectnessError, match="expected a tuple"):
            compare_outputs([torch.ones(1)], (torch.ones(1),))

    def test_non_tensor_leaves(self) -> None:
        """None, bool, int, str and float are compared explicitly with the right check."""
        compare_outputs([None, True, 3, "a", 1.0], [None, True, 3, "a", 1.0 + 1e-6])
        cases: list[tuple[Any, Any, str]] = [
            (torch.ones(1), None, "type"),
            (None, torch.ones(1), "type"),
            (1, True, "type"),
            (4, 3, "values"),
            ("b", "a", "values"),
            (1.5, 1.0, "values"),
            (1, 1.0, "type"),
            (float("nan"), 1.0, "finite"),
        ]
        for actual, expected, check in cases:
            with pytest.raises(CorrectnessError) as info:
                compare_outputs(actual, expected)
            assert info.value.check == check, (actual, expected)

    def test_unknown_output_type_is_an_error(self) -> None:
        """An output type we cannot compare is refused explicitly, never ignored."""

        class Opaque:
            pass

        with pytest.raises(CorrectnessError, match="cannot compare an output of type") as info:
            compare_outputs({"x": Opaque()}, {"x": Opaque()})
        assert info.value.check == "type"
        assert info.value.path == "output['x']"

    def test_numpy_arrays_are_compared_as_tensors(self) -> None:
        """numpy outputs are converted and compared like tensors."""
        compare_outputs(np.ones(3, dtype=np.float32), np.ones(3, dtype=np.float32))
        with pytest.raises(CorrectnessError, match="values"):
            compare_outputs(np.zeros(3, dtype=np.float32), np.ones(3, dtype=np.float32))

    def test_integer_tensors_compare_exactly(self) -> None:
        """Integer and bool tensors must be equal; the first difference is named."""
        compare_outputs(torch.arange(4), torch.arange(4))
        with pytest.raises(CorrectnessError, match=r"exact comparison.*first at index \(2,\)"):
            compare_outputs(torch.tensor([0, 1, 3, 3]), torch.arange(4))

    def test_non_finite_reference_with_finite_candidate_fails(self) -> None:
        """A finite candidate cannot match a NaN reference; the message says the reference is bad."""
        with pytest.raises(CorrectnessError, match="reference itself is non-finite"):
            compare_outputs(torch.ones(2), torch.tensor([1.0, float("nan")]))

    def test_declared_dtype_allows_reduced_or_reference_dtype(self) -> None:
        """With a declared reduced dtype, floating outputs may be reduced or the reference's."""
        ref = torch.linspace(-1, 1, 10)
        compare_outputs(ref.bfloat16(), ref, expected_dtype=torch.bfloat16)
        compare_outputs(ref.clone(), ref, expected_dtype=torch.bfloat16)
        with pytest.raises(CorrectnessError, match="dtype"):
            compare_outputs(ref.half(), ref, expected_dtype=torch.bfloat16)
        with pytest.raises(CorrectnessError, match="dtype"):
            compare_outputs(torch.arange(3).float(), torch.arange(3), expected_dtype=torch.bfloat16)

    def test_tolerance_boundary(self) -> None:
        """Errors within atol + rtol*|expected| pass; just beyond fails."""
        expected = torch.tensor([10.0])
        compare_outputs(expected + 0.0105, expected)  # limit 0.001 + 0.01 = 0.011
        with pytest.raises(CorrectnessError):
            compare_outputs(expected + 0.0115, expected)

    def test_bad_expected_dtype(self) -> None:
        """expected_dtype must be a floating torch dtype."""
        with pytest.raises(TypeError, match="expected_dtype"):
            compare_outputs(torch.ones(1), torch.ones(1), expected_dtype=torch.int32)

    @given(
        st.lists(st.floats(-1e3, 1e3, allow_nan=False, width=32), min_size=1, max_size=20),
        st.floats(0.0, 0.999),
    )
    def test_within_tolerance_always_passes(self, values: list[float], fraction: float) -> None:
        """Any perturbation below the allowed error passes (float64 comparison, no rounding)."""
        expected = torch.tensor(values, dtype=torch.float64)
        tol = Tolerances()
        limit = tol.float64_atol + tol.float64_rtol * expected.abs()
        compare_outputs(expected + fraction * limit, expected, tolerances=tol)


class TestTolerancesAndError:
    def test_tiers(self) -> None:
        """Defaults: fp64 1e-6, fp32 1e-3, fp16/bf16 1e-2, integers exact."""
        tol = Tolerances()
        assert tol.for_dtype(torch.float64) == (1e-6, 1e-6)
        assert tol.for_dtype(torch.float32) == (1e-3, 1e-3)
        assert tol.for_dtype(torch.bfloat16) == (1e-2, 1e-2)
        assert tol.for_dtype(torch.float16) == (1e-2, 1e-2)
        assert tol.for_dtype(torch.complex64) == (1e-3, 1e-3)
        assert tol.for_dtype(torch.int64) == (0.0, 0.0)

    def test_invalid_tolerances_name_the_field(self) -> None:
        """Negative or non-finite tolerances are refused naming the field."""
        with pytest.raises(ValueError, match="float32_atol"):
            Tolerances(float32_atol=-1.0)
        with pytest.raises(ValueError, match="reduced_rtol"):
            Tolerances(reduced_rtol=float("inf"))

    def test_error_is_a_runtime_error_and_pickles(self) -> None:
        """CorrectnessError is a RuntimeError and keeps path/check through pickling."""
        err = CorrectnessError("m", path="output[0]", check="shape", sample_index=1, batch_size=4)
        assert isinstance(err, RuntimeError)
        copy = pickle.loads(pickle.dumps(err))
        assert (copy.path, copy.check, copy.sample_index, copy.batch_size, str(copy)) == (
            "output[0]",
            "shape",
            1,
            4,
            "m",
        )
        with pytest.raises(ValueError, match="check must be one of"):
            CorrectnessError("m", path="output", check="bogus")  # type: ignore[arg-type]


@given(scale=st.floats(0.1, 1000.0))
def test_scale_atol_grows_the_allowance_with_the_outputs_scale(scale: float) -> None:
    """An error of 1 % of the outputs' RMS passes ``scale_atol=0.02`` at any scale, and fails a
    fixed atol once the outputs are large enough.
    """
    expected = torch.linspace(-1.0, 1.0, 64) * scale
    rms = float(expected.square().mean().sqrt())
    actual = expected + 0.01 * rms
    mismatch = compare_outputs(
        actual,
        expected,
        tolerances=Tolerances(float32_atol=1e-3, float32_rtol=0.0, scale_atol=0.02),
    )
    assert mismatch.atol is not None and mismatch.atol > 0.02 * rms
    if 0.01 * rms > 2e-3:
        with pytest.raises(CorrectnessError, match="values differ"):
            compare_outputs(
                actual, expected, tolerances=Tolerances(float32_atol=1e-3, float32_rtol=0.0)
            )
