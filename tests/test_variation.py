"""Accuracy judged on what varies (issue 49): error against eager's spread across inputs.

Eager's outputs here are 100 plus a small input-dependent signal (logits carry such offsets).
Relative to the whole output, a candidate that returns the constant, eager's mean over the
inputs, or the right offset with a wrong signal is within the reduced-precision budget; relative
to the spread of eager's outputs across inputs (centred on their mean over the batch rows and
the held-out draws) its error is 1 or more, and it is rejected. Honest twins still pass.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import assume, given
from hypothesis import strategies as st

from aitune_fp.core.accuracy import RESOLUTION_ULPS, Criterion, Spread, judge_variation
from aitune_fp.core.config import ProfilingConfig
from aitune_fp.correctness.check import Spreads, check_correctness
from aitune_fp.correctness.failures import CorrectnessError
from aitune_fp.correctness.tolerances import Tolerances
from aitune_fp.inputs import GraphSpec, Sample
from aitune_fp.isolation.heldout import heldout_samples
from tests.factories import tune_one
from tests.validation_helpers import CLOCK, _ModuleBackend

_OFFSET = 100.0


class Offset(torch.nn.Module):
    """100 plus a small linear signal of the input (RMS about 0.75)."""

    def __init__(self, seed: int = 0) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.linear = torch.nn.Linear(16, 8)

    def signal(self, x: torch.Tensor) -> torch.Tensor:
        return _OFFSET + 1.3 * self.linear(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        CLOCK.advance(4e-4)  # eager's cost on the fake clock; a candidate calls signal
        return self.signal(x)


def _data(rows: int = 8) -> list[Sample]:
    torch.manual_seed(1)
    return [Sample((torch.randn(rows, 16),))]


def _mean_over(model: Offset, data: list[Sample]) -> torch.Tensor:
    with torch.no_grad():
        return torch.cat([model.signal(*s.args) for s in data]).mean(dim=0)


_WRONG = Offset(seed=7).eval()


def _constant(x: torch.Tensor, _: Offset) -> torch.Tensor:
    return torch.full((x.shape[0], 8), _OFFSET)


def _eager_mean(x: torch.Tensor, model: Offset) -> torch.Tensor:
    return _mean_over(model, _data()).expand(x.shape[0], 8).clone()


def _wrong_signal(x: torch.Tensor, _: Offset) -> torch.Tensor:
    with torch.no_grad():
        return _WRONG.signal(x)


def _itself(x: torch.Tensor, model: Offset) -> torch.Tensor:
    with torch.no_grad():
        return model.signal(x)


def _bf16_like(x: torch.Tensor, model: Offset) -> torch.Tensor:
    """Eager's output rounded to bfloat16 (8 significant bits): what a bf16 model returns."""
    with torch.no_grad():
        return model.signal(x).bfloat16()


WRONG = {"constant": _constant, "eager_mean": _eager_mean, "wrong_signal": _wrong_signal}
HONEST = {"itself": _itself, "bf16_like": _bf16_like}


def _check(candidate: Any, model: Offset, data: list[Sample], **kwargs: Any) -> Any:
    kwargs.setdefault("expected_dtype", torch.bfloat16)
    return check_correctness(
        lambda x: candidate(x, model), model, GraphSpec(8), data, grad_mode=False, **kwargs
    )


# --- the check itself --------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(WRONG))
def test_a_candidate_hiding_behind_eagers_offset_passes_rel_l2_yet_is_rejected(name: str) -> None:
    model = Offset().eval()
    with pytest.raises(CorrectnessError, match="of eager's variation across inputs") as caught:
        _check(WRONG[name], model, _data())
    error = caught.value
    assert error.check == "values" and error.path == "output"
    assert error.mismatch is not None
    by_name = {c.name: c for c in error.mismatch.criteria}
    assert by_name["rel_l2"].passed  # what let it through before
    assert not by_name["variation"].passed and by_name["variation"].value >= 0.99


@pytest.mark.parametrize("name", sorted(HONEST))
def test_honest_twins_still_pass_and_say_how_close(name: str) -> None:
    model = Offset().eval()
    found = _check(HONEST[name], model, _data())
    (variation,) = [c for c in found.criteria if c.name == "variation"]
    assert variation.passed and variation.value < 0.3
    assert variation.budget == Tolerances().variation


def test_the_variation_is_pooled_over_samples_batch_rows_and_held_out_draws() -> None:
    """Two one-row samples: the rows of every call and the held-out draws pooled, then judged."""
    model = Offset().eval()
    torch.manual_seed(2)
    data = [Sample((torch.randn(1, 16),)), Sample((torch.randn(1, 16),))]
    held = heldout_samples(data, 3)
    with pytest.raises(CorrectnessError, match="held-out: 2 \\(seed 3\\)") as caught:
        _check(_constant, model, data, heldout=held, heldout_seed=3)
    assert "of eager's variation across inputs (recorded samples: 2" in str(caught.value)
    found = _check(_bf16_like, model, data, heldout=held, heldout_seed=3)
    (variation,) = [c for c in found.criteria if c.name == "variation"]
    assert variation.passed and not found.notes


def test_held_out_draws_of_one_recorded_row_are_too_close_to_judge_by() -> None:
    """Near-copies of one input vary too little: even an honest int8 model would miss."""
    model = Offset().eval()
    data = _data(rows=1)
    found = _check(_constant, model, data, heldout=heldout_samples(data, 3))
    assert not [c for c in found.criteria if c.name == "variation"]
    assert found.notes == (
        "output: eager's output does not vary across the recorded inputs (15 rows, within 16 "
        "units of its rounding): the variation criterion is not judged",
    )


def test_an_output_that_does_not_vary_skips_the_criterion_and_says_so() -> None:
    class Blind(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.full((x.shape[0], 3), 5.0) + 0.0 * x[:, :3]

    found = check_correctness(
        lambda x: torch.full((x.shape[0], 3), 5.0), Blind(), GraphSpec(4), _data(4)
    )
    assert not [c for c in found.criteria if c.name == "variation"]
    (note,) = found.notes
    assert "output" in note and "does not vary" in note


def test_integer_and_bool_outputs_compare_exactly_and_are_not_judged_on_variation() -> None:
    class Classes(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return x.argmax(dim=1), x[:, 0] > 0

    model = Classes()
    found = check_correctness(model, model, GraphSpec(4), _data(4))
    assert not [c for c in found.criteria if c.name == "variation"] and not found.notes
    with pytest.raises(CorrectnessError, match="exact comparison"):
        check_correctness(
            lambda x: (torch.zeros(x.shape[0], dtype=torch.long), x[:, 0] > 0),
            model,
            GraphSpec(4),
            _data(4),
        )


def test_the_leaf_that_hides_is_named_among_others() -> None:
    class Two(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.offset = Offset()

        def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
            return {"hidden": torch.tanh(x), "logits": self.offset(x)}

    model = Two().eval()

    def candidate(x: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"hidden": torch.tanh(x), "logits": torch.full((x.shape[0], 8), _OFFSET)}

    with pytest.raises(CorrectnessError) as caught:
        check_correctness(candidate, model, GraphSpec(8), _data(), expected_dtype=torch.bfloat16)
    assert caught.value.path == "output['logits']"
    assert "output['logits']: the candidate's error is" in str(caught.value)


def test_the_budget_is_a_setting_and_none_turns_it_off() -> None:
    model = Offset().eval()
    _check(_constant, model, _data(), tolerances=Tolerances(variation=None))
    with pytest.raises(CorrectnessError, match=r"budget 0\.05"):
        _check(_bf16_like, model, _data(), tolerances=Tolerances(variation=0.05))


# --- through a tune ----------------------------------------------------------------------------


class _Candidate(_ModuleBackend):
    """Calls one of the candidate functions above on the module it was built for (bf16 tier)."""

    dtype = torch.bfloat16

    def _infer(self, *args: Any, **kwargs: Any) -> Any:
        CLOCK.advance(1e-4)
        return {**WRONG, **HONEST}[self.tag](args[0], self.module)


_CONFIG = ProfilingConfig(looks=(10,), max_seconds=2.0, warmup_max_calls=8)


def _tune(tag: str, tmp_path: Path, **kwargs: Any) -> Any:
    return tune_one(
        _Candidate(tag), Offset().eval(), _data(), tmp_path, profiling_config=_CONFIG, **kwargs
    )


def _rejected_for_what_varies(reason: str) -> bool:
    """Rejected by the variation criterion, or on a held-out input beyond the recorded range.

    A candidate that ignores its input is wrong by more than the offset hides where the input
    leaves the recorded range (the tune's wide draws): those may reject it first.
    """
    return "of eager's variation across inputs" in reason or (
        "held-out sample" in reason and "values beyond the recorded range" in reason
    )


@pytest.mark.parametrize("name", sorted(WRONG))
def test_a_tune_rejects_it_at_correctness_in_process(name: str, tmp_path: Path) -> None:
    report = _tune(name, tmp_path, timer=CLOCK)
    (failure,) = report.failures
    assert failure.stage == "correctness"
    # the variation criterion, or first a held-out input beyond the recorded range (issue 49)
    assert _rejected_for_what_varies(failure.reason)
    assert not report.results


def test_a_tune_accepts_the_honest_twin_in_process(tmp_path: Path) -> None:
    report = _tune("bf16_like", tmp_path, timer=CLOCK)
    assert not report.failures
    (result,) = report.results
    assert result.passed  # 4x faster on the fake clock, and correct
    (_, mismatch), *_ = report.accuracy
    assert any(c.name == "variation" and c.passed for c in mismatch.criteria)


def test_a_tune_rejects_it_in_a_worker_naming_the_held_out_seed(tmp_path: Path) -> None:
    report = _tune("eager_mean", tmp_path)
    (failure,) = report.failures
    assert failure.stage == "correctness"
    assert _rejected_for_what_varies(failure.reason)
    assert "(seed " in failure.reason
    assert report.isolation == "process"


@pytest.mark.slow
def test_a_tune_in_a_worker_still_accepts_the_honest_twin(tmp_path: Path) -> None:
    report = _tune("bf16_like", tmp_path)
    assert not report.failures and report.isolation == "process"
    assert report.results


# --- the pure measure --------------------------------------------------------------------------

_sq = st.floats(min_value=0.0, max_value=1e12, allow_nan=False, allow_infinity=False)
_eps = st.sampled_from([2.0**-7, 2.0**-10, 2.0**-23, 2.0**-52])


@st.composite
def spreads(draw: st.DrawFn) -> Spread:
    return Spread(
        n_inputs=draw(st.integers(0, 1000)),
        diff_sq=draw(_sq),
        spread_sq=draw(_sq),
        ref_sq=draw(_sq),
        eps=draw(_eps),
    )


@given(spreads(), st.floats(0.0, 10.0))
def test_judge_variation_never_divides_by_zero_and_skips_only_what_does_not_vary(
    spread: Spread, budget: float
) -> None:
    found = judge_variation(spread, budget, "output")
    resolution = RESOLUTION_ULPS * spread.eps
    flat = (
        spread.n_inputs < 2
        or spread.spread_sq < sys.float_info.min  # below a normal float: its ratio is noise
        or spread.spread_sq <= resolution**2 * spread.ref_sq
    )
    if flat:
        assert isinstance(found, str) and found.startswith("output: eager's output does not vary")
        return
    assert isinstance(found, Criterion) and found.name == "variation"
    assert math.isfinite(found.value) and found.budget == budget
    expected = min(math.sqrt(spread.diff_sq) / math.sqrt(spread.spread_sq), sys.float_info.max)
    assert found.value == pytest.approx(expected, rel=1e-9)
    assert found.passed == (found.value <= budget)


@given(spreads(), spreads())
def test_a_flat_recorded_part_is_not_judged_whatever_the_pool(pool: Spread, part: Spread) -> None:
    found = judge_variation(pool, 0.5, "o", recorded=part)
    alone = judge_variation(part, 0.5, "o")
    if isinstance(alone, str) and isinstance(judge_variation(pool, 0.5, "o"), Criterion):
        assert found == alone.replace("the inputs", "the recorded inputs")
    if isinstance(alone, Criterion):
        assert found == judge_variation(pool, 0.5, "o")


@given(spreads(), st.floats(1e-3, 1e3))
def test_judge_variation_does_not_depend_on_the_outputs_scale(spread: Spread, k: float) -> None:
    scaled = Spread(
        n_inputs=spread.n_inputs,
        diff_sq=spread.diff_sq * k * k,
        spread_sq=spread.spread_sq * k * k,
        ref_sq=spread.ref_sq * k * k,
        eps=spread.eps,
    )
    a, b = judge_variation(spread, 0.5, "o"), judge_variation(scaled, 0.5, "o")
    if isinstance(a, Criterion) and isinstance(b, Criterion):
        assert b.value == pytest.approx(a.value, rel=1e-6)


@given(spreads(), _sq)
def test_more_error_never_scores_better(spread: Spread, extra: float) -> None:
    worse = Spread(
        n_inputs=spread.n_inputs,
        diff_sq=spread.diff_sq + extra,
        spread_sq=spread.spread_sq,
        ref_sq=spread.ref_sq,
        eps=spread.eps,
    )
    a, b = judge_variation(spread, 0.5, "o"), judge_variation(worse, 0.5, "o")
    if isinstance(a, Criterion):
        assert isinstance(b, Criterion) and b.value >= a.value


# --- the shell's accumulation over calls (torch) -----------------------------------------------

_rows = st.lists(
    st.lists(st.floats(-3.0, 3.0, allow_nan=False), min_size=3, max_size=3),
    min_size=2,
    max_size=12,
)


def _accumulate(eager: torch.Tensor, candidate: torch.Tensor, cut: int) -> Spread:
    """Feed the rows as two calls (batch sizes ``cut`` and the rest), return the leaf's Spread."""
    spreads = Spreads()
    for lo, hi in ((0, cut), (cut, eager.shape[0])):
        if hi > lo:
            spreads.add(candidate[lo:hi], eager[lo:hi], hi - lo)
    return spreads.by_leaf()["output"]


@given(_rows, st.floats(-1e3, 1e3), st.data())
def test_an_input_independent_candidate_scores_at_least_one(
    rows: list[list[float]], offset: float, data: st.DataObject
) -> None:
    """Whatever constant it returns: eager's mean is the closest constant, and it scores 1."""
    eager = torch.tensor(rows, dtype=torch.float64) * 0.1 + offset
    varied = float((eager - eager.mean(dim=0)).abs().max())
    assume(varied == 0 or varied > 1e-100)  # squares of 1e-159 underflow: no output is that small
    constant = torch.tensor(data.draw(st.lists(st.floats(-1e3, 1e3), min_size=3, max_size=3)))
    cut = data.draw(st.integers(0, len(rows)))
    spread = _accumulate(eager, constant.expand_as(eager), cut)
    found = judge_variation(spread, 0.5, "output")
    if isinstance(found, Criterion):
        assert found.value >= 1 - 1e-6
        mean = _accumulate(eager, eager.mean(dim=0).expand_as(eager), cut)
        assert math.sqrt(mean.diff_sq / mean.spread_sq) == pytest.approx(1.0, rel=1e-6)


@given(_rows, st.floats(-1e4, 1e4), st.integers(0, 12))
def test_the_spread_is_eagers_rows_centred_on_their_mean(
    rows: list[list[float]], offset: float, cut: int
) -> None:
    eager = torch.tensor(rows, dtype=torch.float64) + offset
    candidate = eager + 0.01
    spread = _accumulate(eager, candidate, min(cut, len(rows)))
    centred = eager - eager.mean(dim=0)
    assert spread.n_inputs == len(rows)
    assert spread.spread_sq == pytest.approx(float(centred.square().sum()), rel=1e-6, abs=1e-6)
    assert spread.diff_sq == pytest.approx(1e-4 * eager.numel(), rel=1e-6)
    assert spread.ref_sq == pytest.approx(float(eager.square().sum()), rel=1e-9)
