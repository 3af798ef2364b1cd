"""AITune's own strategies decorated: real AITune 0.6.0, end to end through ``ait.Module`` + ``ait.tune``.

Skipped when AITune is not importable (CI installs it, see ``.ci/run``). The model and backends
spend fake time on ``validation_helpers.CLOCK`` (eager ~11x the pruned backend, the slower one
~2x eager), and the gate is given that clock, so verdicts are deterministic; one test times real
work. AITune's own profiling (its eager baseline, MaxThroughput's sweep) runs on real time, as
always.
"""

from __future__ import annotations

import contextlib
import copy
import gc
import logging
import os
import pickle
import tempfile
from collections.abc import Callable, Iterator
from typing import Any

import jsonschema
import pytest
import torch
import torch._dynamo.config
from structlog.testing import LogCapture

from aitune_fp.adapters.validation import validation_of, with_performance_validation
from aitune_fp.core.config import ProfilingConfig
from aitune_fp.errors import InvalidStateError, InvalidTypeError
from aitune_fp.isolation.flags import flushes_denormals
from tests.aitune_loader import aitune_installed, import_aitune
from tests.validation_helpers import CLOCK, FAST_CONFIG, Wasteful, event_schema

pytestmark = pytest.mark.aitune


def _unavailable(reason: str) -> None:
    """Skip outside CI (AITune is an optional extra); in CI, where it is installed, fail."""
    if os.environ.get("CI"):
        raise RuntimeError(f"CI installs AITune 0.6.0, yet {reason}")
    pytest.skip(reason, allow_module_level=True)  # optional extra, never skipped in CI


if not aitune_installed():  # pragma: no cover - CI installs it
    _unavailable("AITune is not installed (pip install --no-deps aitune==0.6.0)")

os.environ.setdefault("AITUNE_CACHE_DIR", tempfile.mkdtemp(prefix="aitune-fp-tests-"))
try:
    ait = import_aitune()
except ImportError as exc:  # pragma: no cover - an AITune that cannot be imported here
    _unavailable(f"AITune cannot be imported: {exc}")

from aitune.torch.backend import TorchEagerBackend  # noqa: E402
from aitune.torch.module_registry import MODULE_REGISTRY  # noqa: E402
from aitune.torch.task.profiling import NumStepsMeasuringStopStrategy  # noqa: E402
from aitune.torch.task.profiling import ProfilingConfig as AituneProfilingConfig  # noqa: E402
from aitune.torch.tune_strategy.mixin import PerformanceValidationMixinResult  # noqa: E402
from aitune.torch.tune_strategy.profiling_tune_strategy import BackendPerfResult  # noqa: E402

from aitune_fp.adapters import is_aitune_strategy  # noqa: E402
from aitune_fp.adapters.aitune._names import AituneVersionError  # noqa: E402

PREFIX = "aitune_fp.validation."


MODES, BUILD = TorchEagerBackend._execution_modes, TorchEagerBackend._build_mode


class _Eager(TorchEagerBackend):
    """AITune's TorchEager backend under another name: a candidate identical to eager.

    Every AITune backend class must declare its execution and build modes itself.
    """

    _execution_modes, _build_mode = MODES, BUILD


class PrunedEager(_Eager):
    """Clearly faster and correct: skips the module's wasted work (~11x on the fake clock)."""

    _execution_modes, _build_mode = MODES, BUILD

    def _infer(self, *args: Any, **kwargs: Any) -> Any:
        with torch.no_grad():
            return self._orig_module.useful_forward(*args)


class SlowerEager(_Eager):
    """Correct and clearly slower: eager plus as much wasted work again."""

    _execution_modes, _build_mode = MODES, BUILD

    def _infer(self, *args: Any, **kwargs: Any) -> Any:
        with torch.no_grad():
            self._orig_module.wasted()
            return self._orig_module(*args)


class BrokenEager(_Eager):
    """Fails to build."""

    _execution_modes, _build_mode = MODES, BUILD

    def _build(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("compiler exploded")


class WrongEager(_Eager):
    """Fast, finite and the right shape (AITune's check passes) but wrong values."""

    _execution_modes, _build_mode = MODES, BUILD

    def _infer(self, *args: Any, **kwargs: Any) -> Any:
        with torch.no_grad():
            return self._orig_module.useful_forward(*args) + 1.0


class WritesWeights(PrunedEager):
    """Fast and correct on its own, but its build writes into the user's weights in place."""

    _execution_modes, _build_mode = MODES, BUILD

    def _build(self, module: Any, *args: Any) -> Any:
        with torch.no_grad():
            module.useful.weight.add_(0.5)
        return super()._build(module, *args)


class TurnsWrong(PrunedEager):
    """Fast and correct for its first calls (the correctness checks), then wrong every call."""

    _execution_modes, _build_mode = MODES, BUILD
    RIGHT_CALLS = 12

    def _infer(self, *args: Any, **kwargs: Any) -> Any:
        self.n_calls = getattr(self, "n_calls", 0) + 1
        out = super()._infer(*args, **kwargs)
        return out if self.n_calls <= self.RIGHT_CALLS else out + 1.0


class WastefulBN(Wasteful):
    """Wasteful with a BatchNorm after the useful layer: training mode would move its statistics."""

    def __init__(self) -> None:
        super().__init__()
        self.useful = torch.nn.Sequential(torch.nn.Linear(16, 8), torch.nn.BatchNorm1d(8))


@pytest.fixture(autouse=True)
def _isolated() -> Iterator[None]:
    """A fresh fake clock; AITune's root log handler and registered modules removed afterwards."""
    CLOCK.reset()
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for name in list(MODULE_REGISTRY.modules):
        MODULE_REGISTRY.unregister(name)
    root.handlers[:], root.level = handlers, level


@pytest.fixture(name="logs")
def _logs(logs: LogCapture) -> Iterator[LogCapture]:
    """conftest's capture of every aitune_fp event, each then validated against the schema."""
    cap = logs
    yield cap
    validator = jsonschema.Draft202012Validator(event_schema())
    for entry in cap.entries:
        validator.validate({k: v for k, v in entry.items() if k != "log_level"})


def names(cap: LogCapture) -> list[str]:
    return [e["event"].removeprefix(PREFIX) for e in cap.entries if e["event"] != PREFIX + "phase"]


def gated(target: Any, **kwargs: Any) -> Any:
    kwargs.setdefault("profiling_config", FAST_CONFIG)
    return with_performance_validation(target, timer=CLOCK, **kwargs)


def quiet(strategy: Any) -> Any:
    """No find-max-batch-size sweep (validate at the largest batch size ``ait.tune`` records).

    AITune's own profiling (its eager baseline; MaxThroughput's sweep) is cut to 1 + 3 calls at
    batch size 8: the gate under test does not use it, and the suite stays quick.
    """
    if hasattr(strategy, "enable_find_max_batch_size"):
        strategy.enable_find_max_batch_size(False)
    strategy.profiling_config = AituneProfilingConfig(
        batch_sizes=[8],
        measurement_stop_strategy=NumStepsMeasuringStopStrategy(num_steps=3, warmup_samples=1),
    )
    return strategy


def run_tune(
    strategy: Any,
    name: str = "wasteful",
    waste: int = 0,
    model: Wasteful | None = None,
    smallest: int = 1,
) -> tuple[Any, Wasteful]:
    """``ait.Module`` + ``ait.tune`` on CPU, batch sizes ``smallest`` and 8; failures raised."""
    model = Wasteful(waste).eval() if model is None else model
    module = ait.Module(model, name, strategy=strategy)
    try:
        ait.tune(
            module,
            torch.randn(16),
            batch_sizes=[smallest, 8],
            device="cpu",
            ignore_failing_modules=False,
        )
    finally:
        MODULE_REGISTRY.unregister(name)  # ait.tune tunes every registered module
    return module, model


def check_output(module: Any, model: Wasteful) -> None:
    x = torch.randn(3, 16)
    with torch.no_grad():
        torch.testing.assert_close(module(x), model(x))


# -- identity and wiring ------------------------------------------------------------------------


def test_a_decorated_class_is_the_aitune_class_gated() -> None:
    cls = gated(ait.OneBackendStrategy)
    assert issubclass(cls, ait.OneBackendStrategy)
    assert (cls.__name__, cls.__module__) == (
        "OneBackendStrategy",
        ait.OneBackendStrategy.__module__,
    )
    strategy = cls(backend=PrunedEager(), min_speedup_threshold_percent=3.0)
    assert strategy.min_speedup_threshold_percent == 3.0  # AITune's own attribute, not shadowed
    assert strategy.perf_validation_results == []
    assert strategy.enable_performance_validation("diagnostic") is strategy
    assert validation_of(strategy).min_speedup_threshold_percent == 3.0
    assert is_aitune_strategy(strategy) and is_aitune_strategy(cls)


def test_an_instance_shares_the_strategy_state() -> None:
    own = ait.OneBackendStrategy(backend=PrunedEager())
    strategy = gated(own)
    assert isinstance(strategy, ait.OneBackendStrategy) and strategy is not own
    strategy.enable_performance_validation("diagnostic")
    assert own.performance_validation_mode.value == "diagnostic"
    with pytest.raises(InvalidTypeError):
        validation_of(own)  # the original stays ungated


# -- OneBackend ---------------------------------------------------------------------------------


def test_one_backend_clearly_faster_is_accepted(logs: LogCapture) -> None:
    strategy = quiet(gated(ait.OneBackendStrategy)(backend=PrunedEager()))
    module, model = run_tune(strategy)
    (record,) = strategy.perf_validation_results
    assert isinstance(record, PerformanceValidationMixinResult)  # AITune's type, AITune's list
    assert record.passed and record.speedup > 5
    (result,) = validation_of(strategy).perf_validation_results
    assert result.verdict == "faster" and result.batch_size == 8 and result.ci_low > 5
    report = validation_of(strategy).last_report
    assert report is not None and report.outcome == "candidate"
    assert report.selected_backend == "PrunedEager()"
    assert names(logs) == [  # the built-in path's events, the same fields
        "started",
        "baseline_measured",
        "correctness_checked",
        "look",
        "candidate_measured",
        "selected",
        "finished",
    ]
    check_output(module, model)


def test_one_backend_identical_candidate_is_never_accepted(logs: LogCapture) -> None:
    strategy = quiet(gated(ait.OneBackendStrategy(backend=_Eager())))
    module, model = run_tune(strategy)
    (record,) = strategy.perf_validation_results
    assert not record.passed
    (result,) = validation_of(strategy).perf_validation_results
    assert result.verdict in ("not_faster", "inconclusive")
    report = validation_of(strategy).last_report
    assert report is not None and report.outcome == "baseline" and report.selected_is_baseline
    assert "candidate_rejected" in names(logs)
    check_output(module, model)


def test_one_backend_slower_is_rejected_and_falls_back_to_eager() -> None:
    strategy = quiet(gated(ait.OneBackendStrategy)(backend=SlowerEager()))
    run_tune(strategy)
    (result,) = validation_of(strategy).perf_validation_results
    assert result.verdict == "not_faster" and result.speedup < 0.7
    report = validation_of(strategy).last_report
    assert report is not None and report.outcome == "baseline"


def test_one_backend_failing_build_is_recorded_and_raised(logs: LogCapture) -> None:
    strategy = quiet(gated(ait.OneBackendStrategy)(backend=BrokenEager()))
    with pytest.raises(RuntimeError, match="compiler exploded"):
        run_tune(strategy)
    view = validation_of(strategy)
    build, failed_strategy = view.candidate_failures
    assert (build.backend_description, build.stage) == ("BrokenEager()", "build")
    assert build.traceback_path is not None and build.traceback_path.endswith("build.log")
    assert failed_strategy.stage == "strategy"
    assert view.last_report is not None and view.last_report.outcome == "error"
    assert "candidate_failed" in names(logs)


def test_one_backend_wrong_values_fail_aitune_fp_closeness_check() -> None:
    strategy = quiet(gated(ait.OneBackendStrategy)(backend=WrongEager()))
    with pytest.raises(Exception, match="output"):
        run_tune(strategy)
    (failure, _) = validation_of(strategy).candidate_failures
    assert failure.stage == "correctness"
    assert strategy.backend_results[-1] == {"backend": "WrongEager()", "success": False}


# -- the one pipeline: every promise of the built-in path, on each AITune strategy -------------

STRATEGIES = {
    "one": (ait.OneBackendStrategy, lambda backends: {"backend": backends[0]}),
    "first-wins": (ait.FirstWinsStrategy, lambda backends: {"backends": backends}),
    "max-throughput": (ait.MaxThroughputStrategy, lambda backends: {"backends": backends}),
}


def make(kind: str, backends: list[Any], cls: type | None = None, **options: Any) -> Any:
    """A gated, quiet strategy of ``kind`` over ``backends`` (of ``cls``, a gated class, if given)."""
    aitune_class, arguments = STRATEGIES[kind]
    cls = gated(aitune_class, **options) if cls is None else cls
    return quiet(cls(**arguments(backends)))


def snapshot(model: torch.nn.Module) -> dict[str, Any]:
    """Everything the tune must leave as it found: values, dtypes, submodule identity, flags."""
    return {
        "state": {k: v.detach().clone() for k, v in model.state_dict().items()},
        "modules": [(n, id(m)) for n, m in model.named_modules()],
        "training": [(n, m.training) for n, m in model.named_modules()],
    }


def assert_same(model: torch.nn.Module, before: dict[str, Any]) -> None:
    after = snapshot(model)
    assert after["modules"] == before["modules"] and after["training"] == before["training"]
    assert after["state"].keys() == before["state"].keys()
    for key, value in before["state"].items():
        assert after["state"][key].dtype == value.dtype, key
        torch.testing.assert_close(after["state"][key], value, rtol=0, atol=0, msg=key)


@pytest.mark.parametrize("isolation", ["process", "in_process"])
@pytest.mark.parametrize("kind", STRATEGIES)
def test_a_build_that_writes_the_weights_is_rejected_and_undone(kind: str, isolation: str) -> None:
    """In process the write is named and undone; in a worker it wrote the worker's copy, whose
    outputs are then wrong: rejected at correctness either way, the user's model untouched."""
    model = Wasteful().eval()
    before = snapshot(model)
    strategy = make(kind, [WritesWeights(), PrunedEager()], isolation=isolation)
    named = r"useful\.weight" if isolation == "in_process" else "differ from the eager reference"
    if kind == "one":  # AITune's OneBackend raises a failure of its one candidate
        with pytest.raises(RuntimeError, match=named):
            run_tune(strategy, model=model)
    else:
        run_tune(strategy, model=model)
    failures = validation_of(strategy).candidate_failures
    written = [f for f in failures if f.backend_description == "WritesWeights()"]
    assert [f.stage for f in written] == ["correctness"]
    if isolation == "in_process":
        assert "useful.weight" in written[0].reason and "restored" in written[0].reason
    assert_same(model, before)
    if kind != "one":  # the honest candidate after it still wins
        report = validation_of(strategy).last_report
        assert report is not None and report.selected_backend == "PrunedEager()"


class _Spy:
    """Records the model's state as the strategy receives it (after ``ait.tune`` recorded)."""

    seen: dict[str, Any]

    def tune(self, module: Any, *args: Any) -> Any:
        self.seen = snapshot(module)
        return super().tune(module, *args)  # type: ignore[misc]


# Module-level, so that a worker started from the fork server can be sent the strategy.
class SpiedOne(_Spy, gated(ait.OneBackendStrategy)):  # type: ignore[misc]
    """OneBackend gated, spied on."""


class SpiedFirstWins(_Spy, gated(ait.FirstWinsStrategy)):  # type: ignore[misc]
    """FirstWins gated, spied on."""


class SpiedMaxThroughput(_Spy, gated(ait.MaxThroughputStrategy)):  # type: ignore[misc]
    """MaxThroughput gated, spied on."""


SPIED = {"one": SpiedOne, "first-wins": SpiedFirstWins, "max-throughput": SpiedMaxThroughput}


@pytest.mark.parametrize("kind", STRATEGIES)
def test_a_training_model_is_validated_in_eval_and_handed_back_in_training(
    kind: str, logs: LogCapture
) -> None:
    model = WastefulBN().train()
    strategy = make(kind, [PrunedEager()], cls=SPIED[kind])
    run_tune(strategy, model=model, smallest=2)  # AITune records in training mode: BN needs 2
    assert model.training and all(m.training for m in model.modules())
    assert_same(model, strategy.seen)  # BatchNorm statistics untouched by the tune
    eval_events = [e for e in logs.entries if e["event"] == PREFIX + "eval_mode"]
    assert [e["n_training_modules"] for e in eval_events] == [4]
    (result,) = validation_of(strategy).perf_validation_results
    assert result.verdict == "faster"


@pytest.mark.parametrize("kind", STRATEGIES)
def test_a_candidate_right_at_first_and_wrong_while_timed_is_rejected(kind: str) -> None:
    strategy = make(kind, [TurnsWrong()])
    if kind == "max-throughput":  # falls back to eager
        run_tune(strategy)
    else:  # OneBackend re-raises the failure, FirstWins has no valid backend
        with pytest.raises(RuntimeError):
            run_tune(strategy)
    (failure, *_) = validation_of(strategy).candidate_failures
    assert (failure.backend_description, failure.stage) == ("TurnsWrong()", "correctness")
    assert "while timing" in failure.reason or "output" in failure.reason
    assert validation_of(strategy).perf_validation_results == ()


@pytest.mark.parametrize("kind", STRATEGIES)
def test_events_carry_looks_and_the_mismatch(kind: str, logs: LogCapture) -> None:
    strategy = make(kind, [PrunedEager()])
    run_tune(strategy)
    run_ids = {e["run_id"] for e in logs.entries}
    assert len(run_ids) == 1
    (checked,) = [e for e in logs.entries if e["event"] == PREFIX + "correctness_checked"]
    assert checked["backend_description"] == "PrunedEager()"
    assert checked["max_abs_error"] is not None and checked["atol"] is not None
    looks = [e for e in logs.entries if e["event"] == PREFIX + "look"]
    assert looks and looks[-1]["verdict"] == "faster"
    (finished,) = [e for e in logs.entries if e["event"] == PREFIX + "finished"]
    assert (finished["n_candidates"], finished["n_measured"], finished["n_passed"]) == (1, 1, 1)
    (result,) = validation_of(strategy).perf_validation_results
    assert result.max_abs_error is not None and result.budget_used is not None


# -- FirstWins ----------------------------------------------------------------------------------


def test_first_wins_gates_every_intermediate_candidate(logs: LogCapture) -> None:
    backends = [BrokenEager(), WrongEager(), SlowerEager(), _Eager(), PrunedEager()]
    strategy = quiet(gated(ait.FirstWinsStrategy(backends=backends)))
    module, model = run_tune(strategy)
    assert [r.backend_description for r in strategy.perf_validation_results] == [
        "SlowerEager()",
        "_Eager()",
        "PrunedEager()",
    ]
    assert [r.passed for r in strategy.perf_validation_results] == [False, False, True]
    view = validation_of(strategy)
    assert [(f.backend_description, f.stage) for f in view.candidate_failures] == [
        ("BrokenEager()", "build"),
        ("WrongEager()", "correctness"),
    ]
    assert [r.verdict for r in view.perf_validation_results] == [
        "not_faster",
        view.perf_validation_results[1].verdict,
        "faster",
    ]
    assert view.perf_validation_results[1].verdict != "faster"
    assert view.last_report is not None and view.last_report.selected_backend == "PrunedEager()"
    check_output(module, model)


def test_first_wins_raises_its_own_error_when_nothing_is_faster() -> None:
    strategy = quiet(gated(ait.FirstWinsStrategy)(backends=[SlowerEager(), _Eager()]))
    with pytest.raises(RuntimeError, match="There is no valid backend"):
        run_tune(strategy)
    assert [r.passed for r in strategy.perf_validation_results] == [False, False]


# -- MaxThroughput ------------------------------------------------------------------------------


def test_max_throughput_selects_the_candidate_shown_faster(logs: LogCapture) -> None:
    strategy = quiet(
        gated(ait.MaxThroughputStrategy)(backends=[SlowerEager(), PrunedEager(), _Eager()])
    )
    module, model = run_tune(strategy)
    records = strategy.perf_validation_results
    assert all(isinstance(r, BackendPerfResult) for r in records)
    assert [(r.backend_description, r.passed) for r in records] == [
        ("SlowerEager()", False),
        ("PrunedEager()", True),
        ("_Eager()", False),
    ]
    report = validation_of(strategy).last_report
    assert report is not None and report.selected_backend == "PrunedEager()"
    check_output(module, model)


def test_max_throughput_identical_candidate_falls_back_to_eager() -> None:
    strategy = quiet(gated(ait.MaxThroughputStrategy(backends=[_Eager()])))
    run_tune(strategy)
    (record,) = strategy.perf_validation_results
    assert not record.passed
    report = validation_of(strategy).last_report
    assert report is not None and report.outcome == "baseline"


# -- tunes in a row, modes, threshold, decision -------------------------------------------------


def test_two_tunes_in_a_row_with_one_strategy() -> None:
    strategy = quiet(gated(ait.OneBackendStrategy(backend=PrunedEager())))
    run_tune(strategy, "first")
    first = validation_of(strategy).run_id
    module, model = run_tune(strategy, "second")
    assert len(strategy.perf_validation_results) == 1  # AITune's list, reset per tune
    assert validation_of(strategy).run_id not in (None, first)
    check_output(module, model)


def test_diagnostic_mode_measures_but_never_decides(logs: LogCapture) -> None:
    strategy = quiet(gated(ait.OneBackendStrategy(backend=SlowerEager())))
    strategy.enable_performance_validation("diagnostic")
    run_tune(strategy)
    (record,) = strategy.perf_validation_results
    assert not record.passed
    report = validation_of(strategy).last_report
    assert report is not None and report.outcome == "candidate"
    assert report.selected_backend == "SlowerEager()"


def test_max_throughput_diagnostic_keeps_the_best_user_backend() -> None:
    strategy = quiet(gated(ait.MaxThroughputStrategy(backends=[SlowerEager()])))
    strategy.enable_performance_validation("diagnostic")
    run_tune(strategy)
    assert [r.passed for r in strategy.perf_validation_results] == [False]
    report = validation_of(strategy).last_report
    assert report is not None and report.selected_backend == "SlowerEager()"


@pytest.mark.parametrize("how", ["aitune", "decorator"])
def test_disabled_mode_does_no_eager_work(logs: LogCapture, how: str) -> None:
    if how == "aitune":
        strategy = quiet(gated(ait.OneBackendStrategy(backend=_Eager())))
        strategy.enable_performance_validation(False)
    else:
        strategy = quiet(gated(ait.OneBackendStrategy, enabled=False)(backend=_Eager()))
    run_tune(strategy)
    assert strategy.perf_validation_results == []
    assert strategy._baseline_backend is None
    assert names(logs) == ["disabled", "finished"]
    view = validation_of(strategy)
    assert not view.performance_validation_enabled
    assert view.last_report is not None and view.last_report.disabled


def test_aitune_constructor_threshold_is_used_unless_the_decorator_gives_one() -> None:
    strategy = quiet(
        gated(ait.OneBackendStrategy)(backend=PrunedEager(), min_speedup_threshold_percent=5000)
    )
    run_tune(strategy, "strict")
    (result,) = validation_of(strategy).perf_validation_results
    assert result.required_speedup == pytest.approx(51.0) and not result.passed
    override = quiet(
        gated(ait.OneBackendStrategy, min_speedup_threshold_percent=10.0)(
            backend=PrunedEager(), min_speedup_threshold_percent=5000
        )
    )
    run_tune(override, "override")
    (result,) = validation_of(override).perf_validation_results
    assert result.required_speedup == pytest.approx(1.1) and result.passed
    assert validation_of(override).min_speedup_threshold_percent == 10.0


def test_point_mode_on_request() -> None:
    config = ProfilingConfig(decision="point", point_warmup_calls=2, point_steps=6)
    strategy = quiet(gated(ait.OneBackendStrategy(backend=PrunedEager()), profiling_config=config))
    run_tune(strategy)
    (result,) = validation_of(strategy).perf_validation_results
    assert result.decision == "point" and result.passed


def test_clearly_faster_on_real_time() -> None:
    """No fake clock: eager does two extra 192x192 matmuls per call that the candidate skips.

    Looks up to 80 pairs: a machine that moves mid-run (another job starting) holds a verdict
    back until enough steady pairs follow the move, as it should; two looks left it none.
    """
    strategy = quiet(
        with_performance_validation(
            ait.OneBackendStrategy(backend=PrunedEager()),
            profiling_config=ProfilingConfig(looks=(10, 20, 40, 80), max_seconds=20.0),
        )
    )
    run_tune(strategy, waste=2)
    (result,) = validation_of(strategy).perf_validation_results
    assert result.verdict == "faster"


# -- one API: the built-in path's decorator, arguments and read-outs -------------------------


def test_one_result_type_on_both_paths(logs: LogCapture, tmp_path: Any) -> None:
    """validation_of gives one type on both paths, holding aitune_fp's results; AITune's list
    keeps AITune's records of the same candidates."""
    from aitune_fp import OneBackendStrategy, PerformanceValidationResult
    from tests.validation_helpers import Pruned, make_case

    aitune_strategy = quiet(gated(ait.OneBackendStrategy)(backend=PrunedEager()))
    run_tune(aitune_strategy)
    builtin = gated(OneBackendStrategy(Pruned()))
    module, spec, data = make_case()
    builtin.tune(module, "m", spec, data, "cpu", tmp_path)
    views = validation_of(aitune_strategy), validation_of(builtin)
    assert type(views[0]) is type(views[1])
    for view in views:
        (result,) = view.perf_validation_results
        assert type(result) is PerformanceValidationResult and result.verdict == "faster"
        assert view.last_report is not None and view.last_report.results == (result,)
    (record,) = aitune_strategy.perf_validation_results  # what AITune's own code reads
    assert isinstance(record, PerformanceValidationMixinResult)
    assert record.backend_description == views[0].perf_validation_results[0].backend_description


def test_process_isolation_is_refused_by_name_where_it_cannot_hold(
    monkeypatch: pytest.MonkeyPatch, logs: LogCapture
) -> None:
    """isolation='process' in a distributed run is refused before any work; left unset, the
    candidates run in process instead."""
    from aitune_fp.adapters.aitune import gate

    monkeypatch.setattr(gate, "distributed", lambda: "a distributed run of 2 ranks")
    strategy = make("one", [PrunedEager()], isolation="process")
    with pytest.raises(ValueError, match=r"isolation='process'.*distributed run of 2 ranks"):
        run_tune(strategy)
    assert validation_of(strategy).last_report is None and names(logs) == []
    strategy = make("one", [PrunedEager()])
    run_tune(strategy)
    (result,) = validation_of(strategy).perf_validation_results
    assert result.isolation == "in_process"
    started = next(e for e in logs.entries if e["event"].endswith(".started"))
    assert started["isolation_note"] == "a distributed run of 2 ranks", started


@pytest.mark.parametrize("isolation", [None, "process"])
def test_a_strategy_that_does_not_pickle_at_two_threads_runs_in_process_or_is_refused(
    isolation: str | None, logs: LogCapture
) -> None:
    """At two threads workers are sent the strategy pickled: one that cannot be (a local sink)
    keeps the tune in process, saying why, and ``isolation='process'`` is refused by name; at
    one thread its workers are forked, and nothing is pickled."""
    own = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        options = {} if isolation is None else {"isolation": isolation}
        strategy = make("one", [PrunedEager()], **options)
        strategy._sink = lambda msg, *args: None
        if isolation == "process":
            with pytest.raises(ValueError, match=r"isolation='process'.*does not pickle"):
                run_tune(strategy)
            assert validation_of(strategy).last_report is None and names(logs) == []
            return
        run_tune(strategy)
    finally:
        torch.set_num_threads(own)
    (result,) = validation_of(strategy).perf_validation_results
    assert (result.isolation, result.verdict) == ("in_process", "faster")
    started = next(e for e in logs.entries if e["event"].endswith(".started"))
    assert "does not pickle" in started["isolation_note"], started


def test_closeness_beyond_tolerances_is_refused_by_name() -> None:
    """The decorator's closeness on an AITune strategy: what it cannot honour is named."""
    from aitune_fp.correctness.closeness import Closeness

    with pytest.raises(ValueError, match="noise_floor"):
        gated(ait.OneBackendStrategy, closeness=Closeness(calibrate=True))
    gated(ait.OneBackendStrategy, closeness=Closeness(enabled=False))


# -- copies, version detection, unsupported strategies ------------------------------------------


def test_copies_and_pickles_stay_gated_and_independent() -> None:
    strategy = gated(
        ait.OneBackendStrategy(backend=PrunedEager()), min_speedup_threshold_percent=7.0
    )
    for clone in (strategy.clone(), copy.copy(strategy), pickle.loads(pickle.dumps(strategy))):
        assert type(clone).__name__ == "OneBackendStrategy"
        assert validation_of(clone).min_speedup_threshold_percent == 7.0
        clone.enable_performance_validation("diagnostic")
        assert strategy.performance_validation_mode.value == "enabled"


def test_a_missing_hook_is_a_clear_error_naming_the_version() -> None:
    class Renamed(ait.OneBackendStrategy):
        _build_validate_and_check_perf = None

    with pytest.raises(AituneVersionError, match=r"0\.6\.0.*_build_validate_and_check_perf"):
        with_performance_validation(Renamed)


def test_a_missing_module_name_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    import aitune.torch.tune_strategy.formatting as formatting

    monkeypatch.delattr(formatting, "fmt_speedup_comparison")
    with pytest.raises(AituneVersionError, match="fmt_speedup_comparison"):
        with_performance_validation(ait.FirstWinsStrategy)


def test_a_strategy_that_changes_how_it_measures_is_refused() -> None:
    """AITune's three profiling strategies are gated; a subclass measuring its own way is not."""
    for cls in (ait.MaxThroughputStrategy, ait.MinLatencyStrategy, ait.LatencyBudgetStrategy):
        assert issubclass(with_performance_validation(cls), cls)

    class OwnMeasure(ait.MaxThroughputStrategy):
        def _measure(self, *args: Any) -> Any:
            return super()._measure(*args)

    class OwnOrder(ait.MinLatencyStrategy):
        def _is_better(self, result: Any, other: Any) -> bool:
            return True

    with pytest.raises(InvalidTypeError, match=r"OwnMeasure is not supported.*own _measure"):
        with_performance_validation(OwnMeasure)
    with pytest.raises(InvalidTypeError, match=r"OwnOrder is not supported.*own _is_better"):
        with_performance_validation(OwnOrder())


def test_candidates_are_gated_only_inside_tune() -> None:
    strategy = gated(ait.OneBackendStrategy(backend=PrunedEager()))
    with pytest.raises(InvalidStateError, match="inside its own tune"):
        strategy._build_validate_and_check_perf(PrunedEager(), None, "m", None, [], "cpu", None)


# -- a fair comparison on AITune's path too ------------------------------------------------------


def _slow_down(*_: Any) -> None:
    CLOCK.advance(20 * 200e-6)


class _AsFastAsEager(_Eager):
    """Does eager's own work, bypassing the module's ``__call__`` (and so its hooks)."""

    _execution_modes, _build_mode = MODES, BUILD

    def _infer(self, *args: Any, **kwargs: Any) -> Any:
        with torch.no_grad():
            self._orig_module.wasted()
            return self._orig_module.useful_forward(*args)


class Attacker(_AsFastAsEager):
    """As fast as eager; its build first runs ``attack`` on the module it is given.

    Module-level, as its ``attack`` is: at several threads a worker starts from the fork server
    and gets its candidate pickled (a local one would fail at build, testing nothing).
    """

    _execution_modes, _build_mode = MODES, BUILD

    def __init__(self, attack: Callable[[Any], Any]) -> None:
        super().__init__()
        self.attack = attack

    def _build(self, module: Any, *args: Any) -> Any:
        self.attack(module)
        return super()._build(module, *args)


def _pre_hook(module: Any) -> None:
    module.register_forward_pre_hook(_slow_down)


def _global_hook(module: Any) -> None:
    torch.nn.modules.module.register_module_forward_pre_hook(_slow_down)


def _patch_linear(module: Any) -> None:
    original = torch.nn.functional.linear

    def linear(*args: Any, **kwargs: Any) -> Any:
        _slow_down()
        return original(*args, **kwargs)

    torch.nn.functional.linear = linear


def _other_thread_count(module: Any) -> None:
    torch.set_num_threads(1 if torch.get_num_threads() > 1 else 2)


AITUNE_ATTACKS = {
    "pre-hook": _pre_hook,
    "global hook": _global_hook,
    "functional": _patch_linear,
    "threads": _other_thread_count,
}


@pytest.mark.parametrize("attack", AITUNE_ATTACKS)
def test_slowing_eager_down_is_never_accepted_through_aitune(attack: str) -> None:
    linear, threads = torch.nn.functional.linear, torch.get_num_threads()
    hooks = dict(torch.nn.modules.module._global_forward_pre_hooks)
    strategy = quiet(gated(ait.FirstWinsStrategy(backends=[Attacker(AITUNE_ATTACKS[attack])])))
    model = Wasteful().eval()
    try:
        with pytest.raises(RuntimeError, match="There is no valid backend"):
            run_tune(strategy, model=model)
        assert torch.nn.functional.linear is linear
        assert torch.get_num_threads() == threads
        assert dict(torch.nn.modules.module._global_forward_pre_hooks) == hooks
        assert not model._forward_pre_hooks
        view = validation_of(strategy)
        assert not any(r.passed for r in view.perf_validation_results)
        if attack == "threads":  # a process-wide setting: refused at build, in a worker too
            assert view.perf_validation_results == ()
            assert (view.candidate_failures[0].stage, view.candidate_failures[0].error_type) == (
                "build",
                "ProcessChangedError",
            )
        else:  # built and measured
            assert [r.backend_description for r in view.perf_validation_results] == ["Attacker()"]
    finally:
        torch.nn.functional.linear = linear
        torch.set_num_threads(threads)
        torch.nn.modules.module._global_forward_pre_hooks.clear()
        torch.nn.modules.module._global_forward_pre_hooks.update(hooks)


class Memorises(PrunedEager):
    """Fast; answers every call with what it computed for the first input of that shape."""

    _execution_modes, _build_mode = MODES, BUILD

    def _infer(self, *args: Any, **kwargs: Any) -> Any:
        cache = self.__dict__.setdefault("cache", {})
        key = tuple(tuple(a.shape) for a in args)
        if key not in cache:
            cache[key] = super()._infer(*args, **kwargs)
        return cache[key].clone()


@pytest.mark.parametrize("kind", STRATEGIES)
def test_a_candidate_that_memorised_its_inputs_is_rejected_through_aitune(kind: str) -> None:
    strategy = make(kind, [Memorises()])
    try:
        run_tune(strategy)
    except RuntimeError:
        assert kind != "max-throughput"  # it falls back to eager; the others raise
    (failure,) = [f for f in validation_of(strategy).candidate_failures if f.stage != "strategy"]
    assert failure.stage == "correctness"
    assert "held-out" in failure.reason or "timed call" in failure.reason


class Sabotaged(Wasteful):
    """Wasteful whose forward also reads a class attribute: 10x more waste when ``slowed``."""

    slowed = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if type(self).slowed:
            for _ in range(10):
                self.wasted()
        return super().forward(x)


def _hook_through_gc(module: Any) -> None:
    """Find every other copy of the model through ``gc`` (eager's, in one process) and slow it.

    ``type``, not ``isinstance``: AITune's lazy proxy of ``tensorrt`` imports it when asked its
    class (a fork-server worker's ``gc`` sees it; the test process froze it out of view).
    """
    for found in gc.get_objects():
        if issubclass(type(found), Sabotaged) and found is not module:
            found.register_forward_pre_hook(lambda m, a: [m.wasted() for _ in range(10)])


def _slow_the_class(module: Any) -> None:
    Sabotaged.slowed = True


def _flush_denormals(module: Any) -> None:
    torch.set_flush_denormal(True)


def _recompile_once(module: Any) -> None:
    torch._dynamo.config.recompile_limit = 1


#: What a build may do to reach eager or the user's process beyond its own module.
IN_WORKER_ATTACKS = {
    "class attribute": _slow_the_class,
    "hook through gc": _hook_through_gc,
    "flush denormal": _flush_denormals,
    "compiler config": _recompile_once,
}


def _process_now(model: Any) -> tuple[Any, ...]:
    return (
        Sabotaged.slowed,
        bool(model._forward_pre_hooks),
        flushes_denormals(),
        torch._dynamo.config.recompile_limit,
    )


@pytest.mark.parametrize("attack", IN_WORKER_ATTACKS)
@pytest.mark.parametrize("kind", STRATEGIES)
def test_through_aitune_a_build_reaches_neither_eager_nor_the_users_process(
    kind: str, attack: str
) -> None:
    """AITune's strategies build and check each candidate in a worker by default: as fast as
    eager, it is never accepted (eager's worker never sees what its build did), and nothing of it
    reaches the user's process (in one process the first two read 11x faster)."""
    model = Sabotaged().eval()
    before = _process_now(model)
    strategy = make(kind, [Attacker(IN_WORKER_ATTACKS[attack])])
    try:
        with contextlib.suppress(RuntimeError):  # AITune: "no valid backend" when none is kept
            run_tune(strategy, model=model)
        assert _process_now(model) == before
    finally:
        Sabotaged.slowed = False
        torch.set_flush_denormal(False)
        torch._dynamo.config.recompile_limit = before[3]
    report = validation_of(strategy).last_report
    assert report is not None
    assert all(r.isolation == "process" for r in report.results)
    assert not any(r.passed for r in report.results), report.results
    assert all(r.estimate == pytest.approx(1.0, rel=0.05) for r in report.results)
    if attack in ("flush denormal", "compiler config"):  # refused for what its build changed
        assert report.results == ()
        assert any(
            (f.stage, f.error_type) == ("build", "ProcessChangedError") for f in report.failures
        ), report.failures
    else:  # built and measured, as fast as eager
        assert [r.backend_description for r in report.results] == ["Attacker()"]


#: The lines AITune's build of a candidate logs (its profiling lines carry measured figures).
BUILD_LINES = ("🤖 backend", "✅ backend built", "✅ backend validated", "❌ backend")


class Lines(list[str]):
    """AITune's log sink, keeping each line (module-level: a worker's copy of the strategy holds it)."""

    def __call__(self, msg: Any, *args: Any) -> None:
        self.append(str(msg) % args)


@pytest.mark.parametrize("kind", STRATEGIES)
def test_the_strategy_learns_from_a_worker_what_it_learns_in_process(kind: str) -> None:
    """AITune's records of each candidate's build (``backend_results``) and its log lines are
    the same whether the build ran in a worker or here; the rebuild adds none."""
    seen: dict[str, Any] = {}
    for isolation in ("in_process", "process"):
        strategy = make(kind, [BrokenEager(), PrunedEager()], isolation=isolation)
        strategy._sink = lines = Lines()
        with contextlib.suppress(RuntimeError):  # OneBackend: its one candidate failed to build
            run_tune(strategy)
        seen[isolation] = (  # the build's records and lines; the timings differ by run
            [{k: v for k, v in e.items() if k != "throughput"} for e in strategy.backend_results],
            [line for line in lines if line.strip().startswith(BUILD_LINES)],
        )
    assert seen["process"] == seen["in_process"], seen
    results, lines = seen["process"]
    assert {"backend": "BrokenEager()", "success": False} in results
    assert any("BrokenEager()" in line for line in lines)


# -- at torch's own thread count: workers from the fork server ----------------------------------


def _slow_eager_twice(module: Any) -> None:
    """Both ways a build could slow eager in one process: its class, and a hook found in ``gc``."""
    _slow_the_class(module)
    _hook_through_gc(module)


@pytest.mark.parametrize("threads", [1, 2], ids=["forked", "fork-server"])
def test_at_two_threads_workers_hold_and_teach_as_they_do_at_one(
    threads: int, logs: LogCapture
) -> None:
    """At two threads (torch's count on 2+ cores) each worker starts from the fork server, sent
    its recipe pickled; at one it is forked. Either way a build that slows eager through its
    class and through ``gc`` is measured as fast as eager, nothing of it reaches this process,
    and AITune learns the same records and log lines from the worker."""
    own = torch.get_num_threads()
    torch.set_num_threads(threads)
    model = Sabotaged().eval()
    before = _process_now(model)
    strategy = make("first-wins", [Attacker(_slow_eager_twice)])
    strategy._sink = lines = Lines()
    try:
        with pytest.raises(RuntimeError, match="There is no valid backend"):
            run_tune(strategy, model=model)
        assert _process_now(model) == before
    finally:
        Sabotaged.slowed = False
        torch.set_num_threads(own)
    (started,) = [e for e in logs.entries if e["event"] == PREFIX + "started"]
    assert (started["threads"], started["isolation"]) == (threads, "process")
    (result,) = validation_of(strategy).perf_validation_results
    assert (result.environment.threads, result.isolation) == (threads, "process")
    assert result.verdict == "not_faster" and result.estimate == pytest.approx(1.0, rel=0.05)
    (record,) = strategy.perf_validation_results  # AITune's own list
    assert (record.backend_description, record.passed) == ("Attacker()", False)
    assert strategy.backend_results == [{"backend": "Attacker()", "success": True}]
    assert [line.strip() for line in lines if line.strip().startswith(BUILD_LINES)] == [
        "🤖 backend: Attacker()",
        "✅ backend built",
        "✅ backend validated",
    ]
