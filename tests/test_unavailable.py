"""A backend this machine cannot run is a recorded ``unavailable`` candidate, never a crash.

Absence is simulated (an import made to fail, CUDA or a provider reported missing), so these
run on any CPU machine.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import torch
from structlog.testing import LogCapture

from aitune_fp.adapters.validation import with_performance_validation
from aitune_fp.backends.aot_inductor import AotInductorBackend
from aitune_fp.backends.base import UnavailableBackend
from aitune_fp.backends.channels_last import ChannelsLastBackend
from aitune_fp.backends.compile import TorchCompileBackend
from aitune_fp.backends.cuda_graph import CudaGraphBackend
from aitune_fp.backends.eager import TorchEagerBackend
from aitune_fp.backends.onnxruntime import OnnxRuntimeBackend
from aitune_fp.backends.quantized import Int8DynamicBackend
from aitune_fp.backends.registry import BACKENDS, BackendChoiceError, make_candidate
from aitune_fp.cli import main
from aitune_fp.errors import BackendUnavailableError
from aitune_fp.events.ingest import event_schema
from aitune_fp.pipeline.strategies import FirstWinsStrategy, MaxThroughputStrategy, try_candidate

from .benchmark_scripts import load_benchmark
from .validation_helpers import CLOCK, FAST_CONFIG, Pruned, make_case


@pytest.fixture
def no_onnxruntime(
    monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """``import onnxruntime`` fails, as without the ``onnx`` extra: here and in a worker.

    A worker started from the fork server imports afresh, with this process's ``sys.path``:
    a package first on it that refuses to import is what a missing extra looks like there.
    """
    blocked = tmp_path_factory.mktemp("no_onnxruntime")
    (blocked / "onnxruntime").mkdir()
    (blocked / "onnxruntime" / "__init__.py").write_text(
        "raise ImportError(\"No module named 'onnxruntime'\", name='onnxruntime')\n"
    )
    monkeypatch.syspath_prepend(str(blocked))
    monkeypatch.setitem(sys.modules, "onnxruntime", None)


@pytest.fixture
def no_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    """torch reports no CUDA device (whatever the machine has)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


class TestReasons:
    def test_onnxruntime_missing_names_the_extra(self, no_onnxruntime: None) -> None:
        """No onnxruntime: the reason says which extra to install."""
        reason = OnnxRuntimeBackend().unavailable_reason("cpu")
        assert reason is not None and "pip install 'aitune-fp[onnx]'" in reason

    def test_onnxruntime_without_its_cuda_provider(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """CUDA present but a CPU-only onnxruntime: unavailable on CUDA, naming onnxruntime-gpu."""
        import onnxruntime as ort

        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
        monkeypatch.setattr(ort, "get_available_providers", lambda: ["CPUExecutionProvider"])
        reason = OnnxRuntimeBackend().unavailable_reason("cuda")
        assert reason is not None and "onnxruntime-gpu" in reason
        assert OnnxRuntimeBackend().unavailable_reason("cpu") is None

    @pytest.mark.parametrize("name", sorted(BACKENDS))
    def test_every_backend_is_unavailable_on_cuda_without_cuda(
        self, name: str, no_cuda: None
    ) -> None:
        """No CUDA device: every registry backend says so for a cuda device, none crashes."""
        reason = BACKENDS[name].factory().unavailable_reason("cuda")  # type: ignore[attr-defined]
        assert reason is not None
        assert "CUDA" in reason or "CPU only" in reason

    def test_cpu_backends_are_available_on_cpu(self) -> None:
        """On this CPU machine every CPU backend is available (CI installs the onnx extra)."""
        for name, entry in BACKENDS.items():
            if "cpu" in entry.devices:
                assert entry.factory().unavailable_reason("cpu") is None, name  # type: ignore[attr-defined]

    def test_cuda_graphs_on_cpu(self) -> None:
        """CUDA graphs asked for on a CPU device: unavailable, saying why."""
        reason = CudaGraphBackend().unavailable_reason("cpu")
        assert reason is not None and "needs a CUDA device" in reason

    def test_int8_dynamic_is_cpu_only_weight_only_is_not(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Dynamic int8 kernels are CPU kernels; weight-only is plain torch ops (CUDA too)."""
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
        reason = Int8DynamicBackend().unavailable_reason("cuda")
        assert reason is not None and "CPU only" in reason
        assert Int8DynamicBackend("weight-only").unavailable_reason("cuda") is None
        assert ChannelsLastBackend().unavailable_reason("cuda") is None

    def test_no_cpp_compiler_for_inductor(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Without a C++ compiler, inductor-based backends are unavailable on CPU; eager is not."""
        import torch._inductor.cpp_builder as cpp_builder

        def missing() -> str:
            raise RuntimeError("no g++ or clang++ on PATH")

        monkeypatch.setattr(cpp_builder, "get_cpp_compiler", missing)
        for backend in (TorchCompileBackend(), AotInductorBackend()):
            reason = backend.unavailable_reason("cpu")
            assert reason is not None and "C++ compiler" in reason
        assert TorchCompileBackend(backend="eager").unavailable_reason("cpu") is None
        assert TorchEagerBackend().unavailable_reason("cpu") is None

    def test_no_triton_for_inductor_on_cuda(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Inductor on CUDA needs Triton: its absence is a reason."""
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
        real = importlib.util.find_spec
        monkeypatch.setattr(
            importlib.util, "find_spec", lambda n, *a: None if n == "triton" else real(n, *a)
        )
        reason = AotInductorBackend().unavailable_reason("cuda")
        assert reason is not None and "Triton" in reason

    def test_build_raises_the_unavailable_error_and_logs_it(
        self, no_onnxruntime: None, tmp_path: Path
    ) -> None:
        """build() fails first with BackendUnavailableError; build.log says why; state failed."""
        backend = OnnxRuntimeBackend()
        module = torch.nn.Linear(4, 4)
        with pytest.raises(BackendUnavailableError, match=r"aitune-fp\[onnx\]"):
            backend.build(module, make_case()[1], [], "cpu", tmp_path)
        assert backend.state.value == "failed"
        log = (tmp_path / backend.key() / "build.log").read_text()
        assert "BackendUnavailableError" in log


class TestMakeCandidate:
    def test_a_cuda_only_name_on_cpu_is_a_placeholder(self, no_cuda: None) -> None:
        """make_candidate keeps the description and key, and carries the reason."""
        candidate = make_candidate("cuda-graphs", "cpu")
        assert isinstance(candidate, UnavailableBackend)
        assert candidate.describe() == "CudaGraphBackend()"
        assert candidate.key() == CudaGraphBackend().key()
        reason = candidate.unavailable_reason("cpu")
        assert reason is not None and "no CUDA device on this machine" in reason

    def test_an_allowed_name_is_the_real_backend(self) -> None:
        """On a device it runs on, make_candidate is make_backend."""
        assert isinstance(make_candidate("int8-dynamic", "cpu"), Int8DynamicBackend)

    def test_unknown_names_are_still_errors(self) -> None:
        """A typo is not 'unavailable': it is refused, naming it."""
        with pytest.raises(BackendChoiceError, match="unknown backend 'cuda-graph'"):
            make_candidate("cuda-graph", "cpu")

    def test_reason_must_be_given(self) -> None:
        """A placeholder without a reason is refused."""
        with pytest.raises(ValueError, match="reason"):
            UnavailableBackend(TorchEagerBackend(), "")


class TestRecordedInTheSession:
    def test_unavailable_then_the_next_candidate(
        self, no_onnxruntime: None, logs: LogCapture, tmp_path: Path
    ) -> None:
        """First-wins: onnxruntime is recorded unavailable with its reason; the next one wins."""
        module, spec, data = make_case()
        strategy = with_performance_validation(
            FirstWinsStrategy([OnnxRuntimeBackend(), Pruned()]),
            profiling_config=FAST_CONFIG,
            timer=CLOCK,
        )
        chosen = strategy.tune(module, "m", spec, data, "cpu", tmp_path)
        assert isinstance(chosen, Pruned)
        (failure,) = strategy.candidate_failures
        assert failure.stage == "unavailable"
        assert failure.error_type == "BackendUnavailableError"
        assert "aitune-fp[onnx]" in failure.reason
        (event,) = [e for e in logs.entries if str(e["event"]).endswith("candidate_failed")]
        assert event["stage"] == "unavailable"
        line = {k: v for k, v in event.items() if k != "log_level"}
        jsonschema.Draft202012Validator(event_schema()).validate(line)

    def test_plain_try_candidate(self, no_cuda: None, tmp_path: Path) -> None:
        """Outside a tune, the outcome says unavailable and why (nothing built)."""
        module, spec, data = make_case()
        outcome = try_candidate(CudaGraphBackend(), module, "m", spec, data, "cpu", tmp_path)
        assert not outcome.ok and outcome.stage == "unavailable"
        assert outcome.reason is not None and "needs a CUDA device" in outcome.reason

    def test_all_unavailable_keeps_eager(self, no_cuda: None, tmp_path: Path) -> None:
        """Max-throughput with nothing available falls back to eager, each reason recorded."""
        module, spec, data = make_case()
        strategy = with_performance_validation(
            MaxThroughputStrategy(
                [CudaGraphBackend(), make_candidate("compile-reduce-overhead", "cpu")]
            ),
            profiling_config=FAST_CONFIG,
            timer=CLOCK,
        )
        chosen = strategy.tune(module, "m", spec, data, "cpu", tmp_path)
        assert isinstance(chosen, TorchEagerBackend)
        assert [f.stage for f in strategy.candidate_failures] == ["unavailable", "unavailable"]


class TestCli:
    def _tune(self, tmp_path: Path, *flags: str) -> tuple[int, dict[str, Any]]:
        rc = main(
            [
                "tune",
                "--looks",
                "10,20",
                "--max-seconds",
                "5",
                "-q",
                "--format",
                "json",
                "--cache-dir",
                str(tmp_path),
                *flags,
            ]
        )
        return rc, {}

    def test_missing_extra_is_a_row_not_a_crash(
        self, no_onnxruntime: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """``--backends onnxruntime,eager`` without onnxruntime: exit 0, onnxruntime unavailable."""
        rc, _ = self._tune(tmp_path, "--device", "cpu", "--backends", "onnxruntime,eager")
        out = capsys.readouterr().out
        assert rc == 0
        doc = json.loads(out)
        failures = doc["run"]["failures"]
        assert [f["stage"] for f in failures] == ["unavailable"]
        assert "aitune-fp[onnx]" in failures[0]["reason"]
        assert [r["backend_description"] for r in doc["run"]["results"]] == ["TorchEagerBackend()"]

    def test_table_says_unavailable(
        self, no_onnxruntime: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """The table output heads the failures 'Failed or unavailable' and shows the stage."""
        rc = main(
            [
                "tune",
                "--device",
                "cpu",
                "--backends",
                "onnxruntime",
                "--strategy",
                "one",
                "-q",
                "--cache-dir",
                str(tmp_path),
            ]
        )
        out = " ".join(capsys.readouterr().out.split())
        assert rc == 0
        assert "Failed or unavailable candidates:" in out
        assert "unavailable BackendUnavailableError" in out

    def test_auto_device_without_cuda_records_cuda_only_names(
        self, no_cuda: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """``--device auto`` on a machine without CUDA: cuda-graphs is unavailable, not an error."""
        rc, _ = self._tune(tmp_path, "--backends", "cuda-graphs,eager")
        doc = json.loads(capsys.readouterr().out)
        assert rc == 0
        (failure,) = doc["run"]["failures"]
        assert failure["backend_description"] == "CudaGraphBackend()"
        assert failure["stage"] == "unavailable"
        assert "no CUDA device on this machine" in failure["reason"]

    def test_explicit_cpu_with_a_cuda_only_name_is_still_a_usage_error(
        self, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """Asking for cpu and a CUDA-only backend at once contradicts itself: exit 2."""
        assert main(["tune", "--device", "cpu", "--backends", "cuda-graphs"]) == 2
        assert "runs on cuda only, not on cpu" in capsys.readouterr().err


class TestBenchmark:
    def test_the_benchmark_reports_unavailable(self, no_onnxruntime: None, tmp_path: Path) -> None:
        """benchmarks/backends.py records an unavailable backend with its reason, no crash."""
        bench = load_benchmark("backends")
        row = bench.one_tune("mlp", "onnxruntime", tmp_path)
        assert row["outcome"] == "unavailable"
        assert "aitune-fp[onnx]" in row["reason"]
        assert "unavailable 1/1" in bench.summarize([row], 1)
