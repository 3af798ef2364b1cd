"""Backends: lifecycle, build.log, describe/key, eager, torch.compile and CUDA graphs."""

from __future__ import annotations

import json
import re
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch

from aitune_fp.backends.base import BUILD_LOG_NAME, BackendBase, Build
from aitune_fp.backends.compile import TorchCompileBackend
from aitune_fp.backends.cuda_graph import CudaGraphBackend
from aitune_fp.backends.eager import TorchEagerBackend
from aitune_fp.backends.protocol import Backend, BackendState
from aitune_fp.correctness.check import check_correctness
from aitune_fp.correctness.failures import CorrectnessError
from aitune_fp.inputs import GraphSpec, Sample

# ---- small models -----------------------------------------------------------------------------


def make_mlp() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4)
    ).eval()


class TinyConvNet(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.conv = torch.nn.Conv2d(3, 4, kernel_size=3, padding=1)
        self.head = torch.nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.conv(x)).mean(dim=(2, 3))
        return self.head(y)


class DictModel(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.proj = torch.nn.Linear(8, 4)

    def forward(self, x: torch.Tensor, *, scale: float = 1.0) -> dict[str, Any]:
        logits = self.proj(x) * scale
        return {"logits": logits, "probs": torch.softmax(logits, dim=-1)}


def mlp_data() -> list[Sample]:
    torch.manual_seed(1)
    return [Sample((torch.randn(2, 8),))]


def cuda_data() -> list[Sample]:
    """:func:`mlp_data` on the GPU: what a tune on CUDA hands its backends."""
    return [Sample(tuple(t.cuda() for t in s.args)) for s in mlp_data()]


SPEC = GraphSpec(4, min_batch_size=1)


class RecordingBackend(BackendBase):
    """A user-style backend: wraps the module, can warn or fail during the build."""

    def __init__(self, fail: bool = False, warn: bool = False, factor: float = 1.0) -> None:
        self._fail = fail
        self._warn = warn
        self._factor = factor
        self._module: torch.nn.Module | None = None
        self.deactivated = 0
        self.activated = 0

    def _config(self) -> dict[str, Any]:
        return {"fail": self._fail, "warn": self._warn, "factor": self._factor}

    def _build(self, given: Build) -> None:
        given.module.to(given.device)
        self._module = given.module
        if self._warn:
            warnings.warn("this build warns", UserWarning, stacklevel=1)
        if self._fail:
            raise ValueError("deliberate build failure")

    def _infer(self, *args: Any, **kwargs: Any) -> Any:
        assert self._module is not None
        with torch.no_grad():
            return self._module(*args, **kwargs) * self._factor

    def _activate(self) -> None:
        self.activated += 1

    def _deactivate(self) -> None:
        self.deactivated += 1


class DeviceRecordingModule(torch.nn.Module):
    """Records every ``.to(device)`` call; only really moves to CPU (the only device here)."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(2, 2)
        self.moves: list[str] = []

    def to(self, *args: Any, **kwargs: Any) -> DeviceRecordingModule:  # type: ignore[override]
        device = torch.device(args[0] if args else kwargs["device"])
        self.moves.append(str(device))
        if device.type == "cpu":
            super().to(device)
        return self

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x)


# ---- protocol and lifecycle -------------------------------------------------------------------


class TestProtocol:
    def test_builtins_and_user_backends_satisfy_the_protocol(self) -> None:
        """Every built-in backend and a BackendBase subclass is a runtime ``Backend``."""
        for backend in (
            TorchEagerBackend(),
            TorchCompileBackend(),
            CudaGraphBackend(),
            RecordingBackend(),
        ):
            assert isinstance(backend, Backend)

    def test_plain_object_is_not_a_backend(self) -> None:
        """An object without the protocol's members is not a ``Backend``."""
        assert not isinstance(object(), Backend)


class TestLifecycle:
    def test_build_returns_self_active_on_the_device(self, tmp_path: Path) -> None:
        """build() returns the same object, active, with the device recorded."""
        backend = TorchEagerBackend()
        assert backend.device is None
        assert backend.state is BackendState.INIT
        built = backend.build(make_mlp(), SPEC, mlp_data(), "cpu", tmp_path)
        assert built is backend
        assert backend.is_active
        assert backend.device == torch.device("cpu")

    def test_infer_before_build_is_refused(self) -> None:
        """Inference on a backend that was never built raises a clear RuntimeError."""
        with pytest.raises(RuntimeError, match=r"not active .*state: init.*build"):
            TorchEagerBackend()(torch.zeros(1, 8))

    def test_second_build_is_refused(self, tmp_path: Path) -> None:
        """A backend builds once; a second build names the backend and says to create a new one."""
        backend = TorchEagerBackend().build(make_mlp(), SPEC, mlp_data(), "cpu", tmp_path)
        with pytest.raises(RuntimeError, match=r"TorchEagerBackend\(\) was already built"):
            backend.build(make_mlp(), SPEC, mlp_data(), "cpu", tmp_path)

    def test_deactivate_then_activate(self, tmp_path: Path) -> None:
        """Deactivated backends refuse inference; activate() restores it (hooks called once)."""
        backend = RecordingBackend().build(make_mlp(), SPEC, mlp_data(), "cpu", tmp_path)
        x = torch.randn(2, 8)
        backend.deactivate()
        assert not backend.is_active
        assert backend.deactivated == 1
        with pytest.raises(RuntimeError, match="state: inactive"):
            backend.infer(x)
        backend.deactivate()  # no-op when inactive
        assert backend.deactivated == 1
        backend.activate()
        backend.activate()  # no-op when active
        assert backend.activated == 1
        assert backend(x).shape == (2, 4)

    def test_activate_or_deactivate_before_build_errors(self) -> None:
        """activate() and deactivate() on an unbuilt backend raise RuntimeError naming the state."""
        backend = TorchEagerBackend()
        with pytest.raises(RuntimeError, match="state init"):
            backend.activate()
        with pytest.raises(RuntimeError, match="state init"):
            backend.deactivate()

    def test_bad_arguments_name_themselves(self, tmp_path: Path) -> None:
        """A non-module or a non-sequence data argument is a TypeError naming it."""
        with pytest.raises(TypeError, match=r"module must be a torch\.nn\.Module"):
            TorchEagerBackend().build("nope", SPEC, mlp_data(), "cpu", tmp_path)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="data must be a sequence"):
            TorchEagerBackend().build(make_mlp(), SPEC, "abc", "cpu", tmp_path)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="dtype must be"):
            TorchEagerBackend(dtype=torch.float64)
        with pytest.raises(TypeError, match="warmup_calls"):
            CudaGraphBackend(warmup_calls=1.5)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="mode"):
            TorchCompileBackend(mode=3)  # type: ignore[arg-type]


class TestBuildLog:
    def test_success_writes_header_and_warnings(self, tmp_path: Path) -> None:
        """build.log sits in cache_dir/<key>/ with the description header and captured warnings."""
        backend = RecordingBackend(warn=True)
        backend.build(make_mlp(), SPEC, mlp_data(), "cpu", tmp_path)
        log = (tmp_path / backend.key() / BUILD_LOG_NAME).read_text()
        assert f"Backend: {backend.describe()}\n" in log
        assert "this build warns" in log
        assert "UserWarning" in log
        assert "Build succeeded" in log

    def test_failure_logs_cleans_up_and_propagates(self, tmp_path: Path) -> None:
        """A failed build logs type, message and traceback, is not active, and re-raises."""
        backend = RecordingBackend(fail=True)
        with pytest.raises(ValueError, match="deliberate build failure"):
            backend.build(make_mlp(), SPEC, mlp_data(), "cpu", tmp_path)
        log = (tmp_path / backend.key() / BUILD_LOG_NAME).read_text()
        assert "Exception type: ValueError" in log
        assert "Exception details: deliberate build failure" in log
        assert "Traceback (most recent call last)" in log
        assert "RecordingBackend._build" in log or "_build" in log
        assert not backend.is_active
        assert backend.state is BackendState.FAILED
        assert backend.deactivated == 1
        with pytest.raises(RuntimeError, match="state: failed"):
            backend.infer(torch.zeros(1, 8))
        with pytest.raises(RuntimeError, match="already built"):
            backend.build(make_mlp(), SPEC, mlp_data(), "cpu", tmp_path)

    def test_failure_returns_module_to_its_original_device(self, tmp_path: Path) -> None:
        """After a failed build to another device the module is moved back where it was."""
        module = DeviceRecordingModule()
        with pytest.raises(ValueError, match="deliberate"):
            RecordingBackend(fail=True).build(
                module, SPEC, [Sample((torch.zeros(1, 2),))], "meta", tmp_path
            )
        assert module.moves == ["meta", "cpu"]

    def test_log_is_appended_per_build(self, tmp_path: Path) -> None:
        """Two builds of equal configuration append to the same build.log."""
        for _ in range(2):
            TorchEagerBackend().build(make_mlp(), SPEC, mlp_data(), "cpu", tmp_path)
        log = (tmp_path / TorchEagerBackend().key() / BUILD_LOG_NAME).read_text()
        assert log.count("Backend: TorchEagerBackend()") == 2


class TestDescribeAndKey:
    def test_describe_lists_only_non_defaults(self) -> None:
        """describe() is AITune's ``Class(k=v,...)``: non-default options, no spaces."""
        assert TorchEagerBackend().describe() == "TorchEagerBackend()"
        assert TorchCompileBackend().describe() == "TorchCompileBackend()"
        assert (
            TorchCompileBackend(mode="max-autotune").describe()
            == "TorchCompileBackend(mode=max-autotune)"
        )
        assert (
            TorchCompileBackend(
                mode="reduce-overhead", fullgraph=True, dtype=torch.bfloat16
            ).describe()
            == "TorchCompileBackend(mode=reduce-overhead,fullgraph=True,dtype=torch.bfloat16)"
        )
        assert CudaGraphBackend(warmup_calls=5).describe() == "CudaGraphBackend(warmup_calls=5)"
        assert RecordingBackend(factor=2.0).describe() == "RecordingBackend(factor=2.0)"

    def test_key_equal_for_equal_configs_and_differs_otherwise(self) -> None:
        """key() is a function of class and configuration only."""
        assert TorchCompileBackend(mode="max-autotune").key() == (
            TorchCompileBackend(mode="max-autotune").key()
        )
        keys = {
            TorchCompileBackend().key(),
            TorchCompileBackend(mode="max-autotune").key(),
            TorchCompileBackend(dynamic=False).key(),
            TorchCompileBackend(dtype=torch.float16).key(),
            TorchEagerBackend().key(),
            TorchEagerBackend(dtype=torch.bfloat16).key(),
            CudaGraphBackend().key(),
        }
        assert len(keys) == 7
        descriptions = {
            TorchCompileBackend(mode="max-autotune").describe(),
            TorchCompileBackend(dynamic=False).describe(),
        }
        assert len(descriptions) == 2

    def test_key_is_stable_across_processes(self) -> None:
        """key() is a hash of the JSON config, not of id() or a salted hash (literal values)."""
        assert TorchEagerBackend().key() == "TorchEagerBackend_082484ad3c"
        assert TorchEagerBackend(dtype=torch.bfloat16).key() == "TorchEagerBackend_2184a2d6d3"

    def test_key_is_filesystem_safe(self) -> None:
        """key() holds only letters, digits, '_' and '-'."""
        for backend in (TorchCompileBackend(mode="max-autotune"), CudaGraphBackend()):
            assert re.fullmatch(r"[A-Za-z0-9_-]+", backend.key())

    def test_to_dict_is_json_ready(self) -> None:
        """to_dict() has the class name and every option, and survives a JSON round trip."""
        config = TorchCompileBackend(mode="max-autotune", dtype=torch.bfloat16).to_dict()
        assert config == {
            "backend": "TorchCompileBackend",
            "config": {
                "mode": "max-autotune",
                "dynamic": None,
                "fullgraph": False,
                "backend": "inductor",
                "dtype": "torch.bfloat16",
            },
        }
        assert json.loads(json.dumps(config)) == config


# ---- eager ------------------------------------------------------------------------------------


class TestEager:
    def test_keeps_the_same_module_and_matches_it(self, tmp_path: Path) -> None:
        """The eager backend runs the caller's module object, without gradients."""
        module = make_mlp()
        backend = TorchEagerBackend().build(module, SPEC, mlp_data(), "cpu", tmp_path)
        assert backend.module is module
        x = torch.randn(3, 8)
        out = backend(x)
        assert not out.requires_grad
        torch.testing.assert_close(out, module(x).detach())

    def test_where_gradients_are_off_a_call_is_the_modules_call(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Eager is timed as the user calls the model: a context entered per call (``no_grad``
        and an empty autocast: 1.5-2 us) read an identical candidate 1.06-1.12x faster on a
        50 us call, accepted. Where gradients are already off (a worker, ``inference_mode``),
        nothing is entered; where they are on, ``no_grad`` still is."""
        backend = TorchEagerBackend().build(make_mlp(), SPEC, mlp_data(), "cpu", tmp_path)
        entered: list[str] = []
        real = torch.no_grad.__enter__
        monkeypatch.setattr(
            torch.no_grad, "__enter__", lambda self: entered.append("no_grad") or real(self)
        )
        x = torch.randn(2, 8)
        with torch.inference_mode():
            backend(x)
        with torch.no_grad():
            backend(x)
        assert entered == ["no_grad"]  # the inner one of the ``with`` above only
        assert not backend(x).requires_grad and entered == ["no_grad", "no_grad"]

    def test_does_not_mutate_inputs(self, tmp_path: Path) -> None:
        """Inference leaves the caller's tensors unchanged."""
        backend = TorchEagerBackend().build(make_mlp(), SPEC, mlp_data(), "cpu", tmp_path)
        x = torch.randn(2, 8)
        before = x.clone()
        backend(x)
        assert torch.equal(x, before)

    def test_conv_and_dict_models(self, tmp_path: Path) -> None:
        """Conv nets and models returning dicts (with kwargs) run unchanged."""
        conv = TorchEagerBackend().build(
            TinyConvNet(), SPEC, [Sample((torch.randn(1, 3, 8, 8),))], "cpu", tmp_path
        )
        assert conv(torch.randn(2, 3, 8, 8)).shape == (2, 2)
        model = DictModel()
        backend = TorchEagerBackend().build(model, SPEC, mlp_data(), "cpu", tmp_path)
        out = backend(torch.ones(2, 8), scale=2.0)
        assert set(out) == {"logits", "probs"}
        torch.testing.assert_close(out["logits"], model(torch.ones(2, 8), scale=2.0)["logits"])

    @pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
    def test_cpu_autocast(self, tmp_path: Path, dtype: torch.dtype) -> None:
        """bf16 and fp16 autocast work on CPU (torch 2.13): linear outputs come out reduced."""
        backend = TorchEagerBackend(dtype=dtype).build(
            make_mlp(), SPEC, mlp_data(), "cpu", tmp_path
        )
        assert backend.dtype == dtype
        assert backend(torch.randn(2, 8)).dtype == dtype
        assert next(make_mlp().parameters()).dtype == torch.float32

    def test_reduced_eager_validates_against_fp32_eager(self, tmp_path: Path) -> None:
        """bf16 eager passes the check against fp32 eager with bf16 tolerances."""
        module = make_mlp()
        reference = TorchEagerBackend().build(module, SPEC, mlp_data(), "cpu", tmp_path)
        candidate = TorchEagerBackend(dtype=torch.bfloat16).build(
            module, SPEC, mlp_data(), "cpu", tmp_path
        )
        check_correctness(candidate, reference, SPEC, mlp_data(), expected_dtype=candidate.dtype)
        with pytest.raises(CorrectnessError) as info:
            check_correctness(candidate, reference, SPEC, mlp_data())
        assert info.value.check == "dtype"


class TestCudaGraphOnCpu:
    def test_cpu_device_is_a_clear_error(self, tmp_path: Path) -> None:
        """CudaGraphBackend on a CPU device fails the build saying CUDA graphs need CUDA."""
        backend = CudaGraphBackend()
        module = make_mlp()
        with pytest.raises(RuntimeError, match="needs a CUDA device"):
            backend.build(module, SPEC, mlp_data(), "cpu", tmp_path)
        assert not backend.is_active
        assert "needs a CUDA device" in (tmp_path / backend.key() / BUILD_LOG_NAME).read_text()
        assert next(module.parameters()).device.type == "cpu"


# ---- torch.compile (slow: each compiles for seconds on CPU) ------------------------------------


@pytest.mark.compile
class TestTorchCompile:
    @pytest.mark.slow
    def test_inductor_matches_eager_and_compiles_only_in_build(self, tmp_path: Path) -> None:
        """Inductor output is close to eager at min and max batch; infer never compiles."""
        from torch._dynamo.utils import counters

        module = make_mlp()
        data = mlp_data()
        candidate = TorchCompileBackend().build(module, SPEC, data, "cpu", tmp_path)
        frames_after_build = counters["frames"]["total"]
        reference = TorchEagerBackend().build(module, SPEC, data, "cpu", tmp_path)
        check_correctness(candidate, reference, SPEC, data, name="mlp")
        assert counters["frames"]["total"] == frames_after_build
        log = (tmp_path / candidate.key() / BUILD_LOG_NAME).read_text()
        assert "Backend: TorchCompileBackend()" in log
        candidate.deactivate()
        with pytest.raises(RuntimeError, match="not active"):
            candidate(torch.randn(1, 8))

    @pytest.mark.slow
    def test_conv_and_dict_models_with_dynamo(self, tmp_path: Path) -> None:
        """Dynamo-captured conv net and dict model match eager; activate() recompiles."""
        conv_data = [Sample((torch.randn(2, 3, 8, 8),))]
        conv = TinyConvNet()
        compiled = TorchCompileBackend(backend="eager").build(
            conv, SPEC, conv_data, "cpu", tmp_path
        )
        check_correctness(
            compiled,
            TorchEagerBackend().build(conv, SPEC, conv_data, "cpu", tmp_path),
            SPEC,
            conv_data,
        )
        model = DictModel()
        data = [Sample((torch.randn(2, 8),), {"scale": 0.5})]
        candidate = TorchCompileBackend(backend="eager", dtype=torch.bfloat16).build(
            model, SPEC, data, "cpu", tmp_path
        )
        reference = TorchEagerBackend().build(model, SPEC, data, "cpu", tmp_path)
        check_correctness(candidate, reference, SPEC, data, expected_dtype=torch.bfloat16)
        candidate.deactivate()
        candidate.activate()
        check_correctness(candidate, reference, SPEC, data, expected_dtype=torch.bfloat16)

    @pytest.mark.slow
    def test_global_reset_waits_for_the_last_live_compile_backend(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """deactivate() resets dynamo only when no other compile backend is still active."""
        resets: list[int] = []
        original_reset = torch.compiler.reset

        def counting_reset() -> None:
            resets.append(1)
            original_reset()

        monkeypatch.setattr(torch.compiler, "reset", counting_reset)
        first = TorchCompileBackend(backend="eager").build(
            make_mlp(), SPEC, mlp_data(), "cpu", tmp_path
        )
        second = TorchCompileBackend(backend="eager", dynamic=True).build(
            make_mlp(), SPEC, mlp_data(), "cpu", tmp_path
        )
        first.deactivate()
        assert resets == []
        second.deactivate()
        assert resets == [1]


# ---- CUDA (gpu mark: skipped without a CUDA device) -------------------------------------------


@pytest.mark.gpu
class TestCuda:
    def test_cuda_graph_matches_eager_and_captures_lazily(self, tmp_path: Path) -> None:
        """Graphs for min/max batch are captured in build; a new shape is captured on first use."""
        module = make_mlp()
        data = cuda_data()
        backend = CudaGraphBackend().build(module, SPEC, data, "cuda", tmp_path)
        assert backend.num_graphs == 2
        reference = TorchEagerBackend().build(module, SPEC, data, "cuda", tmp_path)
        check_correctness(backend, reference, SPEC, data)
        captured = backend.num_graphs  # one more per batch size the check served
        x = torch.randn(3, 8, device="cuda")
        torch.testing.assert_close(backend(x), reference(x))
        assert backend.num_graphs == captured + 1

    def test_cuda_graph_outputs_are_not_aliased(self, tmp_path: Path) -> None:
        """A later replay does not overwrite outputs returned earlier."""
        backend = CudaGraphBackend().build(make_mlp(), SPEC, mlp_data(), "cuda", tmp_path)
        first = backend(torch.ones(4, 8, device="cuda"))
        kept = first.clone()
        backend(torch.zeros(4, 8, device="cuda"))
        assert torch.equal(first, kept)

    def test_cuda_graph_deactivate_releases_graphs(self, tmp_path: Path) -> None:
        """deactivate() drops the graphs; activate() captures min/max again."""
        backend = CudaGraphBackend().build(make_mlp(), SPEC, mlp_data(), "cuda", tmp_path)
        backend.deactivate()
        assert backend.num_graphs == 0
        backend.activate()
        assert backend.num_graphs == 2

    @pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
    def test_cuda_autocast_eager_and_graph(self, tmp_path: Path, dtype: torch.dtype) -> None:
        """Reduced-precision eager and CUDA graphs on CUDA validate against fp32 eager."""
        module = make_mlp()
        data = cuda_data()
        reference = TorchEagerBackend().build(module, SPEC, data, "cuda", tmp_path)
        for candidate in (
            TorchEagerBackend(dtype=dtype).build(module, SPEC, data, "cuda", tmp_path),
            CudaGraphBackend(dtype=dtype).build(module, SPEC, data, "cuda", tmp_path),
        ):
            assert candidate(torch.randn(2, 8, device="cuda")).dtype == dtype
            check_correctness(candidate, reference, SPEC, data, expected_dtype=dtype)


class TestDocs:
    def test_worked_example_in_docs_runs(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The custom-backend example in docs/backends.md runs and validates against eager."""
        text = (Path(__file__).parent.parent / "docs" / "backends.md").read_text()
        blocks = re.findall(r"```python\n(.*?)```", text, re.S)
        assert blocks
        monkeypatch.chdir(tmp_path)
        namespace: dict[str, Any] = {"__name__": "docs_example"}
        block = next(b for b in blocks if "class ChannelsLastBackend" in b)
        exec(compile(block, "docs/backends.md", "exec"), namespace)
        candidate = namespace["candidate"]
        assert candidate.describe() == "ChannelsLastBackend()"
        assert not candidate.is_active
        assert (tmp_path / "cache" / candidate.key() / BUILD_LOG_NAME).is_file()
        assert (
            namespace["ChannelsLastBackend"](copy_module=False).describe()
            == "ChannelsLastBackend(copy_module=False)"
        )
