"""Specs of the shell's shape: a delegating wrapper, one session per tune, frozen reports."""

from __future__ import annotations

import copy
import gc
import pickle
import types
import weakref
from pathlib import Path
from typing import Any

import attrs
import pytest
import torch
from structlog.testing import LogCapture

from aitune_fp.adapters.validation import is_validating, validation_of, with_performance_validation
from aitune_fp.core.config import ProfilingConfig
from aitune_fp.core.report import TuneReport
from aitune_fp.pipeline.strategies import FirstWinsStrategy, OneBackendStrategy, build_and_validate
from tests.validation_helpers import CLOCK, FAST_CONFIG, Pruned, Slower, gated, make_case

validated = gated


def tune(strategy: Any, tmp_path: Path) -> Any:
    module, spec, data = make_case()
    return strategy.tune(module, "m", spec, data, "cpu", tmp_path)


class TestDelegation:
    def test_later_changes_to_the_strategy_are_seen(self, tmp_path: Path) -> None:
        """The instance wrapper is a delegate, not a snapshot."""
        inner = FirstWinsStrategy([Slower()])
        wrapped = validated(inner)
        inner.backends = (Pruned(),)
        assert isinstance(tune(wrapped, tmp_path), Pruned)
        assert [r.backend_description for r in wrapped.perf_validation_results] == ["Pruned()"]

    def test_writes_reach_the_strategy(self) -> None:
        """Setting an attribute on the wrapper sets it on the strategy."""
        inner = FirstWinsStrategy([])
        wrapped = validated(inner)
        wrapped.backends = (Pruned(),)
        assert inner.backends == wrapped.backends
        assert isinstance(wrapped, FirstWinsStrategy) and wrapped.__wrapped__ is inner

    def test_class_level_defaults_do_not_shadow_the_instance(self) -> None:
        """An attribute the class defaults and the instance overrides reads as the instance's."""

        class WithDefault(FirstWinsStrategy):
            label = "class"

        inner = WithDefault([])
        inner.label = "instance"
        assert validated(inner).label == "instance"


def _tune_by_attribute(backend: Any) -> Any:
    def tune(module: Any, name: Any, spec: Any, data: Any, device: Any, cache: Any) -> Any:
        return build_and_validate(backend, module, name, spec, data, device, cache)

    return tune


class SetsTuneInInit:
    """A strategy whose tune is an instance attribute set in __init__ (declared on the class)."""

    tune: Any

    def __init__(self, backend: Any) -> None:
        self.tune = _tune_by_attribute(backend)


class TestTuneAsInstanceAttribute:
    @pytest.mark.parametrize(
        "make",
        [
            lambda b: validated(types.SimpleNamespace(tune=_tune_by_attribute(b))),
            lambda b: validated(SetsTuneInInit(b)),
            lambda b: with_performance_validation(
                SetsTuneInInit, profiling_config=FAST_CONFIG, timer=CLOCK
            )(b),
        ],
        ids=["namespace", "instance-of-plain-class", "decorated-class"],
    )
    def test_is_validated(self, make: Any, tmp_path: Path, logs: LogCapture) -> None:
        """A tune set as an attribute still runs inside the validating tune: slower is rejected."""
        strategy = make(Slower())
        assert is_validating(strategy)
        backend = tune(strategy, tmp_path)
        assert backend is strategy.baseline_backend
        assert [r.verdict for r in validation_of(strategy).perf_validation_results] == [
            "not_faster"
        ]
        assert logs.entries[0]["event"] == "aitune_fp.validation.started"
        assert logs.entries[-1]["event"] == "aitune_fp.validation.finished"


@with_performance_validation(profiling_config=FAST_CONFIG, timer=CLOCK)
class DecoratedOne(OneBackendStrategy):
    """Decorated at module level (importable by name)."""


@with_performance_validation(min_speedup_threshold_percent=4.0, profiling_config=FAST_CONFIG)
@with_performance_validation(min_speedup_threshold_percent=3.0)
class DecoratedTwice(OneBackendStrategy):
    """Decorated twice at module level: the outer options hold (importable by name)."""


class TestCopies:
    @pytest.mark.parametrize(
        "how", [copy.copy, copy.deepcopy, lambda s: pickle.loads(pickle.dumps(s))]
    )
    @pytest.mark.parametrize(
        "make",
        [
            lambda: validated(OneBackendStrategy(Pruned())),
            lambda: DecoratedOne(Pruned()),
            lambda: DecoratedTwice(Pruned()),
        ],
        ids=["instance", "decorated-class", "class-wrapped-twice"],
    )
    def test_copies_are_independent_and_empty(self, how: Any, make: Any, tmp_path: Path) -> None:
        """copy/deepcopy/pickle give a wrapper with its own (empty) report and the same options."""
        original = make()
        tune(original, tmp_path)
        first_run = original.run_id
        assert first_run is not None
        twin = how(original)
        assert twin.run_id is None and twin.perf_validation_results == ()
        assert twin.validation_options.min_speedup_threshold_percent == (
            original.validation_options.min_speedup_threshold_percent
        )
        assert is_validating(twin)
        twin.enable_performance_validation(False)
        tune(twin, tmp_path)
        assert twin.run_id not in (None, first_run)
        assert original.run_id == first_run
        assert original.performance_validation_enabled


class TestNothingKeptAlive:
    def test_module_and_data_are_released_after_the_tune(self, tmp_path: Path) -> None:
        """The strategy keeps reports only: the module, samples and built objects can go."""
        strategy = validated(FirstWinsStrategy([Slower(), Pruned()]))
        module, spec, data = make_case()
        refs = [weakref.ref(module), weakref.ref(data[0])]
        backend = strategy.tune(module, "m", spec, data, "cpu", tmp_path)
        assert isinstance(backend, Pruned)
        del backend, module, data
        gc.collect()
        assert [r() for r in refs] == [None, None]
        assert strategy.baseline_backend is None
        assert strategy.last_report.selected_backend == "Pruned()"

    def test_report_holds_plain_values_only(self, tmp_path: Path) -> None:
        """The TuneReport is frozen and made of str, numbers, bools, None and records of them."""
        strategy = validated(FirstWinsStrategy([Slower(), Pruned()]))
        tune(strategy, tmp_path)
        report = strategy.last_report
        assert isinstance(report, TuneReport)
        with pytest.raises(attrs.exceptions.FrozenInstanceError):
            report.run_id = "x"  # type: ignore[misc]

        def plain(value: Any) -> bool:
            if isinstance(value, (str, int, float, bool, type(None))):
                return True
            if isinstance(value, (tuple, list)):
                return all(plain(v) for v in value)
            if attrs.has(type(value)):
                return all(plain(getattr(value, a.name)) for a in attrs.fields(type(value)))
            return False

        assert plain(report)
        assert not any(isinstance(v, torch.Tensor | torch.nn.Module) for v in attrs.astuple(report))


class TestBatchSizeSettings:
    @pytest.mark.parametrize(
        ("settings", "expected"),
        [
            ({}, 4),
            ({"batch_sizes": (2,)}, 2),
            ({"batch_sizes": (1, 3)}, 3),
            ({"batching": False}, 1),
        ],
    )
    def test_honoured(self, settings: dict[str, Any], expected: int, tmp_path: Path) -> None:
        """ProfilingConfig.batch_sizes and batching decide the batch size validated at."""
        config = attrs.evolve(FAST_CONFIG, **settings)
        strategy = validated(OneBackendStrategy(Pruned()), profiling_config=config)
        tune(strategy, tmp_path)
        assert strategy.resolved_batch_size == expected
        assert strategy.perf_validation_results[0].batch_size == expected

    def test_a_batch_size_above_the_spec_is_refused(self, tmp_path: Path) -> None:
        """Asking for more than the graph spec allows is a clear error naming both."""
        config = ProfilingConfig(batch_sizes=(64,))
        strategy = validated(OneBackendStrategy(Pruned()), profiling_config=config)
        with pytest.raises(ValueError, match=r"batch size 64.*max_batch_size 4"):
            tune(strategy, tmp_path)


class EscapingKey(Pruned):
    def key(self) -> str:
        return "../../escaped"


class TestCacheDir:
    def test_a_key_cannot_leave_the_cache_dir(self, tmp_path: Path) -> None:
        """A backend key with path parts still writes inside cache_dir."""
        cache = tmp_path / "a" / "b"
        strategy = validated(OneBackendStrategy(EscapingKey()))
        module, spec, data = make_case()
        strategy.tune(module, "m", spec, data, "cpu", cache)
        outside = [p for p in tmp_path.rglob("*") if cache not in p.parents and p != cache]
        assert all(p in cache.parents for p in outside), outside


class InterruptedWhenTimed(Pruned):
    """Correct, then a Ctrl-C arrives while it is being timed; records its release."""

    released: list[str] = []  # noqa: RUF012

    def _infer(self, *args: Any, **kwargs: Any) -> Any:
        if CLOCK.now_ns() > 0 and len(type(self).released) == 0 and self._timing:
            raise KeyboardInterrupt
        return super()._infer(*args, **kwargs)

    _timing = False

    def _deactivate(self) -> None:
        type(self).released.append(self.describe())


class TestEveryTuneEnds:
    def test_unusable_cache_dir_still_finishes(self, tmp_path: Path, logs: LogCapture) -> None:
        """A cache dir that is a file: the baseline and the candidate fail, recorded; finished."""
        cache = tmp_path / "file"
        cache.write_text("not a folder")
        strategy = validated(OneBackendStrategy(Pruned()))
        module, spec, data = make_case()
        with pytest.raises(Exception, match="no valid backend"):
            strategy.tune(module, "m", spec, data, "cpu", cache)
        names = [e["event"].rsplit(".", 1)[1] for e in logs.entries if "phase" not in e["event"]]
        assert names[0] == "started" and "baseline_failed" in names
        assert names[-1] == "finished"
        assert [f.backend_description for f in strategy.last_report.candidate_failures] == [
            "Pruned()"
        ]

    @pytest.mark.parametrize("name", [None, 123, Path("m")])
    def test_a_name_that_is_not_a_str_is_refused(self, name: Any, tmp_path: Path) -> None:
        """The module name is checked at the edge, naming the bad value."""
        strategy = validated(OneBackendStrategy(Pruned()))
        module, spec, data = make_case()
        with pytest.raises(
            TypeError,
            match=r"name must be a str.*" + repr(name).replace("(", r"\(").replace(")", r"\)"),
        ):
            strategy.tune(module, name, spec, data, "cpu", tmp_path)

    def test_an_interrupted_candidate_is_released(self, tmp_path: Path, logs: LogCapture) -> None:
        """Ctrl-C while timing: the candidate is deactivated, the run finished, then it propagates."""
        InterruptedWhenTimed.released = []
        InterruptedWhenTimed._timing = True
        # the candidate object whose release is seen lives in this process: run it here
        strategy = validated(OneBackendStrategy(InterruptedWhenTimed()), isolation="in_process")
        try:
            with pytest.raises(KeyboardInterrupt):
                tune(strategy, tmp_path)
        finally:
            InterruptedWhenTimed._timing = False
        assert InterruptedWhenTimed.released == ["InterruptedWhenTimed()"]
        assert logs.entries[-1]["event"] == "aitune_fp.validation.finished"
        assert logs.entries[-1]["outcome"] == "interrupted"


class TestLookProgress:
    def test_every_look_is_an_event(self, tmp_path: Path, logs: LogCapture) -> None:
        """Each planned look reports pairs so far and the interval (what progress shows)."""
        import attrs

        config = attrs.evolve(FAST_CONFIG, looks=(10, 20, 40), max_seconds=1e6)
        strategy = validated(FirstWinsStrategy([Slower(), Pruned()]), profiling_config=config)
        tune(strategy, tmp_path)
        looks = [e for e in logs.entries if e["event"].endswith(".look")]
        assert looks and all(e["max_pairs"] == 40 for e in looks)
        last = {e["backend_description"]: e for e in looks}
        for result in strategy.perf_validation_results:
            event = last[result.backend_description]
            assert (event["n_pairs"], event["verdict"]) == (result.n_baseline, result.verdict)
            assert event["ci_low"] == result.ci_low

    def test_the_progress_display_shows_pairs(self) -> None:
        """On a terminal, a candidate's progress task reads 'measure N/M pairs [low, high]'."""
        import io

        from rich.console import Console

        from aitune_fp.cli.progress import TuneProgress
        from aitune_fp.events.validation import Look, PhaseEntered

        console = Console(file=io.StringIO(), force_terminal=True, width=120)
        progress = TuneProgress(console, quiet=False, candidates=["A()"])
        with progress:
            progress(
                PhaseEntered(
                    run_id="r", module_name="m", backend_description="A()", phase="measure"
                ).to_event()
            )
            progress(
                Look(
                    run_id="r",
                    module_name="m",
                    backend_description="A()",
                    n_pairs=20,
                    max_pairs=160,
                    verdict="inconclusive",
                    estimate=1.0,
                    ci_low=0.95,
                    ci_high=None,
                ).to_event()
            )
            (task,) = progress.progress.tasks
            phase = str(task.fields["phase"])
            assert phase.startswith("measure 20/160 pairs [0.950, ∞], at most about ")
            assert phase.endswith(" s left")  # the ETA: test_cli_tables holds its figure
