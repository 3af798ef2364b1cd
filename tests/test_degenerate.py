"""Eager outputs that cannot tell candidates apart are named (issue 35): constant across the
inputs, or an output leaf near zero on every input. A candidate that ignores its input (or returns zeros) would pass the
correctness check on such a model, so the tune says the check means little there."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from aitune_fp import (
    GraphSpec,
    OneBackendStrategy,
    ProfilingConfig,
    Sample,
    validation_of,
    with_performance_validation,
)
from aitune_fp.core.report import TuneReport
from aitune_fp.correctness.noise import degenerate_outputs
from aitune_fp.correctness.tolerances import Tolerances
from aitune_fp.events.kinds import fold
from aitune_fp.events.validation import BaselineMeasured
from tests.validation_helpers import _ModuleBackend


def test_outputs_that_vary_with_the_input_are_fine() -> None:
    torch.manual_seed(0)
    assert degenerate_outputs([torch.randn(4, 10) for _ in range(3)]) is None


def test_outputs_that_hardly_change_are_named() -> None:
    torch.manual_seed(0)
    base = torch.randn(4, 10)
    outputs = [{"logits": base + 1e-4 * torch.randn(4, 10)} for _ in range(3)]
    reason = degenerate_outputs(outputs)
    assert reason is not None and "hardly change with the input" in reason
    assert "across 3 inputs" in reason


def test_outputs_all_near_zero_are_named() -> None:
    reason = degenerate_outputs([torch.full((2, 3), 1e-4), torch.full((2, 3), -2e-4)])
    assert reason is not None and "a candidate that returns zeros" in reason


@given(st.integers(-30, -3), st.floats(0.5, 10.0))
def test_a_near_zero_leaf_beside_ordinary_ones_is_named(exponent: int, scale: float) -> None:
    """Logits far below ``atol`` are named whatever the other leaves' scale (issue 35).

    As a classifier's with vanishing activations returns them beside its hidden states.
    """
    generator = torch.Generator().manual_seed(0)
    outputs = [
        {
            "logits": 10.0**exponent * torch.randn(2, 10, generator=generator),
            "hidden_states": (scale * torch.randn(2, 4, generator=generator),),
        }
        for _ in range(3)
    ]
    reason = degenerate_outputs(outputs)
    assert reason is not None and "a candidate that returns zeros there passes" in reason
    assert "output['logits']" in reason and "hidden_states" not in reason


@dataclasses.dataclass
class _Plain:
    """An output class that is not a pytree node; the correctness check compares its fields."""

    logits: torch.Tensor


def test_a_near_zero_leaf_inside_any_output_the_check_reads_is_named() -> None:
    outputs = [_Plain(torch.full((2, 3), 1e-21)), _Plain(torch.full((2, 3), -2e-21))]
    reason = degenerate_outputs(outputs)
    assert reason is not None and "all within 0.01 of zero" in reason


def test_outputs_of_different_shapes_or_no_floats_say_nothing() -> None:
    assert degenerate_outputs([torch.ones(2, 3), torch.ones(3, 3)]) is None
    assert degenerate_outputs([torch.arange(3), torch.arange(3)]) is None
    assert degenerate_outputs([]) is None


@given(
    st.floats(0.5, 10.0),
    st.floats(0.0, 1.0),
    st.floats(1e-3, 0.5),
)
def test_the_constant_rule_follows_the_reduced_budget(
    scale: float, wobble: float, budget: float
) -> None:
    """Two outputs ``scale * (1 ± wobble)``: degenerate iff their spread is within the budget."""
    outputs = [torch.full((3,), scale * (1 + wobble)), torch.full((3,), scale * (1 - wobble))]
    reason = degenerate_outputs(outputs, Tolerances(reduced_rel_l2=budget, reduced_atol=0.1))
    # spread wobble*scale around the mean scale, size sqrt(scale^2 (1 + wobble^2))
    spread = wobble / (1 + wobble**2) ** 0.5
    if spread < budget * 0.999:
        assert reason is not None
    elif spread > budget * 1.001:
        assert reason is None


class _Blind(torch.nn.Module):
    """A model whose output ignores its input (random weights saturated, say)."""

    def __init__(self) -> None:
        super().__init__()
        self.bias = torch.nn.Parameter(torch.linspace(-1, 1, 8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.bias.expand(x.shape[0], -1) + 0.0 * x


class _Constant(_ModuleBackend):
    """Returns eager's one output in bf16, whatever the input."""

    def _infer(self, *args: object, **kwargs: object) -> torch.Tensor:
        with torch.no_grad():
            return self.module.bias.expand(args[0].shape[0], -1).to(torch.bfloat16)  # type: ignore[union-attr]

    @property
    def dtype(self) -> torch.dtype:
        return torch.bfloat16


@pytest.mark.parametrize("isolation", ["process", "in_process"])
def test_a_tune_on_such_a_model_says_so(isolation: str, tmp_path: Path) -> None:
    strategy = with_performance_validation(
        OneBackendStrategy(_Constant()),
        profiling_config=ProfilingConfig(looks=(10,), max_seconds=2.0, warmup_max_calls=8),
        isolation=isolation,  # type: ignore[arg-type]
    )
    data = [Sample((torch.randn(1, 8),)), Sample((torch.randn(1, 8),))]
    strategy.tune(_Blind().eval(), "m", GraphSpec(max_batch_size=4), data, "cpu", tmp_path)
    report = validation_of(strategy).last_report
    assert report is not None
    assert report.degenerate_outputs is not None
    assert "hardly change with the input" in report.degenerate_outputs


def test_the_report_folded_from_events_keeps_it() -> None:

    event = BaselineMeasured(
        run_id="r",
        module_name="m",
        backend_description="eager",
        batch_size=1,
        throughput_samples_per_s=1.0,
        n_calls=1,
        duration_s=0.1,
        decision="statistical",
        degenerate_outputs="why",
    ).to_event()
    assert event.fields["degenerate_outputs"] == "why"
    assert event.payload is not None
    run = fold(TuneReport(run_id="r", module_name="m"), event.payload)
    assert run.degenerate_outputs == "why"


@pytest.mark.parametrize("isolation", ["process", "in_process"])
def test_a_constant_candidate_in_bf16_is_rejected_where_eager_varies(
    isolation: str, tmp_path: Path
) -> None:
    """The reduced tier's looser budget does not let a constant through (issue 31)."""
    strategy = with_performance_validation(
        OneBackendStrategy(_Constant()),
        profiling_config=ProfilingConfig(looks=(10,), max_seconds=2.0, warmup_max_calls=8),
        isolation=isolation,  # type: ignore[arg-type]
    )
    data = [Sample((torch.randn(1, 8),)), Sample((torch.randn(1, 8),))]
    varies = torch.nn.Linear(8, 8)
    varies.weight = torch.nn.Parameter(torch.eye(8))  # the input itself, plus
    varies.bias = torch.nn.Parameter(torch.linspace(-1, 1, 8))  # what _Constant hands out
    strategy.tune(varies.eval(), "m", GraphSpec(max_batch_size=4), data, "cpu", tmp_path)
    (failure,) = strategy.candidate_failures
    assert failure.stage == "correctness"
    assert "values differ from the eager reference" in failure.reason
    report = validation_of(strategy).last_report
    assert report is not None and report.degenerate_outputs is None


def _mobilenet_v2(fan_out_init: bool) -> torch.nn.Module:
    """A small transformers MobileNetV2 (random weights): its own init, or torchvision's."""
    from transformers import MobileNetV2Config, MobileNetV2ForImageClassification

    config = MobileNetV2Config(num_labels=10, image_size=32, depth_multiplier=0.35)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = MobileNetV2ForImageClassification(config)
        for m in model.modules() if fan_out_init else ():
            if isinstance(m, torch.nn.Conv2d):
                torch.nn.init.kaiming_normal_(m.weight, mode="fan_out")
    return model.eval()


@pytest.mark.hf
@pytest.mark.parametrize(
    ("fan_out_init", "hidden_states"), [(False, False), (False, True), (True, True)]
)
def test_mobilenet_v2s_vanishing_logits_are_named(fan_out_init: bool, hidden_states: bool) -> None:
    """transformers' MobileNetV2 at its own init gives logits about 1e-21 (torchvision's: 1e-9,
    beside hidden states near 0.1): a candidate returning zeros would pass (issue 35)."""
    model = _mobilenet_v2(fan_out_init)
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        outputs = [
            model(
                pixel_values=torch.randn(2, 3, 32, 32, generator=generator),
                output_hidden_states=hidden_states,
                return_dict=True,
            )
            for _ in range(3)
        ]
    assert float(outputs[0].logits.abs().max()) < 1e-6
    reason = degenerate_outputs(outputs)
    assert reason is not None and "a candidate that returns zeros" in reason
    assert ("eager's output['logits']" if fan_out_init else "all within") in reason
