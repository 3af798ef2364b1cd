"""A fair comparison: a candidate cannot make itself look faster by slowing eager down.

Each candidate here is exactly as fast as eager (it does eager's work, call for call), but its
build reaches for what eager runs through: the user's module (a hook, a replaced ``forward``,
a swapped class), a global module hook, or ``torch.nn.functional``. Eager runs on a private
copy of the model, and the process state is restored around each candidate, so none of them
may be accepted, and nothing they did may outlive the tune.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.nn import functional

from aitune_fp.adapters.validation import validation_of
from aitune_fp.pipeline.strategies import OneBackendStrategy
from aitune_fp.testing import capture_events
from tests.validation_helpers import CLOCK, WASTE_NS, _ModuleBackend, gated, make_case

SLOW_NS = 20 * WASTE_NS  # what each attack costs eager per call: a 20x "speedup" if it worked


class _AsFastAsEager(_ModuleBackend):
    """Does eager's own work, bypassing the module's ``__call__`` (and so its hooks)."""

    attack: Callable[[torch.nn.Module], None] = staticmethod(lambda module: None)

    def _build(self, given: Any) -> None:
        super()._build(given)
        type(self).attack(given.module)

    def _infer(self, *args: Any, **kwargs: Any) -> Any:
        with torch.no_grad():
            self.module.wasted()
            return self.module.useful_forward(*args)


def _slow(*_: Any, **__: Any) -> None:
    CLOCK.advance(SLOW_NS / 1e9)


def _pre_hook(module: torch.nn.Module) -> None:
    module.register_forward_pre_hook(lambda m, a: _slow())


def _replace_forward(module: torch.nn.Module) -> None:
    original = module.forward

    def forward(*args: Any) -> Any:
        _slow()
        return original(*args)

    module.forward = forward  # type: ignore[method-assign]


def _swap_class(module: torch.nn.Module) -> None:
    base = type(module)

    class Slowed(base):  # type: ignore[misc, valid-type]
        def forward(self, *args: Any) -> Any:
            _slow()
            return super().forward(*args)

    module.__class__ = Slowed


def _global_hook(module: torch.nn.Module) -> None:
    torch.nn.modules.module.register_module_forward_pre_hook(lambda m, a: _slow())


def _patch_linear(module: torch.nn.Module) -> None:
    original = functional.linear

    def linear(*args: Any, **kwargs: Any) -> Any:
        _slow()
        return original(*args, **kwargs)

    functional.linear = linear  # eager's nn.Linear resolves functional.linear at every call


ATTACKS = {
    "forward pre-hook on the user's module": _pre_hook,
    "the instance's forward replaced": _replace_forward,
    "the instance's class swapped": _swap_class,
    "a global module hook": _global_hook,
    "torch.nn.functional.linear patched": _patch_linear,
}


@pytest.fixture(autouse=True)
def _process_restored() -> Iterator[None]:
    """Whatever a failing test leaves behind is undone here, so no other test pays for it."""
    linear = functional.linear
    hooks = dict(torch.nn.modules.module._global_forward_pre_hooks)
    CLOCK.reset()
    yield
    functional.linear = linear
    torch.nn.modules.module._global_forward_pre_hooks.clear()
    torch.nn.modules.module._global_forward_pre_hooks.update(hooks)


@pytest.mark.parametrize("attack", ATTACKS)
def test_slowing_eager_down_never_gets_a_candidate_accepted(attack: str, tmp_path: Path) -> None:
    backend = type("Attacker", (_AsFastAsEager,), {"attack": staticmethod(ATTACKS[attack])})()
    strategy = gated(OneBackendStrategy(backend))
    module, spec, data = make_case()
    linear, n_hooks = functional.linear, len(torch.nn.modules.module._global_forward_pre_hooks)
    chosen = strategy.tune(module, "m", spec, data, "cpu", tmp_path)
    view = validation_of(strategy)
    report = view.last_report
    assert report is not None and report.selected_is_baseline, (attack, report)
    assert chosen is view.baseline_backend
    for result in view.perf_validation_results:
        assert not result.passed and result.speedup < 2.0, (attack, result)
    # nothing the candidate did outlives the tune
    assert functional.linear is linear
    assert len(torch.nn.modules.module._global_forward_pre_hooks) == n_hooks
    assert type(module).__name__ == "Wasteful"
    assert "forward" not in vars(module)
    assert not module._forward_pre_hooks


@pytest.mark.parametrize(
    ("isolation", "eager"), [("in_process", "private_copy"), ("process", "process")]
)
def test_eager_runs_out_of_the_candidates_reach_and_the_event_says_where(
    tmp_path: Path, isolation: str, eager: str
) -> None:
    """In process eager runs on a private copy; by default in a worker of its own."""
    module, spec, data = make_case()
    strategy = gated(OneBackendStrategy(_AsFastAsEager()), isolation=isolation)
    with capture_events() as logs:
        strategy.tune(module, "m", spec, data, "cpu", tmp_path)
    (measured,) = [e for e in logs if e["event"].endswith("baseline_measured")]
    assert measured["eager_isolation"] == eager


class Memorises(_ModuleBackend):
    """Answers every call with the output it computed for the first input of that shape.

    Right on the recorded samples and on any batch tiled from them: the bug class of a CUDA
    graph backend that forgets to copy new inputs into its static buffers.
    """

    def _infer(self, *args: Any, **kwargs: Any) -> Any:
        cache = self.__dict__.setdefault("cache", {})
        key = tuple(tuple(a.shape) for a in args)
        if key not in cache:
            with torch.no_grad():
                cache[key] = self.module(*args)
        return cache[key].clone()


def test_a_candidate_that_memorised_its_inputs_is_rejected(tmp_path: Path) -> None:
    strategy = gated(OneBackendStrategy(Memorises()))
    module, spec, data = make_case()
    chosen = strategy.tune(module, "m", spec, data, "cpu", tmp_path)
    view = validation_of(strategy)
    (failure,) = view.candidate_failures
    assert failure.stage == "correctness" and "held-out" in failure.reason
    assert chosen is view.baseline_backend


class WritesTheSamples(_ModuleBackend):
    """Correct and fast, but its build writes into the caller's sample tensor."""

    def _build(self, given: Any) -> None:
        super()._build(given)
        given.data[0].args[0].add_(1.0)

    def _infer(self, *args: Any, **kwargs: Any) -> Any:
        with torch.no_grad():
            return self.module.useful_forward(*args)


@pytest.mark.parametrize(
    ("isolation", "stage"), [("in_process", "correctness"), ("process", "rebuild")]
)
def test_a_build_that_writes_the_callers_samples_is_rejected_and_undone(
    tmp_path: Path, isolation: str, stage: str
) -> None:
    """In process it is caught after its build; in a worker it writes the worker's copies, and
    once chosen its rebuild here writes the caller's: caught there."""
    strategy = gated(OneBackendStrategy(WritesTheSamples()), isolation=isolation)
    module, spec, data = make_case()
    before = data[0].args[0].clone()
    strategy.tune(module, "m", spec, data, "cpu", tmp_path)
    (failure,) = validation_of(strategy).candidate_failures
    assert failure.stage == stage and "samples" in failure.reason
    torch.testing.assert_close(data[0].args[0], before, rtol=0, atol=0)
