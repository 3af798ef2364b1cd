"""Specs of the correctness guard: the user's model is never changed, wrong outputs never pass."""

from __future__ import annotations

import copy
import warnings
from collections import OrderedDict
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from structlog.testing import LogCapture

from aitune_fp.inputs import GraphSpec, Sample, copy_sample
from aitune_fp.isolation.model import ModelGuard, SampleGuard
from aitune_fp.pipeline.strategies import FirstWinsStrategy, OneBackendStrategy
from tests.validation_helpers import CLOCK, FAST_CONFIG, Pruned, Slower, gated, make_case

validated = gated


def state(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


def same_state(module: torch.nn.Module, before: dict[str, torch.Tensor]) -> bool:
    now = module.state_dict()
    return now.keys() == before.keys() and all(torch.equal(now[k], v) for k, v in before.items())


class ScalesInBuild(Pruned):
    """Fast, and doubles the user's weights in place while it builds."""

    def _build(self, given: Any) -> None:
        super()._build(given)
        with torch.no_grad():
            given.module.useful.weight.mul_(2.0)


class QuantizesInPlace(Pruned):
    """Fast, and swaps the user's Linear for an int8 one (quantize_dynamic(inplace=True))."""

    def _build(self, given: Any) -> None:
        super()._build(given)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.ao.quantization.quantize_dynamic(given.module, {torch.nn.Linear}, inplace=True)


class CastsInBuild(Pruned):
    """Fast, and casts the user's module to double in place."""

    def _build(self, given: Any) -> None:
        super()._build(given)
        given.module.double()

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
        return out if type(self).calls <= 16 else torch.full_like(out, 123.0)  # past the 14 checks


#: Both places a candidate may run: a worker process (the default) and this process.
ISOLATIONS = pytest.mark.parametrize("isolation", ["process", "in_process"])


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
    @ISOLATIONS
    def test_a_build_that_edits_the_model_is_rejected_and_undone(
        self, backend: Any, named: str, isolation: str, tmp_path: Path, logs: LogCapture
    ) -> None:
        """Rejected, and the model is as it came. In process: at correctness, naming the change
        and undoing it; in a worker the edit is to the worker's copy (wrong outputs there), or
        once rebuilt here it is the rebuild's change, named and undone."""
        module, spec, data = make_case()
        before = state(module)
        linear = module.useful
        strategy = validated(OneBackendStrategy(backend), isolation=isolation)
        chosen = strategy.tune(module, "m", spec, data, "cpu", tmp_path)
        assert chosen is strategy.baseline_backend
        assert len(strategy.candidate_failures) == 1, strategy.candidate_failures
        (failure,) = strategy.candidate_failures
        if isolation == "in_process":
            assert failure.stage == "correctness"
            assert named in failure.reason and "the model was restored" in failure.reason
            assert strategy.perf_validation_results == ()
        else:
            assert failure.stage in ("correctness", "rebuild"), failure
            assert failure.stage == "correctness" or named in failure.reason, failure
        assert module.useful is linear and same_state(module, before)
        assert all(p.dtype == torch.float32 for p in module.parameters())

    def test_a_change_while_timed_is_rejected_and_undone(
        self, tmp_path: Path, logs: LogCapture
    ) -> None:
        """A candidate that writes into the model after its correctness check is still caught."""
        MutatesWhenTimed.calls = 0
        module, spec, data = make_case()
        before = state(module)
        strategy = validated(  # the model this process holds: in a worker it is another
            FirstWinsStrategy([MutatesWhenTimed(), Slower()]),
            min_speedup_threshold_percent=1e6,
            isolation="in_process",
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
        CLOCK.advance(50e-6)
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
        CLOCK.advance(3.0)
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
        CLOCK.advance(50e-6)
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


# -- the whole module object: hooks, attributes, forward, class, requires_grad ---------------------


class Net(torch.nn.Module):
    """Submodules, a plain counter and label, an unregistered tensor, a dict and a list."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.layer = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
        self.fc = torch.nn.Linear(4, 2)
        self.counter = 0
        self.label = "net"
        self.table = torch.arange(4.0)  # a plain tensor attribute: not a parameter or buffer
        self.cache: dict[str, Any] = {}
        self.sizes = [1, 2]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.layer(x) + self.table)


class Slow(torch.nn.Linear):
    """A Linear that does more work: what an attacker swaps a layer's class to."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x) + 0.0


def picture(module: torch.nn.Module) -> dict[str, Any]:
    """Every submodule's class and ``__dict__``: values by value, containers by their items'
    identities, anything else by identity. Two equal pictures mean the same module object.
    """

    def kept(value: Any) -> Any:
        if isinstance(value, dict):
            return ("dict", id(value), tuple((k, kept(v)) for k, v in value.items()))
        if isinstance(value, (list, set)):
            return (type(value).__name__, id(value), tuple(kept(v) for v in value))
        if isinstance(value, torch.Tensor):
            return ("tensor", id(value), value.requires_grad, value.dtype)
        if isinstance(value, (type(None), bool, int, float, str)):
            return (type(value).__name__, value)
        return ("object", id(value))

    return {
        name: (type(m), {k: kept(v) for k, v in vars(m).items()})
        for name, m in module.named_modules()
    }


def hooked(module: torch.nn.Module, register: str, **kwargs: Any) -> list[str]:
    """Register a hook of kind ``register`` (a method name) on ``module``; the list records calls."""
    calls: list[str] = []

    def hook(*args: Any, **kw: Any) -> None:
        calls.append(register)

    getattr(module, register)(hook, **kwargs)
    return calls


X = torch.randn(3, 4)

PLAIN_VALUES = st.one_of(
    st.integers(),
    st.booleans(),
    st.none(),
    st.text(max_size=20),
    st.floats(),
    st.tuples(st.integers(), st.text(max_size=5), st.floats(allow_nan=False)),
)


class TestWholeModuleGuarded:
    @pytest.mark.parametrize(
        ("register", "kwargs", "named"),
        [
            ("register_forward_hook", {}, "layer.0: forward hook added"),
            ("register_forward_hook", {"with_kwargs": True}, "layer.0: forward hook added"),
            ("register_forward_hook", {"always_call": True}, "layer.0: forward hook added"),
            ("register_forward_pre_hook", {}, "layer.0: forward pre-hook added"),
            ("register_forward_pre_hook", {"with_kwargs": True}, "layer.0: forward pre-hook added"),
            ("register_full_backward_hook", {}, "layer.0: backward hook added"),
            ("register_full_backward_pre_hook", {}, "layer.0: backward pre-hook added"),
            ("register_state_dict_pre_hook", {}, "layer.0: state dict pre-hook added"),
            ("register_state_dict_post_hook", {}, "layer.0: state dict hook added"),
            ("register_load_state_dict_pre_hook", {}, "layer.0: load state dict pre-hook added"),
            ("register_load_state_dict_post_hook", {}, "layer.0: load state dict post-hook added"),
        ],
    )
    def test_a_hook_added_is_named_and_removed(
        self, register: str, kwargs: dict[str, Any], named: str
    ) -> None:
        """Every hook dict of nn.Module is guarded; restore leaves no hook that could fire."""
        model = Net().eval()
        before, out = picture(model), model(X)
        guard = ModelGuard(model)
        calls = hooked(model.layer[0], register, **kwargs)
        assert guard.changed() == named
        guard.restore()
        assert guard.changed() is None
        assert picture(model) == before
        model(X).sum().backward()
        model.state_dict()
        model.load_state_dict(model.state_dict())
        assert calls == []
        assert torch.equal(model(X), out)

    def test_a_hook_dict_replaced_gets_its_own_object_back(self) -> None:
        """A hook dict swapped for a new one: the original object (which handles point to)."""
        model = Net().eval()
        original = model.fc._forward_hooks
        before = picture(model)
        guard = ModelGuard(model)
        model.fc._forward_hooks = OrderedDict({99: lambda m, i, o: o * 2})
        assert guard.changed() == "fc: forward hook added"
        guard.restore()
        assert model.fc._forward_hooks is original and picture(model) == before

    def test_a_hook_from_before_the_snapshot_stays(self) -> None:
        """The user's own hook is part of the model: kept by restore, its handle still works."""
        model = Net().eval()
        mine = hooked(model.fc, "register_forward_hook")
        handle = model.fc.register_forward_pre_hook(lambda m, i: None)
        guard = ModelGuard(model)
        model(X)
        assert guard.changed() is None
        theirs = hooked(model.fc, "register_forward_hook")
        assert guard.changed() == "fc: forward hook added"
        guard.restore()
        model(X)
        assert len(mine) == 2 and theirs == []
        handle.remove()  # the same dict object: the user's handle removes from it
        assert len(model.fc._forward_pre_hooks) == 0

    def test_requires_grad_flipped_is_named_and_restored(self) -> None:
        model = Net().eval()
        guard = ModelGuard(model)
        model.fc.weight.requires_grad_(False)
        assert guard.changed() == "tensor 'fc.weight' requires_grad changed True -> False"
        guard.restore()
        assert model.fc.weight.requires_grad and guard.changed() is None

    @pytest.mark.parametrize(
        ("attack", "named"),
        [
            (lambda m: setattr(m, "foo", 3), "<root>: attribute 'foo' added (3)"),
            (
                lambda m: setattr(m, "counter", m.counter + 3),
                "<root>: attribute 'counter' changed 0 -> 3",
            ),
            (
                lambda m: setattr(m.fc, "in_features", 5),
                "fc: attribute 'in_features' changed 4 -> 5",
            ),
            (lambda m: delattr(m, "label"), "<root>: attribute 'label' removed"),
            (
                lambda m: setattr(m, "label", None),
                "<root>: attribute 'label' changed 'net' -> None",
            ),
            (lambda m: m.cache.update(k=1), "<root>: attribute 'cache': entry 'k' added"),
            (lambda m: m.sizes.append(3), "<root>: attribute 'sizes': length changed 2 -> 3"),
            (lambda m: m.sizes.__setitem__(1, 5), "<root>: attribute 'sizes': item 1 replaced"),
            (lambda m: setattr(m, "sizes", (1, 2)), "<root>: attribute 'sizes' replaced"),
            (
                lambda m: m.fc._non_persistent_buffers_set.add("x"),
                "fc: attribute '_non_persistent_buffers_set': changed set() -> {'x'}",
            ),
        ],
        ids=[
            "added",
            "counter",
            "sub-attribute",
            "removed",
            "to-none",
            "dict",
            "list-append",
            "list-item",
            "list-to-tuple",
            "set",
        ],
    )
    def test_a_plain_attribute_change_is_named_and_undone(self, attack: Any, named: str) -> None:
        model = Net().eval()
        before, cache, sizes = picture(model), model.cache, model.sizes
        guard = ModelGuard(model)
        attack(model)
        assert guard.changed() == named
        guard.restore()
        assert guard.changed() is None and picture(model) == before
        assert model.cache is cache and model.sizes is sizes and not hasattr(model, "foo")

    def test_an_unregistered_tensor_attribute_is_guarded(self) -> None:
        """Added, written in place, or replaced: named, and the same tensor holds the old values."""
        model = Net().eval()
        table, values, out = model.table, model.table.clone(), model(X)
        guard = ModelGuard(model)
        model.fc.scratch = torch.zeros(2)
        assert str(guard.changed()).startswith("fc: attribute 'scratch' added (tensor(")
        guard.restore()
        assert not hasattr(model.fc, "scratch")
        model.table.add_(0.5)
        assert guard.changed() == "tensor 'table' values changed (max |Δ| 0.5)"
        guard.restore()
        assert torch.equal(table, values)
        model.table = torch.arange(4.0)
        assert guard.changed() == "<root>: tensor attribute 'table' replaced"
        guard.restore()
        assert model.table is table and torch.equal(model(X), out)

    def test_tensors_held_in_containers_are_guarded(self) -> None:
        """A tensor one container deep (a cache dict, a list) is checked by value too."""
        model = Net().eval()
        model.cache["k"] = torch.ones(3)
        model.sizes.append(torch.ones(2))
        guard = ModelGuard(model)
        model.cache["k"].mul_(3.0)
        assert guard.changed() == "tensor \"cache['k']\" values changed (max |Δ| 2)"
        guard.restore()
        model.sizes[2][0] = 7.0
        assert guard.changed() == "tensor 'sizes[2]' values changed (max |Δ| 6)"
        guard.restore()
        assert torch.equal(model.cache["k"], torch.ones(3)) and torch.equal(
            model.sizes[2], torch.ones(2)
        )

    @pytest.mark.parametrize("where", ["", "fc"])
    def test_forward_replaced_is_named_and_removed(self, where: str) -> None:
        model = Net().eval()
        target, out = model.get_submodule(where), model(X)

        def slower(*args: Any) -> Any:
            return type(target).forward(target, *args) + 0.0

        guard = ModelGuard(model)
        target.forward = slower
        assert guard.changed() == f"{where or '<root>'}: forward replaced"
        guard.restore()
        assert "forward" not in vars(target) and guard.changed() is None
        assert torch.equal(model(X), out)

    def test_a_method_replaced_is_named(self) -> None:
        model = Net().eval()
        guard = ModelGuard(model)
        model.fc.extra_repr = lambda: "x"
        assert guard.changed() == "fc: method 'extra_repr' replaced"
        guard.restore()
        assert "extra_repr" not in vars(model.fc)

    def test_class_replaced_is_named_and_restored(self) -> None:
        model = Net().eval()
        guard = ModelGuard(model)
        model.fc.__class__ = Slow
        assert guard.changed() == "fc: class changed Linear -> Slow"
        guard.restore()
        assert type(model.fc) is torch.nn.Linear and guard.changed() is None

    def test_training_flag_is_named_and_restored(self) -> None:
        model = Net().eval()
        guard = ModelGuard(model)
        model.layer.train()
        assert guard.changed() == "layer: training flag changed False -> True"
        guard.restore()
        assert not any(m.training for m in model.modules())

    def test_a_restored_cast_does_not_share_memory_with_the_snapshot(self) -> None:
        """After a cast is undone, a later write into the weight is still seen (no aliasing)."""
        model = Net().eval()
        guard = ModelGuard(model)
        model.fc.double()
        assert guard.changed() is not None
        guard.restore()
        assert model.fc.weight.dtype == torch.float32 and guard.changed() is None
        with torch.no_grad():
            model.fc.weight.add_(1.0)
        assert guard.changed() == "tensor 'fc.weight' values changed (max |Δ| 1)"
        guard.restore()
        assert guard.changed() is None

    def test_weights_sent_to_meta_are_named_and_brought_back(self) -> None:
        """A parameter whose contents went to the meta device (values gone): named, restored."""
        model = Net().eval()
        with torch.no_grad():  # no autograd graph holding the weight: it can be swapped
            values, out, weight = state(model), model(X), model.fc.weight
        guard = ModelGuard(model)
        torch.utils.swap_tensors(weight, torch.nn.Parameter(torch.empty(2, 4, device="meta")))
        assert guard.changed() == "tensor 'fc.weight' values can no longer be read (now on meta)"
        guard.restore()
        assert model.fc.weight is weight and weight.device.type == "cpu"
        with torch.no_grad():
            assert same_state(model, values) and torch.equal(model(X), out)
        assert guard.changed() is None

    def test_many_changes_at_once_are_all_undone(self) -> None:
        """Everything above together: one restore puts the whole object back."""
        model = Net().eval()
        before, state_before, out = picture(model), state(model), model(X)
        guard = ModelGuard(model)
        hooked(model.layer[0], "register_forward_pre_hook")
        model.fc.weight.requires_grad_(False)
        model.counter += 1
        model.extra = "x"
        model.table.add_(1.0)
        model.forward = lambda x: x
        model.layer[1].__class__ = torch.nn.Tanh
        model.layer[1] = torch.nn.Identity()
        with torch.no_grad():
            model.fc.bias.mul_(2.0)
        assert guard.changed() is not None
        guard.restore()
        assert guard.changed() is None
        assert picture(model) == before and same_state(model, state_before)
        assert torch.equal(model(X), out)

    @given(
        name=st.from_regex(r"[a-z][a-z0-9_]{0,12}", fullmatch=True),
        old=PLAIN_VALUES,
        new=PLAIN_VALUES,
    )
    @settings(max_examples=150)
    def test_any_plain_attribute_change_is_seen_and_undone(
        self, name: str, old: Any, new: Any
    ) -> None:
        """An int/str/float/bool/None/tuple attribute: a change of value or type is seen, named
        and undone; setting the same value again is no change.
        """
        assume(not hasattr(Net, name) and not hasattr(Net(), name))  # submodules too
        model = Net().eval()
        setattr(model, name, old)
        guard = ModelGuard(model)
        setattr(model, name, new)
        same = type(old) is type(new) and repr(old) == repr(new)
        what = guard.changed()
        if same:
            assert what is None
        else:
            assert what is not None and f"attribute {name!r} changed" in what
        guard.restore()
        assert guard.changed() is None and getattr(model, name) is old
        delattr(model, name)
        assert guard.changed() == f"<root>: attribute {name!r} removed"
        guard.restore()
        setattr(model, name + "_new", new)
        assert str(guard.changed()).startswith(f"<root>: attribute {name + '_new'!r} added")
        guard.restore()
        assert not hasattr(model, name + "_new")

    @given(data=st.data())
    @settings(max_examples=60)
    def test_any_single_element_write_is_seen_and_undone(self, data: st.DataObject) -> None:
        """One element of any parameter or buffer, by any amount: seen, named, restored bit-exact."""
        model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3)).eval()
        tensors = dict([*model.named_parameters(), *model.named_buffers()])
        name = data.draw(st.sampled_from(sorted(tensors)))
        tensor = tensors[name]
        index = data.draw(st.integers(0, tensor.numel() - 1))
        before = tensor.detach().clone()
        guard = ModelGuard(model)
        with torch.no_grad():
            flat = tensor.view(-1)
            flat[index] = flat[index] + data.draw(st.integers(1, 1000))
        assert str(guard.changed()).startswith(f"tensor {name!r} values changed")
        guard.restore()
        assert guard.changed() is None and torch.equal(tensor, before)


def _batchnorm_model() -> tuple[torch.nn.Module, Any]:
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3))
    model.train()
    model(torch.randn(8, 4))  # running statistics of its own
    return model.eval(), (X,)


def _hooked_model() -> tuple[torch.nn.Module, Any]:
    model = Net()
    model.fc.register_forward_hook(lambda m, i, o: o * 2)
    model.register_forward_pre_hook(lambda m, i: None)
    return model.eval(), (X,)


def _lazy_model() -> tuple[torch.nn.Module, Any]:
    model = torch.nn.Sequential(torch.nn.LazyLinear(3), torch.nn.ReLU()).eval()
    model(X)  # its first call: parameters made, class now Linear, its hooks gone
    return model, (X,)


def _lstm() -> tuple[torch.nn.Module, Any]:
    return torch.nn.LSTM(4, 5, num_layers=2).eval(), (torch.randn(2, 3, 4),)


def _transformer() -> tuple[torch.nn.Module, Any]:
    layer = torch.nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, batch_first=True)
    return torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False).eval(), (
        torch.randn(2, 5, 8),
    )


MODELS = {
    "net": lambda: (Net().eval(), (X,)),
    "batchnorm": _batchnorm_model,
    "sequential": lambda: (
        torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU()).eval(),
        (X,),
    ),
    "hooked": _hooked_model,
    "lazy": _lazy_model,
    "lstm": _lstm,
    "transformer": _transformer,
    "wasteful": lambda: (make_case()[0], (torch.randn(2, 16),)),
}


class TestNoFalsePositives:
    @pytest.mark.parametrize("kind", sorted(MODELS))
    def test_calls_in_eval_mode_change_nothing(self, kind: str) -> None:
        """Checked at once, after calls under no_grad, after moves to its own device: None."""
        model, args = MODELS[kind]()
        before = picture(model)
        guard = ModelGuard(model)
        assert guard.changed() is None
        with torch.no_grad():
            model(*args)
            model(*args)
        assert guard.changed() is None
        model.to("cpu")
        model.eval()
        copy.deepcopy(model)
        assert guard.changed() is None
        guard.restore()  # a restore with nothing to undo changes nothing
        assert guard.changed() is None and picture(model) == before

    @pytest.mark.compile
    def test_torch_compile_marks_the_module_and_that_is_no_change(self) -> None:
        """``torch.compile(module)`` sets ``_is_torch_compile`` on the module: not an attack."""
        model, args = MODELS["net"]()
        guard = ModelGuard(model)
        compiled = torch.compile(model, backend="eager")
        with torch.no_grad():
            compiled(*args)
        assert guard.changed() is None

    def test_lazy_model_after_its_first_call_keeps_its_state(self) -> None:
        """The LazyLinear became a Linear at its first call; that is the state guarded."""
        model, args = _lazy_model()
        assert type(model[0]) is torch.nn.Linear
        guard = ModelGuard(model)
        with torch.no_grad():
            model(*args)
        assert guard.changed() is None


# -- through a tune: a candidate's build that edits the module object ------------------------------


class HooksInBuild(Pruned):
    """Fast, and leaves a forward pre-hook on the user's Linear."""

    def _build(self, given: Any) -> None:
        super()._build(given)
        given.module.useful.register_forward_pre_hook(lambda m, i: None)


class ReplacesForward(Pruned):
    """Fast, and replaces the user's module's forward with a slower one."""

    def _build(self, given: Any) -> None:
        super()._build(given)
        plain = given.module.forward
        given.module.forward = lambda *a: plain(*a) + 0.0


class FreezesInBuild(Pruned):
    """Fast, and turns off requires_grad on the user's weights."""

    def _build(self, given: Any) -> None:
        super()._build(given)
        given.module.requires_grad_(False)


class CountsInBuild(Pruned):
    """Fast, and counts its builds in an attribute of the user's module."""

    def _build(self, given: Any) -> None:
        super()._build(given)
        given.module.builds = getattr(given.module, "builds", 0) + 1


class TestModelObjectNeverChanged:
    @pytest.mark.parametrize(
        ("backend", "named"),
        [
            (HooksInBuild(), "useful: forward pre-hook added"),
            (ReplacesForward(), "<root>: forward replaced"),
            (FreezesInBuild(), "tensor 'useful.weight' requires_grad changed True -> False"),
            (CountsInBuild(), "<root>: attribute 'builds' added (1)"),
        ],
        ids=["hook", "forward", "requires_grad", "attribute"],
    )
    @ISOLATIONS
    def test_a_build_that_edits_the_module_object_is_rejected_and_undone(
        self, backend: Any, named: str, isolation: str, tmp_path: Path, logs: LogCapture
    ) -> None:
        """Rejected naming the change (at correctness in process; in a worker the edit reaches
        only the worker's copy, and once chosen the rebuild here makes it: stage rebuild);
        afterwards the object is as it came."""
        module, spec, data = make_case()
        before, values = picture(module), state(module)
        strategy = validated(OneBackendStrategy(backend), isolation=isolation)
        chosen = strategy.tune(module, "m", spec, data, "cpu", tmp_path)
        assert chosen is strategy.baseline_backend
        (failure,) = strategy.candidate_failures
        assert failure.stage == ("correctness" if isolation == "in_process" else "rebuild")
        assert named in failure.reason and "the model was restored" in failure.reason
        assert picture(module) == before and same_state(module, values)
        assert all(p.requires_grad for p in module.parameters())


# -- the caller's samples ---------------------------------------------------------------------------


class TestSampleGuard:
    def test_an_input_written_in_place_is_named_and_restored(self) -> None:
        x, mask = torch.zeros(2, 3), torch.ones(2, 3)
        samples = [Sample((torch.zeros(1),)), Sample((x,), {"mask": mask})]
        guard = SampleGuard(samples)
        assert guard.changed() is None
        x.add_(0.5)
        assert guard.changed() == "sample 1, arg 0: values changed (max |Δ| 0.5)"
        guard.restore()
        assert guard.changed() is None and torch.equal(x, torch.zeros(2, 3))
        mask[0, 0] = 3.0
        assert guard.changed() == "sample 1, kwarg 'mask': values changed (max |Δ| 2)"
        guard.restore()
        assert torch.equal(mask, torch.ones(2, 3))

    def test_a_cast_or_requires_grad_flip_is_named_and_restored(self) -> None:
        x = torch.zeros(2, 3)
        guard = SampleGuard([Sample((x,))])
        x.data = x.data.double()
        assert guard.changed() == (
            "sample 0, arg 0: changed from torch.float32 (2, 3) to torch.float64 (2, 3)"
        )
        guard.restore()
        assert x.dtype == torch.float32
        x.requires_grad_(True)
        assert guard.changed() == "sample 0, arg 0: requires_grad changed False -> True"
        guard.restore()
        assert not x.requires_grad and guard.changed() is None

    def test_nested_containers_are_guarded_and_put_back(self) -> None:
        """Tensors inside lists and dicts; entries replaced, added, removed: the originals return."""
        a, b = torch.zeros(2), torch.ones(2)
        items, table = [a, b], {"k": a}
        guard = SampleGuard([Sample((items, table))])
        items[1] = torch.ones(2)
        assert guard.changed() == "sample 0, arg 0: item 1 replaced"
        guard.restore()
        assert items[1] is b
        table["new"] = 1
        del table["k"]
        assert guard.changed() == "sample 0, arg 1: entry 'new' added"
        guard.restore()
        assert table == {"k": a} and table["k"] is a
        b.mul_(3.0)
        assert guard.changed() == "sample 0, arg 0[1]: values changed (max |Δ| 2)"
        guard.restore()
        assert torch.equal(b, torch.ones(2))

    @pytest.mark.parametrize(
        ("sample", "named"),
        [
            (lambda x: x, "sample 0: values changed"),
            (lambda x: (x, torch.zeros(1)), "sample 0[0]: values changed"),
            (lambda x: [x], "sample 0[0]: values changed"),
            (lambda x: {"x": x}, "sample 0['x']: values changed"),
            (lambda x: ((x,), {}), "sample 0, arg 0: values changed"),
            (lambda x: ([], {"x": x}), "sample 0, kwarg 'x': values changed"),
        ],
        ids=["tensor", "tuple", "list", "dict", "pair", "pair-kwarg"],
    )
    def test_plain_samples_are_guarded(self, sample: Any, named: str) -> None:
        """Tensors, tuples, lists, dicts and (args, kwargs) pairs: the changed tensor named."""
        x = torch.zeros(3)
        guard = SampleGuard([sample(x)])
        x[1] = 1.0
        assert str(guard.changed()).startswith(named)
        guard.restore()
        assert torch.equal(x, torch.zeros(3))

    def test_a_pairs_mutable_kwargs_are_put_back(self) -> None:
        kwargs: dict[str, Any] = {"x": torch.zeros(1)}
        guard = SampleGuard([([], kwargs)])
        kwargs["y"] = 2
        assert guard.changed() == "sample 0, kwargs: entry 'y' added"
        guard.restore()
        assert list(kwargs) == ["x"]

    def test_a_samples_fields_replaced_are_put_back(self) -> None:
        """A frozen Sample's args swapped by force: named, and the original tuple returns."""
        sample = Sample((torch.zeros(1),))
        args = sample.args
        guard = SampleGuard([sample])
        object.__setattr__(sample, "args", (torch.ones(1),))
        assert guard.changed() == "sample 0: args replaced"
        guard.restore()
        assert sample.args is args

    def test_using_the_samples_changes_nothing(self) -> None:
        """Batching, copying and calling a model on the samples (one tensor in two): no change."""
        shared = torch.randn(2, 4)
        samples = [Sample((shared,)), Sample((torch.randn(1, 4),), {"extra": [shared, {"a": 1}]})]
        guard = SampleGuard(samples)
        model = Net().eval()
        with torch.no_grad():
            for sample in samples:
                GraphSpec(max_batch_size=4).make_batch(sample, 4)
                copy_sample(sample)
                model(*sample.args)
        assert guard.changed() is None
        guard.restore()
        assert guard.changed() is None

    def test_a_container_holding_itself_is_walked_once(self) -> None:
        loop: list[Any] = [torch.zeros(1)]
        loop.append(loop)
        guard = SampleGuard([Sample((loop,))])
        loop[0].add_(1.0)
        assert guard.changed() == "sample 0, arg 0[0]: values changed (max |Δ| 1)"
        guard.restore()
        assert guard.changed() is None


def test_a_judges_method_replaced_in_this_process_is_named_and_put_back(tmp_path: Path) -> None:
    """Candidate code that runs here (a pickling hook, a ``describe`` a driver calls, the
    hand-back) and rebinds a method of the judge (``Worker.run_block``: eager's blocks read
    twice as long) changes the process: named, put back, the candidate rejected."""
    from aitune_fp.pipeline.stages import Guards
    from aitune_fp.pipeline.values import TuneTarget
    from aitune_fp.profiling.workers import Worker

    module, spec, data = make_case()
    guards = Guards.take(TuneTarget.of(module, "m", spec, data, "cpu", tmp_path))
    genuine = Worker.run_block
    Worker.run_block = lambda self, calls: genuine(self, calls)  # type: ignore[method-assign]
    try:
        changed = guards.changed()
        assert changed is not None and "run_block" in str(changed)
        assert Worker.__dict__["run_block"] is genuine
        assert guards.changed() is None
    finally:
        Worker.run_block = genuine  # type: ignore[method-assign]
