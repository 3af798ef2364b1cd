"""Specs of the correctness guard: the user's model is never changed, wrong outputs never pass."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from structlog.testing import LogCapture

from aitune_fp import FirstWinsStrategy, GraphSpec, OneBackendStrategy, Sample
from aitune_fp.guard import ModelGuard
from tests.validation_helpers import CLOCK, FAST_CONFIG, Pruned, Slower, gated, make_case

validated = gated


def state(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


def same_state(module: torch.nn.Module, before: dict[str, torch.Tensor]) -> bool:
    now = module.state_dict()
    return now.keys() == before.keys() and all(torch.equal(now[k], v) for k, v in before.items())


class ScalesInBuild(Pruned):
    """Fast, and doubles the user's weights in place while it builds."""

    def _build(self, module: Any, graph_spec: Any, data: Any, device: Any) -> None:
        super()._build(module, graph_spec, data, device)
        with torch.no_grad():
            module.useful.weight.mul_(2.0)


class QuantizesInPlace(Pruned):
    """Fast, and swaps the user's Linear for an int8 one (quantize_dynamic(inplace=True))."""

    def _build(self, module: Any, graph_spec: Any, data: Any, device: Any) -> None:
        super()._build(module, graph_spec, data, device)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.ao.quantization.quantize_dynamic(module, {torch.nn.Linear}, inplace=True)


class CastsInBuild(Pruned):
    """Fast, and casts the user's module to double in place."""

    def _build(self, module: Any, graph_spec: Any, data: Any, device: Any) -> None:
        super()._build(module, graph_spec, data, device)
        module.double()

    def _infer(self, *args: Any, **kwargs: Any) -> Any:
        return super()._infer(*(a.double() for a in args)).float()


class MutatesWhenTimed(Pruned):
    """Correct while checked, then writes into a buffer of the user's model while timed.

    The buffer does not feed the output, so only the model check can see it.
    """

    calls = 0

    def _infer(self, *args: Any, **kwargs: Any) -> Any:
        type(self).calls += 1
        if type(self).calls == 12:
            with torch.no_grad():
                self.module.w.add_(1.0)
        return super()._infer(*args, **kwargs)


class GoesWrong(Pruned):
    """Correct for its first calls, then returns garbage (a stale cache, a recompile bug)."""

    calls = 0

    def _infer(self, *args: Any, **kwargs: Any) -> Any:
        type(self).calls += 1
        out = super()._infer(*args, **kwargs)
        return out if type(self).calls <= 6 else torch.full_like(out, 123.0)


class TestModelNeverChanged:
    @pytest.mark.parametrize(
        ("backend", "named"),
        [
            (ScalesInBuild(), "'useful.weight' values changed"),
            (QuantizesInPlace(), "submodule 'useful' of '<root>' was replaced"),
            (CastsInBuild(), "of '<root>' was replaced"),
        ],
        ids=["scaled", "quantized", "cast"],
    )
    def test_a_build_that_edits_the_model_is_rejected_and_undone(
        self, backend: Any, named: str, tmp_path: Path, logs: LogCapture
    ) -> None:
        """Rejected at stage correctness, naming the change; the model is as it came."""
        module, spec, data = make_case()
        before = state(module)
        linear = module.useful
        strategy = validated(OneBackendStrategy(backend))
        chosen = strategy.tune(module, "m", spec, data, "cpu", tmp_path)
        assert chosen is strategy.baseline_backend
        (failure,) = strategy.candidate_failures
        assert failure.stage == "correctness"
        assert named in failure.reason and "the model was restored" in failure.reason
        assert strategy.perf_validation_results == ()
        assert module.useful is linear and same_state(module, before)
        assert all(p.dtype == torch.float32 for p in module.parameters())

    def test_a_change_while_timed_is_rejected_and_undone(
        self, tmp_path: Path, logs: LogCapture
    ) -> None:
        """A candidate that writes into the model after its correctness check is still caught."""
        MutatesWhenTimed.calls = 0
        module, spec, data = make_case()
        before = state(module)
        strategy = validated(
            FirstWinsStrategy([MutatesWhenTimed(), Slower()]), min_speedup_threshold_percent=1e6
        )
        with pytest.raises(Exception, match="no valid backend"):
            strategy.tune(module, "m", spec, data, "cpu", tmp_path)
        first = strategy.candidate_failures[0]
        assert (first.backend_description, first.stage) == ("MutatesWhenTimed()", "correctness")
        assert "tensor 'w' values changed" in first.reason
        assert same_state(module, before)

    def test_the_guard_restores_what_it_names(self) -> None:
        """ModelGuard on its own: a swapped submodule, a cast and a write are all put back."""
        model = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.BatchNorm1d(3))
        before, first = state(model), model[0]
        guard = ModelGuard(model)
        assert guard.changed() is None
        model[0] = torch.nn.Linear(3, 3)
        model[1].double()
        with torch.no_grad():
            first.weight.add_(1.0)
        assert guard.changed() is not None
        guard.restore()
        assert guard.changed() is None
        assert model[0] is first and same_state(model, before)
        assert model[1].weight.dtype == torch.float32


class TestOutputsCheckedWhileTimed:
    def test_garbage_after_the_first_calls_is_rejected(
        self, tmp_path: Path, logs: LogCapture
    ) -> None:
        """A candidate right at first and wrong later is rejected at correctness, call named."""
        GoesWrong.calls = 0
        strategy = validated(OneBackendStrategy(GoesWrong()))
        module, spec, data = make_case()
        chosen = strategy.tune(module, "m", spec, data, "cpu", tmp_path)
        assert chosen is strategy.baseline_backend
        (failure,) = strategy.candidate_failures
        assert failure.stage == "correctness"
        assert failure.reason.startswith("timed call ")
        assert strategy.perf_validation_results == ()

    def test_garbage_in_point_mode_too(self, tmp_path: Path, logs: LogCapture) -> None:
        """AITune's point rule gets the same spot checks."""
        GoesWrong.calls = 0
        import attrs

        strategy = validated(
            OneBackendStrategy(GoesWrong()),
            profiling_config=attrs.evolve(FAST_CONFIG, decision="point"),
        )
        module, spec, data = make_case()
        strategy.tune(module, "m", spec, data, "cpu", tmp_path)
        assert [f.stage for f in strategy.candidate_failures] == ["correctness"]


class WithNorm(torch.nn.Module):
    """BatchNorm and Dropout: a model whose training mode changes what it computes and keeps."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(3)
        self.lin = torch.nn.Linear(16, 8)
        self.norm = torch.nn.BatchNorm1d(8)
        self.drop = torch.nn.Dropout(0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        CLOCK.spend(50_000)
        return self.drop(self.norm(self.lin(x)))


class Same(Pruned):
    """The eager module itself, as a candidate: identical outputs."""

    def _infer(self, *args: Any, **kwargs: Any) -> Any:
        with torch.no_grad():
            return self.module(*args)


class TestTrainingMode:
    def test_validated_in_eval_and_returned_in_training_mode(
        self, tmp_path: Path, logs: LogCapture
    ) -> None:
        """BatchNorm statistics are not overwritten; Dropout does not fail the check; said once."""
        module = WithNorm().train()
        before = state(module)
        strategy = validated(OneBackendStrategy(Same()))
        spec, data = GraphSpec(max_batch_size=4), [Sample((torch.randn(2, 16),))]
        strategy.tune(module, "m", spec, data, "cpu", tmp_path)
        assert strategy.candidate_failures == ()
        assert [r.backend_description for r in strategy.perf_validation_results] == ["Same()"]
        assert all(m.training for m in module.modules())
        assert same_state(module, before)  # running_mean, running_var, num_batches_tracked
        (event,) = [e for e in logs.entries if e["event"].endswith(".eval_mode")]
        assert event["n_training_modules"] == 4 and event["log_level"] == "warning"

    def test_eval_model_stays_eval_without_a_warning(
        self, tmp_path: Path, logs: LogCapture
    ) -> None:
        """A model already in eval mode is left so, and nothing is said."""
        module = WithNorm().eval()
        strategy = validated(OneBackendStrategy(Same()))
        spec, data = GraphSpec(max_batch_size=4), [Sample((torch.randn(2, 16),))]
        strategy.tune(module, "m", spec, data, "cpu", tmp_path)
        assert not any(m.training for m in module.modules())
        assert not [e for e in logs.entries if e["event"].endswith(".eval_mode")]


class DescribeBreaksLater(Pruned):
    """Describes itself until it has been timed a while, then describe() raises."""

    calls = 0

    def _infer(self, *args: Any, **kwargs: Any) -> Any:
        type(self).calls += 1
        return super()._infer(*args, **kwargs)

    def describe(self) -> str:
        if type(self).calls > 8:
            raise RuntimeError("describe broke")
        return super().describe()


class TestNothingLost:
    def test_a_describe_that_raises_later_still_selects_and_finishes(
        self, tmp_path: Path, logs: LogCapture
    ) -> None:
        """The accepted candidate is selected and the run finished, named by its class."""
        DescribeBreaksLater.calls = 0
        strategy = validated(OneBackendStrategy(DescribeBreaksLater()))
        module, spec, data = make_case()
        chosen = strategy.tune(module, "m", spec, data, "cpu", tmp_path)
        assert isinstance(chosen, DescribeBreaksLater) and chosen.is_active
        names = [e["event"].rsplit(".", 1)[1] for e in logs.entries]
        assert names[-2:] == ["selected", "finished"]
        assert logs.entries[-1]["outcome"] == "candidate"

    @pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
    def test_a_device_that_cannot_be_used_keeps_the_candidates_failure(
        self, tmp_path: Path, logs: LogCapture
    ) -> None:
        """device='cuda' on a CPU machine: the candidate's own failure is recorded, not lost."""
        strategy = validated(OneBackendStrategy(Pruned()))
        module, spec, data = make_case()
        with pytest.raises(Exception, match="no valid backend"):
            strategy.tune(module, "m", spec, data, "cuda", tmp_path)
        report = strategy.last_report
        assert report.baseline_error is not None
        assert [f.backend_description for f in report.candidate_failures] == ["Pruned()"]
        assert logs.entries[-1]["event"].endswith(".finished")


class SlowToTime(Pruned):
    """Correct, but each call takes 3 s (fake): the first look cannot fit a small budget."""

    def _infer(self, *args: Any, **kwargs: Any) -> Any:
        CLOCK.spend(3e9)
        return super()._infer(*args, **kwargs)


class TestHardBudget:
    def test_a_slow_candidate_ends_inconclusive_within_the_budget(
        self, tmp_path: Path, logs: LogCapture
    ) -> None:
        """No timed call starts after max_seconds; eager is kept; the reason names the budget."""
        import attrs

        strategy = validated(
            OneBackendStrategy(SlowToTime()),
            profiling_config=attrs.evolve(FAST_CONFIG, max_seconds=20.0),
        )
        module, spec, data = make_case()
        chosen = strategy.tune(module, "m", spec, data, "cpu", tmp_path)
        assert chosen is strategy.baseline_backend
        (result,) = strategy.perf_validation_results
        assert result.verdict == "inconclusive"
        assert result.reason.startswith("budget of 20 s spent before the first look")


class TestGuardCompares:
    @pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.int64])
    def test_bits_decide(self, dtype: torch.dtype) -> None:
        """Any dtype: unchanged is unchanged (NaN included), one changed element is seen."""
        model = torch.nn.Module()
        values = torch.arange(12).reshape(3, 4).to(dtype)
        if dtype.is_floating_point:
            values[0, 0] = float("nan")
        model.register_buffer("b", values)
        guard = ModelGuard(model)
        assert guard.changed() is None
        model.b[2, 3] += 1
        assert guard.changed() is not None and "'b' values changed" in str(guard.changed())
        guard.restore()
        assert guard.changed() is None


class Lazy(torch.nn.Module):
    """A LazyLinear model: its parameters exist only after the first call."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.LazyLinear(8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        CLOCK.spend(50_000)
        return self.lin(x)


class TestLazyModel:
    def test_lazy_parameters_are_no_change(self, tmp_path: Path, logs: LogCapture) -> None:
        """Eager's first call materialises the parameters; an identical candidate is measured."""
        module = Lazy().eval()
        strategy = validated(OneBackendStrategy(Same()))
        spec, data = GraphSpec(max_batch_size=4), [Sample((torch.randn(2, 16),))]
        strategy.tune(module, "m", spec, data, "cpu", tmp_path)
        assert strategy.candidate_failures == ()
        assert [r.backend_description for r in strategy.perf_validation_results] == ["Same()"]
