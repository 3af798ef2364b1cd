"""The output contract is eager's: dtype, device, shape, ``requires_grad``, and an output a caller
keeps still holds its value after the next call. A candidate that breaks any of it is rejected at
correctness with the field named, in the correctness check and end to end (in a worker process
and in process).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from aitune_fp.adapters.validation import validation_of, with_performance_validation
from aitune_fp.backends.base import BackendBase
from aitune_fp.core.config import ProfilingConfig
from aitune_fp.correctness.check import check_correctness
from aitune_fp.correctness.failures import CorrectnessError
from aitune_fp.inputs import GraphSpec, Sample
from aitune_fp.pipeline.strategies import OneBackendStrategy
from tests.factories import tune_one
from tests.validation_helpers import TinyNet, _ModuleBackend

SPEC = GraphSpec(max_batch_size=4)


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Tanh()).eval()


def _data() -> list[Sample]:
    torch.manual_seed(1)
    return [Sample((torch.randn(1, 8),)), Sample((torch.randn(1, 8),))]


def _static_buffer(model: torch.nn.Module) -> Any:
    buffer: dict[str, torch.Tensor] = {}

    def call(x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            out = model(x)
        kept = buffer.get("out")
        if kept is None or kept.shape != out.shape:
            kept = buffer["out"] = torch.empty_like(out)
        return kept.copy_(out)  # what CUDA graphs do with their output buffers

    return call


def _requires_grad(model: torch.nn.Module) -> Any:
    def call(x: torch.Tensor) -> torch.Tensor:
        with torch.enable_grad():
            return model(x)  # the weights require grad: the output holds a graph

    return call


def _float64(model: torch.nn.Module) -> Any:
    return lambda x: model(x).double()


CASES = {
    "aliasing": _static_buffer,
    "requires_grad": _requires_grad,
    "dtype": _float64,
}


@pytest.mark.parametrize("field", sorted(CASES))
def test_the_check_names_the_field_of_the_contract_broken(field: str) -> None:
    model = _model()
    with pytest.raises(CorrectnessError) as caught:
        check_correctness(CASES[field](model), model, SPEC, _data())
    assert caught.value.check == field
    assert field.replace("aliasing", "changed when the candidate was called again") in str(
        caught.value
    )


def test_an_honest_candidate_keeps_to_the_contract() -> None:
    model = _model()
    check_correctness(lambda x: model(x).detach().clone(), model, SPEC, _data())


class _Breaks(BackendBase):
    """A backend whose inference breaks one field of the contract."""

    def __init__(self, field: str) -> None:
        self.field = field
        self.fn: Any = None

    def _config(self) -> dict[str, Any]:
        return {"field": self.field}

    def _build(self, given: Any) -> None:
        self.fn = CASES[self.field](given.module)

    def _infer(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args)


@pytest.mark.parametrize("isolation", ["process", "in_process"])
@pytest.mark.parametrize("field", sorted(CASES))
def test_a_tune_rejects_it_at_correctness_naming_the_field(
    field: str, isolation: str, tmp_path: Path
) -> None:
    config = ProfilingConfig(looks=(10,), max_seconds=2.0, warmup_max_calls=8)
    options = {"profiling_config": config, "isolation": isolation}
    report = tune_one(_Breaks(field), _model(), _data(), tmp_path, spec=SPEC, **options)
    assert report.isolation == isolation
    if field == "aliasing" and isolation == "process":
        # in its worker each output is copied out, so the buffer shows only once the chosen
        # candidate runs here: it is never chosen, whatever its verdict
        assert report.outcome == "baseline"
        return
    (failure,) = report.failures
    assert failure.stage == "correctness"
    named = {"aliasing": "changed when the candidate was called again"}.get(field, field)
    assert named in failure.reason


class _Faithful(_ModuleBackend):
    """Runs the model itself: faithful to eager, in-place change included."""

    def _infer(self, *args: Any, **kwargs: Any) -> Any:
        with torch.no_grad():
            return self.module(*args)


@pytest.mark.parametrize("isolation", ["process", "in_process"])
def test_a_model_that_changes_its_input_in_place_is_not_a_reason_to_reject(
    isolation: str, tmp_path: Path
) -> None:
    """Every timed call gets its own copy of its batch: no call sees another's change."""
    config = ProfilingConfig(looks=(10, 20), max_seconds=3.0, warmup_max_calls=8)
    model = TinyNet(8, mutate=True).eval()
    options = {"profiling_config": config, "isolation": isolation}
    report = tune_one(_Faithful(), model, _data(), tmp_path, spec=SPEC, **options)
    assert not report.failures, report.failures
    (result,) = report.results
    assert result.verdict in ("faster", "not_faster", "inconclusive")


class _WrongLater(_ModuleBackend):
    """Faster than eager (skips its sleep) and right, until its ``after``-th call in a process."""

    def __init__(self, after: int) -> None:
        super().__init__(f"after {after}")
        self.after = after
        self.calls = 0

    def _infer(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        with torch.no_grad():
            out = self.module.fc(*args).tanh()
        return out + 1.0 if self.calls > self.after else out


#: Calls after which ``_WrongLater`` turns wrong: more than its timing can make (up to 80 block
#: pairs of at most 128 calls, its blocks as long in time as eager's 10 ms), fewer than the soak.
WRONG_AFTER = 20_000


@pytest.mark.slow
@pytest.mark.parametrize("isolation", ["process", "in_process"])
@pytest.mark.parametrize("soak", [0, 30_000])
def test_a_soak_rejects_a_candidate_wrong_only_after_many_calls(
    soak: int, isolation: str, tmp_path: Path
) -> None:
    # looks up to 80 pairs: a machine that moves mid-run is followed by enough steady pairs
    config = ProfilingConfig(looks=(10, 20, 40, 80), max_seconds=5.0, warmup_max_calls=8, soak=soak)
    strategy = with_performance_validation(
        OneBackendStrategy(_WrongLater(after=WRONG_AFTER)),
        profiling_config=config,
        isolation=isolation,  # type: ignore[arg-type]
    )
    chosen = strategy.tune(TinyNet(8, sleep_s=0.002).eval(), "m", SPEC, _data(), "cpu", tmp_path)
    report = validation_of(strategy).last_report
    assert report is not None
    (result,) = report.results
    assert result.passed  # right while checked and timed
    if soak == 0:
        assert isinstance(chosen, _WrongLater)  # what the soak is for
        return
    assert not isinstance(chosen, _WrongLater)
    (failure,) = report.failures
    assert failure.stage == ("rebuild" if isolation == "process" else "correctness")
    assert "soak call" in failure.reason


def _raw_cuda_graph(model: torch.nn.Module) -> Any:
    """A real CUDA graph per input shape whose static output is handed out as is (no copy)."""
    graphs: dict[tuple[int, ...], tuple[Any, torch.Tensor, torch.Tensor]] = {}

    def call(x: torch.Tensor) -> torch.Tensor:
        key = tuple(x.shape)
        if key not in graphs:
            static_in = x.clone()
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side), torch.no_grad():
                model(static_in)  # warm up off the capture
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph), torch.no_grad():
                static_out = model(static_in)
            graphs[key] = (graph, static_in, static_out)
        graph, static_in, static_out = graphs[key]
        static_in.copy_(x)
        graph.replay()
        return static_out

    return call


def _cuda_data() -> list[Sample]:
    return [Sample(tuple(t.cuda() for t in s.args)) for s in _data()]


@pytest.mark.gpu
def test_a_real_cuda_graphs_static_output_breaks_the_contract() -> None:
    model = _model().cuda()
    with pytest.raises(CorrectnessError) as caught:
        check_correctness(_raw_cuda_graph(model), model, SPEC, _cuda_data())
    assert caught.value.check == "aliasing"


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["cuda-graphs", "compile-reduce-overhead"])
def test_the_cuda_graph_backends_hand_out_outputs_the_caller_can_keep(
    name: str, tmp_path: Path
) -> None:
    """The built-in backends that replay CUDA graphs return copies: kept outputs stay right."""
    from aitune_fp.backends.registry import BACKENDS

    model = _model()
    backend = BACKENDS[name].factory()
    backend.build(_model(), SPEC, _cuda_data(), torch.device("cuda"), tmp_path)
    check_correctness(backend, model.cuda(), SPEC, _cuda_data())


def test_compile_under_cuda_graphs_returns_copies_of_the_static_outputs(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """reduce-overhead replays CUDA graphs whose outputs the next replay overwrites (faked here
    by a static buffer in place of the compiled module): the backend hands out copies."""
    from aitune_fp.backends.compile import TorchCompileBackend

    monkeypatch.setattr(torch, "compile", lambda module, **_: _static_buffer(module))
    model = _model()
    backend = TorchCompileBackend(mode="reduce-overhead")
    backend.build(_model(), SPEC, _data(), torch.device("cpu"), tmp_path)
    check_correctness(backend, model, SPEC, _data())


def test_samples_move_to_the_tunes_device_and_stay_the_callers_when_already_there() -> None:
    """CPU samples tune on another device (the CLI's embedded models are on the CPU)."""
    from aitune_fp.pipeline.values import on_device

    here, there = Sample((torch.ones(2),), {"mask": torch.zeros(2)}), Sample((torch.ones(1),))
    moved = on_device([here, there], "meta")
    assert all(t.device.type == "meta" for s in moved for t in (*s.args, *s.kwargs.values()))
    assert on_device([here], "cpu")[0] is here
    assert on_device([here], torch.device("cpu"))[0] is here


def test_float32_on_cuda_with_tf32_is_held_to_the_reduced_tier(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two correct kernels differ at TF32 precision (cuDNN's default): not a wrong candidate."""
    from aitune_fp.correctness import compare
    from aitune_fp.correctness.compare import compare_outputs

    monkeypatch.setattr(compare, "TF32_DEVICES", frozenset({"cpu"}))  # CPU stands in for CUDA
    torch.manual_seed(0)
    expected = torch.randn(64, 10)
    actual = expected * (1 + 2e-3 * torch.randn(64, 10))  # TF32-sized rounding
    matmul = torch.backends.cuda.matmul.allow_tf32
    try:
        torch.backends.cuda.matmul.allow_tf32 = False
        with (
            torch.backends.cudnn.flags(allow_tf32=False),
            pytest.raises(CorrectnessError, match=r"torch\.float32 tolerances"),
        ):
            compare_outputs(actual, expected)
        with torch.backends.cudnn.flags(allow_tf32=True):
            compare_outputs(actual, expected)
            with pytest.raises(CorrectnessError, match="TF32"):
                compare_outputs(expected + 1.0, expected)  # a wrong candidate is still wrong
    finally:
        torch.backends.cuda.matmul.allow_tf32 = matmul


@pytest.mark.gpu
def test_float32_on_a_real_gpu_with_tf32_is_held_to_the_reduced_tier() -> None:
    from aitune_fp.correctness.compare import compare_outputs

    torch.manual_seed(0)
    expected = torch.randn(64, 10, device="cuda")
    with torch.backends.cudnn.flags(allow_tf32=True):
        compare_outputs(expected * (1 + 2e-3 * torch.randn_like(expected)), expected)
        with pytest.raises(CorrectnessError, match="TF32"):
            compare_outputs(expected + 1.0, expected)


@pytest.mark.parametrize(
    ("path", "scores"),
    [
        ("output", True),
        ("output[0]", True),
        ("output.logits", True),
        ("output['logits']", True),
        ('output["start_logits"]', True),
        ("output.scores", True),
        ("output.pooler_output", False),
        ("output['last_hidden_state']", False),
        ("output.embeddings", False),
    ],
)
def test_top1_agreement_is_for_class_scores_only(path: str, scores: bool) -> None:
    """Accuracy criteria fit the output: an embedding is not judged by its argmax."""
    from aitune_fp.correctness.compare import class_scores

    assert class_scores(path) is scores


def test_an_embedding_output_reports_no_top1() -> None:
    from aitune_fp.correctness.compare import compare_outputs
    from aitune_fp.correctness.tolerances import Tolerances

    torch.manual_seed(0)
    e = torch.randn(16, 32)
    tol = Tolerances(norm_tiers=("float32",))
    named = compare_outputs({"pooler_output": e * (1 + 1e-4)}, {"pooler_output": e}, tolerances=tol)
    plain = compare_outputs(e * (1 + 1e-4), e, tolerances=tol)
    assert "top1_agreement" in {c.name for c in plain.criteria}
    assert "top1_agreement" not in {c.name for c in named.criteria}


def _scales_its_input(model: torch.nn.Module) -> Any:
    def call(x: torch.Tensor) -> torch.Tensor:
        out = model(x)
        x.mul_(2)  # eager leaves its input alone: a caller's tensor would change under it
        return out

    return call


def test_a_candidate_that_changes_its_input_where_eager_does_not_is_named() -> None:
    model = _model()
    with pytest.raises(CorrectnessError) as caught:
        check_correctness(_scales_its_input(model), model, SPEC, _data())
    assert caught.value.check == "inputs"
    assert "input args[0]" in str(caught.value)
    assert "changes it in place where eager does not" in str(caught.value)


def test_a_candidate_that_changes_its_input_as_eager_does_keeps_to_the_contract() -> None:
    model = TinyNet(8, mutate=True).eval()
    check_correctness(lambda x: model(x), model, SPEC, _data())


class _ScalesItsInput(_ModuleBackend):
    def _infer(self, *args: Any, **kwargs: Any) -> Any:
        with torch.no_grad():
            out = self.module(*args)
        args[0].mul_(2)
        return out


@pytest.mark.parametrize("isolation", ["process", "in_process"])
def test_a_tune_names_a_candidate_that_changes_its_callers_input(
    isolation: str, tmp_path: Path
) -> None:
    config = ProfilingConfig(looks=(10,), max_seconds=2.0, warmup_max_calls=8)
    options = {"profiling_config": config, "isolation": isolation}
    report = tune_one(_ScalesItsInput(), _model(), _data(), tmp_path, spec=SPEC, **options)
    (failure,) = report.failures
    assert failure.stage == "correctness"
    assert "changes it in place where eager does not" in failure.reason
