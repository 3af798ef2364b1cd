"""Specs of with_performance_validation and the strategies, end to end on CPU with real timings."""

from __future__ import annotations

import copy
import logging
import pickle
import threading
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import torch
from structlog.testing import LogCapture

from aitune_fp.adapters.validation import is_validating, with_performance_validation
from aitune_fp.core.results import PerformanceValidationResult
from aitune_fp.inputs import Sample
from aitune_fp.pipeline.strategies import (
    FirstWinsStrategy,
    MaxThroughputStrategy,
    OneBackendStrategy,
    try_candidate,
)
from aitune_fp.pipeline.tune import TuneSession
from aitune_fp.pipeline.values import NoValidBackendError, TuneTarget
from aitune_fp.testing import capture_events
from tests.factories import flat_result
from tests.validation_helpers import (
    CLOCK,
    FAST_CONFIG,
    BrokenBuild,
    FailsWhenTimed,
    Pruned,
    RecordingSlower,
    Slower,
    Wrong,
    event_schema,
    make_case,
)

PREFIX = "aitune_fp.validation."


@pytest.fixture(name="logs")
def _logs(logs: LogCapture) -> Any:
    """conftest's capture of every event; each is then validated against the shipped schema."""
    cap = logs
    yield cap
    validator = jsonschema.Draft202012Validator(event_schema())
    for entry in cap.entries:
        event = {k: v for k, v in entry.items() if k != "log_level"}
        validator.validate(event)


def names(cap: LogCapture) -> list[str]:
    return [e["event"].removeprefix(PREFIX) for e in cap.entries if e["event"] != PREFIX + "phase"]


def tune(strategy: Any, tmp_path: Path) -> tuple[Any, Any, list[Any]]:
    module, spec, data = make_case()
    backend = strategy.tune(module, "wasteful", spec, data, "cpu", tmp_path)
    return backend, module, data


def validated(strategy: Any, **kwargs: Any) -> Any:
    return with_performance_validation(
        strategy, profiling_config=FAST_CONFIG, timer=CLOCK, **kwargs
    )


@with_performance_validation(profiling_config=FAST_CONFIG, timer=CLOCK)
class DecoratedFirstWins(FirstWinsStrategy):
    """A user's strategy class decorated with arguments."""


@with_performance_validation
class DecoratedOne(OneBackendStrategy):
    """A user's strategy class decorated without arguments."""


class TestDecoration:
    def test_instance(self) -> None:
        """An instance gives a validating copy: isinstance holds, __wrapped__ is the original."""
        inner = FirstWinsStrategy([Pruned()])
        wrapped = with_performance_validation(inner, min_speedup_threshold_percent=5)
        assert wrapped is not inner
        assert isinstance(wrapped, FirstWinsStrategy)
        assert wrapped.__wrapped__ is inner  # type: ignore[attr-defined]
        assert wrapped.backends == inner.backends  # other attributes delegate
        assert wrapped.min_speedup_threshold_percent == 5  # type: ignore[attr-defined]
        assert not is_validating(inner)
        assert is_validating(wrapped)

    def test_class_with_and_without_arguments(self) -> None:
        """A class gives a subclass with the same name; options apply to every instance."""
        assert issubclass(DecoratedFirstWins, FirstWinsStrategy)
        assert DecoratedFirstWins.__name__ == "DecoratedFirstWins"
        strategy = DecoratedOne(Pruned())
        assert strategy.min_speedup_threshold_percent == 1.0  # type: ignore[attr-defined]
        assert DecoratedFirstWins([]).validation_options.profiling_config == FAST_CONFIG  # type: ignore[attr-defined]

    def test_double_wrap_reconfigures(self, tmp_path: Path, logs: LogCapture) -> None:
        """Wrapping twice changes the options and still profiles the baseline once per tune."""
        once = validated(OneBackendStrategy(Pruned()))
        twice = validated(once, min_speedup_threshold_percent=3.0)
        assert twice.min_speedup_threshold_percent == 3.0
        assert twice.__wrapped__ is once.__wrapped__  # one wrapper, not a wrapper of a wrapper
        tune(twice, tmp_path)
        assert names(logs).count("baseline_measured") == 1

    def test_enable_returns_strategy(self) -> None:
        """enable_performance_validation returns the strategy, for chaining."""
        strategy = validated(OneBackendStrategy(Pruned()))
        assert strategy.enable_performance_validation(False) is strategy
        assert strategy.performance_validation_enabled is False
        assert strategy.enable_performance_validation() is strategy
        assert strategy.performance_validation_enabled is True

    def test_not_a_strategy(self) -> None:
        """Something without tune() is refused by name."""
        with pytest.raises(TypeError, match="tune"):
            with_performance_validation(object())

    def test_bad_threshold(self) -> None:
        """A bad threshold percent is refused when decorating."""
        with pytest.raises(ValueError, match="min_speedup_threshold_percent"):
            with_performance_validation(
                OneBackendStrategy(Pruned()), min_speedup_threshold_percent=-100
            )

    @pytest.mark.parametrize("how", ["copy", "deepcopy", "pickle"])
    def test_copy_and_pickle(self, how: str, tmp_path: Path) -> None:
        """Copies and pickles of wrapped instances and decorated classes keep validating."""
        for strategy in (
            validated(FirstWinsStrategy([Pruned("x")]), min_speedup_threshold_percent=2.5),
            DecoratedFirstWins([Pruned("y")]),
        ):
            if how == "copy":
                clone = copy.copy(strategy)
            elif how == "deepcopy":
                clone = copy.deepcopy(strategy)
            else:
                clone = pickle.loads(pickle.dumps(strategy))
            assert is_validating(clone)
            assert isinstance(clone, FirstWinsStrategy)
            assert clone.validation_options == strategy.validation_options
            assert [b.describe() for b in clone.backends] == [
                b.describe() for b in strategy.backends
            ]


class TestGate:
    def test_slower_rejected_faster_accepted(self, tmp_path: Path, logs: LogCapture) -> None:
        """FirstWins: the slower candidate is measured and rejected, the faster one wins."""
        strategy = validated(FirstWinsStrategy([Slower(), Pruned()]))
        backend, module, _ = tune(strategy, tmp_path)
        assert isinstance(backend, Pruned)
        results = strategy.perf_validation_results
        assert [r.backend_description for r in results] == ["Slower()", "Pruned()"]
        assert [r.passed for r in results] == [False, True]
        assert results[0].verdict == "not_faster"
        assert results[1].ci_low is not None and results[1].ci_low > 1.01
        assert all(isinstance(r, PerformanceValidationResult) for r in results)
        assert strategy.baseline_throughput and strategy.baseline_throughput > 0
        assert strategy.last_report.baseline_backend == "TorchEagerBackend()"
        assert strategy.resolved_batch_size == 4
        x = torch.randn(4, 16)
        torch.testing.assert_close(backend(x), module(x))
        seq = names(logs)
        assert seq[:2] == ["started", "baseline_measured"]
        assert seq.count("candidate_measured") == 2
        assert "candidate_rejected" in seq
        assert seq[-2:] == ["selected", "finished"]
        assert len({e["run_id"] for e in logs.entries}) == 1

    def test_rejected_candidate_released_before_the_next(
        self, tmp_path: Path, logs: LogCapture
    ) -> None:
        """A rejected candidate is deactivated, and the module is back on its device, at once."""
        RecordingSlower.released.clear()
        # the candidate object whose release is seen lives in this process: run it here
        strategy = validated(
            FirstWinsStrategy([RecordingSlower(), Pruned()]), isolation="in_process"
        )
        backend, module, _ = tune(strategy, tmp_path)
        assert RecordingSlower.released == ["RecordingSlower()"]
        assert isinstance(backend, Pruned)
        assert next(module.parameters()).device == torch.device("cpu")

    def test_one_backend_falls_back_to_eager(self, tmp_path: Path, logs: LogCapture) -> None:
        """OneBackend: a slower candidate gives the eager baseline, and the event says so."""
        strategy = validated(OneBackendStrategy(Slower()))
        backend, _, _ = tune(strategy, tmp_path)
        assert backend is strategy.baseline_backend
        assert [r.passed for r in strategy.perf_validation_results] == [False]
        selected = [e for e in logs.entries if e["event"] == PREFIX + "selected"]
        assert selected[0]["is_baseline"] is True
        assert "Baseline was selected: TorchEagerBackend()" in selected[0]["summary"]

    def test_max_throughput_picks_fastest(self, tmp_path: Path, logs: LogCapture) -> None:
        """MaxThroughput keeps the fastest passing candidate and deactivates the others."""
        fast, slow = Pruned("a"), Slower("b")
        strategy = validated(MaxThroughputStrategy([slow, fast]))
        backend, _, _ = tune(strategy, tmp_path)
        assert isinstance(backend, Pruned) and backend.is_active

    def test_threshold_too_high_rejects(self, tmp_path: Path, logs: LogCapture) -> None:
        """A gate no candidate can clear rejects even the faster one."""
        strategy = validated(OneBackendStrategy(Pruned()), min_speedup_threshold_percent=1e6)
        backend, _, _ = tune(strategy, tmp_path)
        assert backend is strategy.baseline_backend
        assert strategy.perf_validation_results[0].passed is False

    def test_point_mode(self, tmp_path: Path, logs: LogCapture) -> None:
        """decision='point' reproduces AITune's rule and records no interval."""
        config = FAST_CONFIG.__class__(**{**FAST_CONFIG.to_dict(), "decision": "point"})  # type: ignore[arg-type]
        strategy = with_performance_validation(
            FirstWinsStrategy([Slower(), Pruned()]), profiling_config=config, timer=CLOCK
        )
        backend, _, _ = tune(strategy, tmp_path)
        assert isinstance(backend, Pruned)
        r = strategy.perf_validation_results[-1]
        assert (r.decision, r.ci_low, r.n_candidate) == ("point", None, config.point_steps)

    def test_results_reset_per_call(self, tmp_path: Path, logs: LogCapture) -> None:
        """Each tune starts with fresh results and a fresh run id."""
        strategy = validated(OneBackendStrategy(Pruned()))
        tune(strategy, tmp_path)
        first = strategy.run_id
        tune(strategy, tmp_path)
        assert len(strategy.perf_validation_results) == 1
        assert strategy.run_id != first


class TestFailures:
    def test_every_failure_recorded(self, tmp_path: Path, logs: LogCapture) -> None:
        """FirstWins raises listing each candidate and why; each failure has a saved log."""
        FailsWhenTimed.calls = 0
        strategy = validated(
            FirstWinsStrategy([BrokenBuild(), Wrong(), FailsWhenTimed(), Slower()])
        )
        with pytest.raises(NoValidBackendError) as info:
            tune(strategy, tmp_path)
        text = str(info.value)
        for desc in ("BrokenBuild()", "Wrong()", "FailsWhenTimed()", "Slower()"):
            assert desc in text
        stages = [(f.backend_description, f.stage) for f in strategy.candidate_failures]
        assert stages[:3] == [
            ("BrokenBuild()", "build"),
            ("Wrong()", "correctness"),
            ("FailsWhenTimed()", "profiling"),
        ]
        for failure in strategy.candidate_failures[:3]:
            assert failure.traceback_path and Path(failure.traceback_path).is_file()
        build_log = Path(strategy.candidate_failures[0].traceback_path).read_text()
        assert "compiler exploded" in build_log and "RuntimeError" in build_log
        failed = [e for e in logs.entries if e["event"] == PREFIX + "candidate_failed"]
        assert {e["log_level"] for e in failed} == {"warning"}

    def test_baseline_failure_is_loud_and_closes_the_gate(
        self, tmp_path: Path, logs: LogCapture
    ) -> None:
        """No eager baseline: an error event with a saved traceback, and no candidate accepted."""
        module, spec, _ = make_case()
        strategy = validated(OneBackendStrategy(Pruned()))
        with pytest.raises(NoValidBackendError):
            strategy.tune(module, "m", spec, [], "cpu", tmp_path)
        failed = [e for e in logs.entries if e["event"] == PREFIX + "baseline_failed"]
        assert failed and failed[0]["log_level"] == "error"
        assert Path(failed[0]["traceback_path"]).is_file()

    def test_eager_that_cannot_run_is_no_fallback(self, tmp_path: Path, logs: LogCapture) -> None:
        """Eager builds but fails when timed: no candidate is accepted and eager is not chosen."""
        module, spec, _ = make_case()
        wrong_width = [Sample((torch.randn(1, 7),))]  # the module expects 16 features
        strategy = validated(OneBackendStrategy(Pruned()))
        with pytest.raises(NoValidBackendError):
            strategy.tune(module, "m", spec, wrong_width, "cpu", tmp_path)
        assert strategy.baseline_backend is None
        assert names(logs).count("baseline_failed") == 1

    def test_strategy_exception_reported_and_raised(self, tmp_path: Path, logs: LogCapture) -> None:
        """An exception in the strategy is an event with a saved traceback, then propagates."""

        class Exploding:
            def tune(self, *args: Any) -> Any:
                raise ValueError("bad strategy")

        with pytest.raises(ValueError, match="bad strategy"):
            tune(validated(Exploding()), tmp_path)
        assert (tmp_path / "strategy_error.log").is_file()
        assert names(logs)[-2:] == ["candidate_failed", "finished"]
        finished = logs.entries[-1]
        assert (finished["n_candidates"], finished["n_failed"]) == (0, 0)
        assert finished["outcome"] == "error"
        assert "None" not in finished["summary"]

    def test_keyboard_interrupt_propagates(self, tmp_path: Path, logs: LogCapture) -> None:
        """KeyboardInterrupt is never swallowed."""

        class Interrupted:
            def tune(self, *args: Any) -> Any:
                raise KeyboardInterrupt

        with pytest.raises(KeyboardInterrupt):
            tune(validated(Interrupted()), tmp_path)
        assert names(logs)[-1] == "finished"
        assert logs.entries[-1]["outcome"] == "interrupted"
        assert "interrupted" in logs.entries[-1]["reason"]


class TestAfterTheFact:
    class OwnBuild:
        """A strategy that builds its backend itself, without the helper."""

        def __init__(self, backend: Any) -> None:
            self.backend = backend

        def tune(
            self, module: Any, name: str, spec: Any, data: Any, device: Any, cache: Any
        ) -> Any:
            return self.backend.build(module, spec, data, device, cache)

    def test_slower_replaced_by_eager(self, tmp_path: Path, logs: LogCapture) -> None:
        """A slower backend the strategy built itself is measured and replaced by eager."""
        strategy = validated(self.OwnBuild(Slower()))
        backend, _, _ = tune(strategy, tmp_path)
        assert backend is strategy.baseline_backend
        assert strategy.perf_validation_results[0].passed is False

    def test_faster_kept(self, tmp_path: Path, logs: LogCapture) -> None:
        """A faster backend the strategy built itself is kept, with its result recorded."""
        strategy = validated(self.OwnBuild(Pruned()))
        backend, _, _ = tune(strategy, tmp_path)
        assert isinstance(backend, Pruned)
        assert strategy.perf_validation_results[0].passed is True


class TestDisabled:
    def test_no_eager_no_profiling_one_event(self, tmp_path: Path, logs: LogCapture) -> None:
        """Disabled: the first correct candidate wins, no baseline is built, one event says so."""
        strategy = validated(FirstWinsStrategy([Slower()]), enabled=False)
        backend, _, _ = tune(strategy, tmp_path)
        assert isinstance(backend, Slower)
        assert strategy.perf_validation_results == ()
        assert strategy.baseline_backend is None
        assert strategy.resolved_batch_size is None
        assert not (tmp_path / "perf_validation_baseline").exists()
        seq = names(logs)
        assert seq.count("disabled") == 1
        assert "baseline_measured" not in seq and "started" not in seq


class TestSummaryLevels:
    def _run(self, level: int, tmp_path: Path) -> list[dict[str, Any]]:
        with capture_events(level) as entries:
            tune(validated(OneBackendStrategy(Pruned())), tmp_path)
        return [e for e in entries if e["event"] == PREFIX + "selected"]

    def test_info_gives_short_line(self, tmp_path: Path) -> None:
        """At info the summary is the short ⚡ line without the module name."""
        (event,) = self._run(logging.INFO, tmp_path)
        assert event["log_level"] == "info"
        assert event["summary"].startswith("⚡ speedup: ")
        assert "wasteful" not in event["summary"]

    def test_warning_gives_full_line(self, tmp_path: Path) -> None:
        """With info off the full [aitune_fp] ⚡ line goes out at warning."""
        (event,) = self._run(logging.WARNING, tmp_path)
        assert event["log_level"] == "warning"
        assert event["summary"].startswith(
            "[aitune_fp] ⚡ wasteful | backend: Pruned() | speedup: "
        )
        assert "samples/s" in event["summary"]


class TestThreads:
    def test_two_threads_never_mix(self, tmp_path: Path, logs: LogCapture) -> None:
        """Two threads tuning through one wrapped strategy each see only their own results."""
        strategy = validated(FirstWinsStrategy([Pruned()]))
        seen: dict[str, Any] = {}

        def work(tag: str) -> None:
            module, spec, data = make_case()
            strategy.tune(module, tag, spec, data, "cpu", tmp_path / tag)
            seen[tag] = (strategy.run_id, strategy.perf_validation_results)

        threads = [threading.Thread(target=work, args=(t,)) for t in ("a", "b")]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert seen["a"][0] != seen["b"][0]
        run_of = {e["run_id"]: e["module_name"] for e in logs.entries}
        assert run_of[seen["a"][0]] == "a" and run_of[seen["b"][0]] == "b"
        assert len(seen["a"][1]) == len(seen["b"][1]) == 1


class TestHelperAlone:
    def test_without_a_validating_tune(self, tmp_path: Path) -> None:
        """Outside a validating tune the helper builds and checks, and measures nothing."""
        module, spec, data = make_case()
        outcome = try_candidate(Wrong(), module, "m", spec, data, "cpu", tmp_path)
        assert outcome.stage == "correctness" and outcome.backend is None
        ok = try_candidate(Slower(), module, "m", spec, data, "cpu", tmp_path)
        assert ok.ok and ok.result is None


class TestTinyLooks:
    def test_unbounded_interval_recorded_as_none(self, tmp_path: Path, logs: LogCapture) -> None:
        """Looks too small for the confidence give no upper bound (None), not a failure."""
        config = FAST_CONFIG.__class__(looks=(2, 3), max_seconds=5.0, warmup_max_calls=10)
        strategy = with_performance_validation(
            OneBackendStrategy(Pruned()), profiling_config=config, timer=CLOCK
        )
        backend, _, _ = tune(strategy, tmp_path)
        (result,) = strategy.perf_validation_results
        assert result.verdict == "inconclusive"
        assert result.ci_high is None
        assert backend is strategy.baseline_backend
        assert strategy.candidate_failures == ()


Strict = with_performance_validation(
    FirstWinsStrategy, min_speedup_threshold_percent=50.0, enabled=False
)


class Locked(FirstWinsStrategy):
    """A strategy that keeps a lock and drops it from its pickled state, as careful code does."""

    def __init__(self, backends: Any) -> None:
        super().__init__(backends)
        self.lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "lock"}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.lock = threading.Lock()


class TestCopiesKeepEverything:
    @pytest.mark.parametrize("how", [copy.copy, copy.deepcopy])
    def test_options_of_a_renamed_class_survive(self, how: Any) -> None:
        """A class wrapped under another name keeps its options through copies.

        Pickle finds a class by its name: instances of one decorated under another name do not
        pickle (docs/api.md); decorated with the ``@`` syntax they do (test_copy_and_pickle).
        """
        clone = how(Strict([Pruned()]))
        assert clone.min_speedup_threshold_percent == 50.0
        assert clone.performance_validation_enabled is False

    @pytest.mark.parametrize("how", [copy.deepcopy, lambda s: pickle.loads(pickle.dumps(s))])
    def test_own_getstate_and_setstate_are_used(self, how: Any) -> None:
        """The strategy's own __getstate__/__setstate__ decide what is copied."""
        clone = how(validated(Locked([Pruned()])))
        assert isinstance(clone.lock, type(threading.Lock()))
        assert is_validating(clone)

    def test_rewrapping_a_subclass_keeps_it(self) -> None:
        """Re-wrapping a user's subclass of a decorated class keeps what the subclass adds."""

        class Sub(DecoratedFirstWins):
            extra = "kept"

        again = with_performance_validation(Sub, min_speedup_threshold_percent=5.0)
        assert issubclass(again, Sub)
        assert again([]).extra == "kept"
        assert again([]).min_speedup_threshold_percent == 5.0
        instance = with_performance_validation(Sub([]), min_speedup_threshold_percent=7.0)
        assert isinstance(instance, Sub)

    def test_strategy_may_set_aitune_names_itself(self, tmp_path: Path, logs: LogCapture) -> None:
        """A strategy that assigns run_id or perf_validation_results itself still works."""

        class Own(OneBackendStrategy):
            def __init__(self, backend: Any) -> None:
                super().__init__(backend)
                self.run_id = "mine"
                self.perf_validation_results = []

        strategy = with_performance_validation(Own, profiling_config=FAST_CONFIG, timer=CLOCK)(
            Pruned()
        )
        assert strategy.run_id == "mine"
        tune(strategy, tmp_path)
        assert strategy.run_id != "mine"
        assert len(strategy.perf_validation_results) == 1


class Unpicklable(Pruned):
    """A backend blueprint that cannot be deep-copied (holds a lock)."""

    def __init__(self) -> None:
        super().__init__()
        self.lock = threading.Lock()


class BadRelease(Slower):
    """Slower, and its release fails."""

    def _deactivate(self) -> None:
        raise RuntimeError("release failed")


class Offloading(Slower):
    """Slower; on release it marks the shared module as moved away (offloading backends do)."""

    def _deactivate(self) -> None:
        self.module.away = True


class NeedsHome(Pruned):
    """Pruned, and refuses to run on a module that was moved away and not brought back."""

    def _infer(self, *args: Any, **kwargs: Any) -> Any:
        if getattr(self.module, "away", False):
            raise RuntimeError("module is not on its device")
        return super()._infer(*args, **kwargs)


class ProtocolOnly:
    """A backend that implements the protocol without BackendBase, and fails to build."""

    dtype = None
    is_active = False

    def describe(self) -> str:
        return "ProtocolOnly()"

    def key(self) -> str:
        return "ProtocolOnly_1"

    def build(self, *args: Any) -> Any:
        raise RuntimeError("no toolchain")


class TestCandidatesNeverTakeTheTuneDown:
    def test_uncopyable_blueprint_is_a_build_failure(
        self, tmp_path: Path, logs: LogCapture
    ) -> None:
        """A blueprint that cannot be copied fails at build; FirstWins moves on."""
        strategy = validated(FirstWinsStrategy([Unpicklable(), Pruned()]))
        backend, _, _ = tune(strategy, tmp_path)
        assert isinstance(backend, Pruned)
        assert strategy.candidate_failures[0].stage == "build"

    def test_failing_release_still_falls_back(self, tmp_path: Path, logs: LogCapture) -> None:
        """A rejected candidate whose release fails: eager is still chosen, module on its device."""
        strategy = validated(OneBackendStrategy(BadRelease()))
        backend, module, _ = tune(strategy, tmp_path)
        assert backend is strategy.baseline_backend
        assert next(module.parameters()).device == torch.device("cpu")

    def test_protocol_backend_build_failure_is_logged(
        self, tmp_path: Path, logs: LogCapture
    ) -> None:
        """A build failure of a backend without BackendBase still leaves a saved traceback."""
        strategy = validated(OneBackendStrategy(ProtocolOnly()))  # type: ignore[arg-type]
        tune(strategy, tmp_path)
        (failure,) = strategy.candidate_failures
        assert failure.traceback_path is not None
        assert "no toolchain" in Path(failure.traceback_path).read_text()

    def test_loser_release_does_not_break_the_winner(
        self, tmp_path: Path, logs: LogCapture
    ) -> None:
        """MaxThroughput: a loser that moves the shared module away leaves the winner working."""
        module, spec, data = make_case()
        original_to = module.to

        def to(*args: Any, **kwargs: Any) -> Any:  # bringing the module home clears the mark
            module.away = False
            return original_to(*args, **kwargs)

        module.to = to  # type: ignore[method-assign]
        strategy = validated(MaxThroughputStrategy([NeedsHome(), Offloading()]), enabled=False)
        backend = strategy.tune(module, "m", spec, data, "cpu", tmp_path)
        assert isinstance(backend, NeedsHome)
        x = torch.randn(4, 16)
        torch.testing.assert_close(backend(x), module(x))

    def test_unmeasurable_candidate_skipped_when_disabled(
        self, tmp_path: Path, logs: LogCapture
    ) -> None:
        """MaxThroughput without validation: a candidate that fails when timed is skipped."""
        FailsWhenTimed.calls = 0
        strategy = validated(MaxThroughputStrategy([FailsWhenTimed(), Pruned()]), enabled=False)
        backend, _, _ = tune(strategy, tmp_path)
        assert isinstance(backend, Pruned)

    def test_ranking_uses_the_same_window_speedup(self) -> None:
        """Gated candidates rank by speedup over eager timed alongside them, not raw throughput."""
        from aitune_fp.pipeline.values import CandidateOutcome
        from aitune_fp.pipeline.vetting import rank

        fast_window = flat_result("A()", 3000.0, 2000.0, 1.5, True, estimate=1.5, verdict="faster")
        slow_window = flat_result("B()", 2000.0, 1000.0, 2.0, True, estimate=2.0, verdict="faster")
        module, spec, data = make_case()
        session = TuneSession(TuneTarget.of(module, "m", spec, data, "cpu", "."), None, strategy="")
        a = rank(session.arena(), CandidateOutcome("A()", object(), result=fast_window))
        b = rank(session.arena(), CandidateOutcome("B()", object(), result=slow_window))
        assert a is not None
        assert b is not None
        assert b > a


class TestValidationOf:
    def test_the_view_reads_the_wrappers_report(self, tmp_path: Path, logs: LogCapture) -> None:
        """validation_of reads what the wrapper holds: the same report, options and read-outs."""
        from aitune_fp import validation_of

        strategy = validated(OneBackendStrategy(Pruned()), min_speedup_threshold_percent=4.0)
        view = validation_of(strategy)
        assert view.perf_validation_results == () and view.last_report is None
        tune(strategy, tmp_path)
        assert view.last_report is strategy.last_report is not None  # live, not a snapshot
        assert view.perf_validation_results == strategy.perf_validation_results
        assert all(isinstance(r, PerformanceValidationResult) for r in view.perf_validation_results)
        assert view.min_speedup_threshold_percent == 4.0
        assert view.validation_options == strategy.validation_options

    @pytest.mark.parametrize("bad", [OneBackendStrategy(Pruned()), DecoratedOne])
    def test_refuses_what_is_not_a_wrapped_instance(self, bad: object) -> None:
        """A plain strategy or a class is refused by name."""
        from aitune_fp.adapters.validation import validation_of

        with pytest.raises(TypeError, match="validation_of"):
            validation_of(bad)


class TestOneApi:
    """The wrapper holds its last report; every argument holds on every path or is refused."""

    def test_holds_its_last_report(self, tmp_path: Path, logs: LogCapture) -> None:
        """Each tune replaces the report the wrapper holds with that tune's (its finished run)."""
        strategy = validated(OneBackendStrategy(Pruned()))
        for _ in range(2):
            tune(strategy, tmp_path)
            finished = [e for e in logs.entries if e["event"] == PREFIX + "finished"][-1]
            assert strategy.last_report is not None
            assert strategy.last_report.run_id == finished["run_id"]
        first, second = {e["run_id"] for e in logs.entries}, strategy.run_id
        assert len(first) == 2 and second in first

    def test_a_copy_holds_its_own(self, tmp_path: Path, logs: LogCapture) -> None:
        """A copy's tune does not replace the original's report, nor the original's the copy's."""
        original = validated(OneBackendStrategy(Pruned()))
        tune(original, tmp_path)
        twin = copy.copy(original)
        tune(twin, tmp_path)
        assert twin.run_id not in (None, original.run_id)

    def test_process_isolation_where_it_cannot_hold_is_refused_by_name(
        self, tmp_path: Path, logs: LogCapture
    ) -> None:
        """isolation='process' with a clock a worker cannot report to: refused before any work."""
        from aitune_fp.profiling.timers import CpuTimer

        strategy = with_performance_validation(
            OneBackendStrategy(Pruned()), isolation="process", timer=CpuTimer()
        )
        with pytest.raises(ValueError, match=r"isolation='process'.*injected timer"):
            tune(strategy, tmp_path)
        assert logs.entries == [] and strategy.last_report is None
        strategy.enable_performance_validation(False)  # nothing is timed: nothing to refuse
        tune(strategy, tmp_path)
        assert strategy.last_report is not None and strategy.last_report.disabled

    def test_isolation_unset_runs_where_it_can_and_says_why(
        self, tmp_path: Path, logs: LogCapture
    ) -> None:
        """Left unset, the same tune runs in process and its report says why."""
        from aitune_fp.profiling.timers import CpuTimer

        strategy = with_performance_validation(
            OneBackendStrategy(Pruned()), profiling_config=FAST_CONFIG, timer=CpuTimer()
        )
        tune(strategy, tmp_path)
        (result,) = strategy.perf_validation_results
        assert result.isolation == "in_process"
        started = next(e for e in logs.entries if e["event"] == PREFIX + "started")
        assert "injected timer" in started["isolation_note"]

    def test_process_isolation_held(self, tmp_path: Path, logs: LogCapture) -> None:
        """isolation='process' where workers can run: each candidate ran in one."""
        strategy = validated(OneBackendStrategy(Pruned()), isolation="process")
        tune(strategy, tmp_path)
        (result,) = strategy.perf_validation_results
        assert result.isolation == "process"

    @pytest.mark.parametrize("bad", ["thread", "Process", 1])
    def test_an_unknown_isolation_is_refused_by_name(self, bad: Any) -> None:
        """A value that is no isolation mode is refused when decorating, naming the argument."""
        with pytest.raises((ValueError, TypeError), match="isolation"):
            with_performance_validation(OneBackendStrategy(Pruned()), isolation=bad)
