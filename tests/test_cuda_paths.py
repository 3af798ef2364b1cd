"""CUDA code paths reached on CPU with fakes (issue 24): the ones no other CPU test reached.

``benchmarks/cuda_paths.py`` lists every CUDA branch in profiling, backends, measure, session,
telemetry and head-to-head and which test reaches it; the tests here reach, with a fake of
``torch.cuda`` (monkeypatched functions, fake events, streams and graphs) or of a tensor on a
CUDA device, those that no other CPU test did, and check what each does there. What needs a
real GPU is in docs/gpu.md ("CUDA paths reached on CPU"); ``gpu`` tests elsewhere run it.
"""

from __future__ import annotations

import contextlib
import importlib.util
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from aitune_fp.backends import registry
from aitune_fp.backends.aot_inductor import AotInductorBackend
from aitune_fp.backends.base import BackendBase
from aitune_fp.backends.cuda_graph import CudaGraphBackend
from aitune_fp.backends.onnxruntime import OnnxRuntimeBackend
from aitune_fp.backends.support import cuda_unavailable_reason, inductor_unavailable_reason
from aitune_fp.core.config import ProfilingConfig
from aitune_fp.core.selection import Contender
from aitune_fp.errors import InvalidValueError
from aitune_fp.inputs import GraphSpec, Sample
from aitune_fp.measure import headtohead, telemetry
from aitune_fp.measure.rules import measure_speedup
from aitune_fp.pipeline import baseline
from aitune_fp.profiling.cache import FALLBACK_L2_BYTES, l2_flusher
from aitune_fp.profiling.calls import ProfilingError, time_calls
from aitune_fp.profiling.timers import CudaTimer, timer_for
from aitune_fp.testing import FakeClock
from tests.test_telemetry import CudaClock, FakeNvml


class OnCuda(torch.Tensor):
    """A CPU tensor that says it is on ``cuda:1`` (what the code reads: ``.device``)."""

    @property
    def device(self) -> torch.device:  # type: ignore[override]
        return torch.device("cuda", 1)


def on_cuda(t: torch.Tensor) -> torch.Tensor:
    return t.as_subclass(OnCuda)


@pytest.fixture
def cuda_present(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """``torch.cuda`` says two devices are present and initialised; calls that free memory are
    logged (the list returned)."""
    calls: list[str] = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: calls.append("empty_cache"))
    return calls


# ---------------------------------------------------------------------------- CudaTimer and events


class FakeEvents:
    """``torch.cuda``'s device, Event, current_stream and synchronize, on a scripted device clock.

    ``device_ms`` is the device's clock: a fake model's call moves it; an event records it.
    """

    def __init__(self) -> None:
        self.device_ms = 0.0
        self.current: torch.device | None = None
        self.log: list[tuple[Any, ...]] = []

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(torch.cuda, "device", self.device_context)
        monkeypatch.setattr(torch.cuda, "Event", self.event)
        monkeypatch.setattr(torch.cuda, "current_stream", lambda d=None: ("stream", d))
        monkeypatch.setattr(torch.cuda, "synchronize", lambda d=None: self.log.append(("sync", d)))
        monkeypatch.setattr(torch.cuda, "current_device", lambda: 3)

    @contextlib.contextmanager
    def device_context(self, device: torch.device) -> Iterator[None]:
        self.current = device
        try:
            yield
        finally:
            self.current = None

    def event(self, *, enable_timing: bool = False) -> Any:
        fake = self

        class Event:
            made_on = fake.current
            timing = enable_timing
            at_ms: float | None = None

            def record(self, stream: Any) -> None:
                fake.log.append(("record", stream))
                self.at_ms = fake.device_ms

            def elapsed_time(self, end: Any) -> float:
                assert self.timing and end.timing, "elapsed_time needs enable_timing=True"
                assert self.at_ms is not None and end.at_ms is not None
                return float(end.at_ms - self.at_ms)

        return Event()

    def arm(self, device_ms: float) -> Any:
        def call() -> None:
            self.device_ms += device_ms

        return call


class TestCudaTimer:
    def test_devices(self, monkeypatch: pytest.MonkeyPatch) -> None:
        FakeEvents().install(monkeypatch)
        assert CudaTimer().device == torch.device("cuda", 3)  # the current device
        assert CudaTimer(1).device == torch.device("cuda", 1)
        assert CudaTimer("cuda:2").device == torch.device("cuda", 2)

    def test_sync_waits_for_the_timed_device(self, monkeypatch: pytest.MonkeyPatch) -> None:
        fake = FakeEvents()
        fake.install(monkeypatch)
        CudaTimer(1).sync()
        assert fake.log == [("sync", torch.device("cuda", 1))]

    def test_span_times_on_the_devices_own_stream(self, monkeypatch: pytest.MonkeyPatch) -> None:
        fake = FakeEvents()
        fake.install(monkeypatch)
        span = CudaTimer(1).device_span()
        assert span is not None
        fake.device_ms = 10.0
        span.start()
        fake.device_ms = 12.5
        span.stop()
        assert span.elapsed_s() == pytest.approx(0.0025)  # ms -> s
        cuda1 = torch.device("cuda", 1)
        assert fake.log == [("record", ("stream", cuda1))] * 2
        made = [span._start, span._stop]  # type: ignore[attr-defined]
        assert all(e.made_on == cuda1 and e.timing for e in made)

    def test_device_time_decides_through_measure(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """CUDA events, not the host clock, carry the device clock's 2x to the verdict."""
        fake = FakeEvents()
        fake.install(monkeypatch)
        monkeypatch.setitem(sys.modules, "pynvml", None)  # no telemetry
        config = ProfilingConfig(looks=(10, 20), clock="device")
        r = measure_speedup(
            fake.arm(2.0), fake.arm(1.0), Sample(), 4, config, timer=CudaTimer(0)
        ).result
        assert (r.clock, r.verdict) == ("device", "faster")
        assert r.estimate == pytest.approx(2.0) and r.device_estimate == pytest.approx(2.0)
        assert r.baseline_device_latency_s == pytest.approx(0.002)
        assert r.candidate_device_latency_s == pytest.approx(0.001)
        syncs = [entry for entry in fake.log if entry[0] == "sync"]
        assert len(syncs) >= 4 * 10 and {s[1] for s in syncs} == {torch.device("cuda", 0)}

    def test_timer_for_a_cuda_batch(self, monkeypatch: pytest.MonkeyPatch) -> None:
        FakeEvents().install(monkeypatch)
        x = on_cuda(torch.zeros(2))
        for batch in (((x,), {}), ((torch.ones(1),), {"extra": [x]})):
            timer = timer_for(batch)
            assert isinstance(timer, CudaTimer) and timer.device == torch.device("cuda", 1)
        assert not isinstance(timer_for(((torch.ones(1),), {})), CudaTimer)


# ---------------------------------------------------------------------------- cold cache: L2


class TestL2Flusher:
    @pytest.mark.parametrize(
        ("props", "l2"),
        [
            ({"L2_cache_size": 50 * 2**20}, 50 * 2**20),
            ({"L2_cache_size": 0}, FALLBACK_L2_BYTES),  # torch reports none
            ({}, FALLBACK_L2_BYTES),  # an older torch without the field
        ],
    )
    def test_buffer_is_twice_the_l2(
        self, monkeypatch: pytest.MonkeyPatch, props: dict[str, int], l2: int
    ) -> None:
        asked: list[Any] = []
        monkeypatch.setattr(
            torch.cuda,
            "get_device_properties",
            lambda d: asked.append(d) or types.SimpleNamespace(**props),
        )
        made: list[tuple[int, torch.dtype, Any]] = []
        buffer = torch.zeros(4, dtype=torch.uint8)

        def empty(size: int, *, dtype: torch.dtype, device: Any) -> torch.Tensor:
            made.append((size, dtype, device))
            return buffer

        monkeypatch.setattr(torch, "empty", empty)
        flush = l2_flusher(CudaClock())
        cuda0 = torch.device("cuda", 0)
        assert asked == [cuda0] and made == [(2 * l2, torch.uint8, cuda0)]
        assert int(buffer.sum()) == 0  # allocated once, written only when flushing
        flush()
        assert buffer.tolist() == [1] * 4


# ---------------------------------------------------------------------------- memory after failures


class TestCachedMemoryReleased:
    def test_out_of_memory_in_a_timed_call(self, cuda_present: list[str]) -> None:
        def candidate() -> None:
            raise torch.OutOfMemoryError("CUDA out of memory")

        with pytest.raises(ProfilingError, match="ran out of device memory"):
            time_calls(candidate, Sample(), 3, timer=FakeClock(), arm="candidate")
        assert cuda_present == ["empty_cache"]

    def test_a_failed_contender_in_a_head_to_head(self, cuda_present: list[str]) -> None:
        def broken() -> None:
            raise torch.OutOfMemoryError("CUDA out of memory")

        clock = FakeClock()
        state = headtohead.head_to_head(
            [(Contender("ok", 0), clock.arm(0.001)), (Contender("broken", 1), broken)],
            Sample(),
            timer=clock,
        )
        assert [f.name for f in state.failed] == ["broken"] and state.chosen == "ok"
        assert cuda_present == ["empty_cache"]

    @pytest.mark.parametrize("initialised", [True, False])
    def test_a_failed_build_returns_cached_memory_once_cuda_was_used(
        self,
        cuda_present: list[str],
        monkeypatch: pytest.MonkeyPatch,
        tmp_path: Path,
        initialised: bool,
    ) -> None:
        monkeypatch.setattr(torch.cuda, "is_initialized", lambda: initialised)

        class Failing(BackendBase):
            def _build(self, *args: Any) -> None:
                raise InvalidValueError("cannot build")

            def _infer(self, *args: Any, **kwargs: Any) -> Any:
                raise AssertionError("never built")

        with pytest.raises(InvalidValueError, match="cannot build"):
            Failing().build(torch.nn.Linear(2, 2), GraphSpec(2), [], "cpu", tmp_path)
        assert cuda_present == (["empty_cache"] if initialised else [])


# ---------------------------------------------------------------------------- device checks


class TestDeviceChecks:
    def test_cuda_unavailable_reason(
        self, cuda_present: list[str], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        assert cuda_unavailable_reason(torch.device("cuda")) is None
        assert cuda_unavailable_reason(torch.device("cuda", 1)) is None
        assert (
            cuda_unavailable_reason(torch.device("cuda", 2)) == "no CUDA device cuda:2 (2 present)"
        )
        monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
        reason = cuda_unavailable_reason(torch.device("cuda", 0))
        assert reason is not None and reason.startswith("CUDA is not available on this machine")

    @pytest.mark.parametrize("triton", [True, False])
    def test_inductor_on_cuda_needs_triton(
        self, monkeypatch: pytest.MonkeyPatch, triton: bool
    ) -> None:
        real = importlib.util.find_spec

        def find_spec(name: str, *args: Any) -> Any:
            if name == "triton":
                return object() if triton else None
            return real(name, *args)

        monkeypatch.setattr(importlib.util, "find_spec", find_spec)
        reason = inductor_unavailable_reason(torch.device("cuda", 0))
        assert reason == (
            None if triton else "TorchInductor needs Triton for CUDA, and triton is not installed"
        )

    @pytest.mark.parametrize("compiler", [True, False])
    def test_inductor_on_cpu_needs_a_compiler(
        self, monkeypatch: pytest.MonkeyPatch, compiler: bool
    ) -> None:
        def get_cpp_compiler() -> str:
            if not compiler:
                raise RuntimeError("no g++ or clang++ on PATH")
            return "g++"

        fake = types.ModuleType("torch._inductor.cpp_builder")
        fake.get_cpp_compiler = get_cpp_compiler  # type: ignore[attr-defined]
        monkeypatch.setitem(sys.modules, "torch._inductor.cpp_builder", fake)
        reason = inductor_unavailable_reason(torch.device("cpu"))
        if compiler:
            assert reason is None
        else:
            assert reason == (
                "TorchInductor needs a C++ compiler for CPU code and found none "
                "(no g++ or clang++ on PATH)"
            )

    def test_int8_on_cuda(self, cuda_present: list[str]) -> None:
        from aitune_fp.backends.quantized import Int8DynamicBackend

        reason = Int8DynamicBackend().unavailable_reason("cuda:0")
        assert reason is not None and reason.startswith(
            "int8 dynamic quantization runs on CPU only"
        )
        assert reason.endswith("not on cuda:0")
        assert Int8DynamicBackend("weight-only").unavailable_reason("cuda:0") is None
        assert Int8DynamicBackend("weight-only").unavailable_reason("cuda:3") == (
            "no CUDA device cuda:3 (2 present)"
        )

    @pytest.mark.parametrize("present", [True, False])
    def test_a_cuda_only_candidate_on_cpu(
        self, monkeypatch: pytest.MonkeyPatch, present: bool
    ) -> None:
        monkeypatch.setattr(torch.cuda, "is_available", lambda: present)
        backend = registry.make_candidate("cuda-graphs", "cpu")
        reason = backend.unavailable_reason("cpu")
        assert reason is not None and "runs on cuda only, and this tune runs on cpu" in reason
        assert ("no CUDA device on this machine" in reason) is not present


# ---------------------------------------------------------------------------- ONNX Runtime on CUDA


class FakeOrt(types.ModuleType):
    """``onnxruntime`` with the given providers; sessions record the providers asked for."""

    def __init__(self, providers: list[str]) -> None:
        super().__init__("onnxruntime")
        self.providers = providers
        self.sessions: list[Any] = []

    def get_available_providers(self) -> list[str]:
        return list(self.providers)

    class SessionOptions:
        """ONNX Runtime's session options: the thread count and config entries set."""

        def __init__(self) -> None:
            self.intra_op_num_threads = 0
            self.entries: dict[str, str] = {}

        def add_session_config_entry(self, key: str, value: str) -> None:
            self.entries[key] = value

    def InferenceSession(
        self, model: Any, sess_options: Any = None, providers: list[Any] | None = None
    ) -> Any:
        assert sess_options.entries == {"session.intra_op.allow_spinning": "0"}
        assert sess_options.intra_op_num_threads == torch.get_num_threads()
        self.sessions.append(providers)
        return types.SimpleNamespace(
            get_inputs=lambda: [types.SimpleNamespace(name="input_0")],
            run=lambda names, feeds: [feeds["input_0"] * 2],
        )


class TestOnnxRuntimeOnCuda:
    def _fake(self, monkeypatch: pytest.MonkeyPatch, providers: list[str]) -> FakeOrt:
        from aitune_fp.backends import onnxruntime as ort_backend

        fake = FakeOrt(providers)
        monkeypatch.setattr(ort_backend, "_import_onnxruntime", lambda: fake)
        return fake

    def test_needs_the_cuda_provider(
        self, cuda_present: list[str], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        self._fake(monkeypatch, ["CPUExecutionProvider"])
        reason = OnnxRuntimeBackend().unavailable_reason("cuda:0")
        assert reason is not None and reason.startswith("onnxruntime has no CUDA provider here")
        assert "CPUExecutionProvider" in reason
        assert OnnxRuntimeBackend().unavailable_reason("cpu") is None
        self._fake(monkeypatch, ["CUDAExecutionProvider", "CPUExecutionProvider"])
        assert OnnxRuntimeBackend().unavailable_reason("cuda:1") is None
        assert (
            OnnxRuntimeBackend().unavailable_reason("cuda:5") == "no CUDA device cuda:5 (2 present)"
        )

    @pytest.mark.parametrize(
        ("device", "providers"),
        [
            ("cuda:1", [("CUDAExecutionProvider", {"device_id": 1}), "CPUExecutionProvider"]),
            ("cuda", [("CUDAExecutionProvider", {"device_id": 0}), "CPUExecutionProvider"]),
            ("cpu", ["CPUExecutionProvider"]),
        ],
    )
    def test_the_session_runs_on_the_builds_device(
        self,
        cuda_present: list[str],
        monkeypatch: pytest.MonkeyPatch,
        tmp_path: Path,
        device: str,
        providers: list[Any],
    ) -> None:
        fake = self._fake(monkeypatch, ["CUDAExecutionProvider", "CPUExecutionProvider"])

        def export(model: Any, args: Any, path: str, **kwargs: Any) -> None:
            Path(path).write_bytes(b"onnx")  # no export: the default tier compiles nothing

        monkeypatch.setattr(torch.onnx, "export", export)
        module = torch.nn.Linear(3, 2)
        backend = OnnxRuntimeBackend().build(
            module, GraphSpec(4), [Sample((torch.ones(2, 3),))], device, tmp_path
        )
        assert fake.sessions == [providers]
        if device == "cpu":  # the fake session doubles its input; outputs stay where they are
            torch.testing.assert_close(backend.infer(torch.ones(2, 3)), torch.full((2, 3), 2.0))

    def test_outputs_go_back_to_the_cuda_device(
        self, cuda_present: list[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
    ) -> None:
        self._fake(monkeypatch, ["CUDAExecutionProvider", "CPUExecutionProvider"])
        monkeypatch.setattr(
            torch.onnx, "export", lambda m, a, path, **kw: Path(path).write_bytes(b"x")
        )
        backend = OnnxRuntimeBackend().build(
            torch.nn.Linear(3, 2), GraphSpec(4), [Sample((torch.ones(2, 3),))], "cuda:1", tmp_path
        )
        moved: list[Any] = []
        real_to = torch.Tensor.to

        def to(self: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
            if args and isinstance(args[0], torch.device) and args[0].type == "cuda":
                moved.append(args[0])
                return self  # stays on the CPU: there is no CUDA here
            return real_to(self, *args, **kwargs)

        monkeypatch.setattr(torch.Tensor, "to", to)
        out = backend.infer(torch.full((2, 3), 1.5))
        assert moved == [torch.device("cuda", 1)]
        torch.testing.assert_close(out, torch.full((2, 3), 3.0))

    def test_a_device_neither_cpu_nor_cuda_is_refused(
        self, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
    ) -> None:
        self._fake(monkeypatch, ["CPUExecutionProvider"])
        with pytest.raises(InvalidValueError, match="runs on CPU or CUDA, not on meta"):
            OnnxRuntimeBackend().build(
                torch.nn.Linear(3, 2), GraphSpec(4), [Sample((torch.ones(2, 3),))], "meta", tmp_path
            )


# ---------------------------------------------------------------------------- CUDA graphs, faked


class FakeGraphs:
    """``torch.cuda`` streams and graphs: a capture records the work run under it, a replay
    runs it again on the same (static) tensors, as a CUDA graph replays its kernels."""

    def __init__(self) -> None:
        self.stream: str = "default"
        self.capturing: Any = None
        self.log: list[str] = []

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        fake = self

        class Stream:
            def __init__(self, name: str) -> None:
                self.name = name

            def wait_stream(self, other: Any) -> None:
                fake.log.append(f"{self.name} waits for {other.name}")

        class Graph:
            def __init__(self) -> None:
                self.work: list[Any] = []

            def replay(self) -> None:
                fake.log.append("replay")
                for run in self.work:
                    run()

        @contextlib.contextmanager
        def on_stream(stream: Any) -> Iterator[None]:
            fake.stream = stream.name
            try:
                yield
            finally:
                fake.stream = "default"

        @contextlib.contextmanager
        def capture(graph: Any) -> Iterator[None]:
            fake.capturing = graph
            fake.log.append("capture")
            try:
                yield
            finally:
                fake.capturing = None

        monkeypatch.setattr(torch.cuda, "current_stream", lambda d=None: Stream("default"))
        monkeypatch.setattr(torch.cuda, "Stream", lambda d=None: Stream("side"))
        monkeypatch.setattr(torch.cuda, "stream", on_stream)
        monkeypatch.setattr(torch.cuda, "CUDAGraph", Graph)
        monkeypatch.setattr(torch.cuda, "graph", capture)


class Doubler(torch.nn.Module):
    """``2 * x + 1``; under a fake capture it records itself so a replay recomputes in place."""

    def __init__(self, fake: FakeGraphs) -> None:
        super().__init__()
        self.fake = fake
        self.weight = torch.nn.Parameter(torch.tensor(2.0))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.fake.log.append(f"forward on {self.fake.stream}")
        out = x * self.weight + 1
        graph = self.fake.capturing
        if graph is not None:
            graph.work.append(lambda: out.copy_(x * self.weight + 1))
        return out


class TestCudaGraphCaptureFaked:
    def test_a_present_cuda_device_is_available(
        self, cuda_present: list[str], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        assert CudaGraphBackend().unavailable_reason("cuda:1") is None
        assert CudaGraphBackend().unavailable_reason("cuda:2") == (
            "CudaGraphBackend needs a CUDA device: no CUDA device cuda:2 (2 present)"
        )
        monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
        reason = CudaGraphBackend().unavailable_reason("cuda")
        assert reason is not None
        assert reason.startswith("CudaGraphBackend needs a CUDA device: CUDA is not available")

    def _built(self, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> tuple[Any, FakeGraphs]:
        fake = FakeGraphs()
        fake.install(monkeypatch)
        # the device check is the only thing that keeps CUDA graphs off a CPU device
        monkeypatch.setattr(CudaGraphBackend, "unavailable_reason", lambda self, device: None)
        backend = CudaGraphBackend(warmup_calls=2)
        spec = GraphSpec(4, min_batch_size=1)
        backend.build(Doubler(fake), spec, [Sample((torch.ones(2, 3),))], "cpu", tmp_path)
        return backend, fake

    def test_warm_up_on_a_side_stream_then_capture_min_and_max(
        self, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
    ) -> None:
        backend, fake = self._built(monkeypatch, tmp_path)
        assert backend.num_graphs == 2  # batch 1 and batch 4
        one = [
            "side waits for default",
            "forward on side",
            "forward on side",
            "default waits for side",
            "capture",
            "forward on default",
        ]
        assert fake.log == one * 2

    def test_replay_reads_the_inputs_and_returns_copies(
        self, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
    ) -> None:
        backend, fake = self._built(monkeypatch, tmp_path)
        fake.log.clear()
        x = torch.arange(12.0).reshape(4, 3)
        first = backend.infer(x)
        torch.testing.assert_close(first, 2 * x + 1)
        second = backend.infer(-x)
        torch.testing.assert_close(second, -2 * x + 1)
        torch.testing.assert_close(first, 2 * x + 1)  # a copy: the next replay left it alone
        assert fake.log == ["replay", "replay"]  # no eager call, no new capture
        backend.infer(torch.ones(3, 3))  # a new shape: captured lazily
        assert backend.num_graphs == 3 and fake.log.count("capture") == 1


# ---------------------------------------------------------------------------- AOTInductor device


class TestAotInductorDevice:
    def test_a_device_neither_cpu_nor_cuda_is_refused(
        self, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
    ) -> None:
        from aitune_fp.backends import aot_inductor

        monkeypatch.setattr(aot_inductor, "inductor_unavailable_reason", lambda device: None)
        with pytest.raises(InvalidValueError, match="runs on CPU or CUDA, not on meta"):
            AotInductorBackend().build(
                torch.nn.Linear(2, 2), GraphSpec(2), [Sample((torch.ones(1, 2),))], "meta", tmp_path
            )

    def test_a_cpu_build_exports_compiles_and_loads_on_the_cpu(
        self, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
    ) -> None:
        from aitune_fp.backends import aot_inductor

        steps: list[Any] = []
        monkeypatch.setattr(aot_inductor, "inductor_unavailable_reason", lambda device: None)
        monkeypatch.setattr(
            torch.export, "export", lambda model, args, **kw: steps.append("export") or "program"
        )

        def compile_package(exported: Any, package_path: str) -> None:
            steps.append(("compile", exported))
            Path(package_path).write_bytes(b"pt2")

        def load(path: str, device_index: int) -> Any:
            steps.append(("load", Path(path).read_bytes(), device_index))
            return lambda x: x + 1

        monkeypatch.setattr(torch._inductor, "aoti_compile_and_package", compile_package)
        monkeypatch.setattr(torch._inductor, "aoti_load_package", load)
        backend = AotInductorBackend().build(
            torch.nn.Linear(2, 2), GraphSpec(2), [Sample((torch.ones(1, 2),))], "cpu", tmp_path
        )
        assert steps == ["export", ("compile", "program"), ("load", b"pt2", -1)]
        assert backend.infer(torch.zeros(1)).tolist() == [1.0]

    @pytest.mark.parametrize(("device", "index"), [("cpu", -1), ("cuda", 0), ("cuda:1", 1)])
    def test_the_package_loads_on_the_builds_device(
        self, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, device: str, index: int
    ) -> None:
        loaded: list[tuple[str, int]] = []

        def load(path: str, device_index: int) -> Any:
            loaded.append((Path(path).name, device_index))
            return lambda *args: args

        monkeypatch.setattr(torch._inductor, "aoti_load_package", load)
        backend = AotInductorBackend()
        # the package was built (compile tier); only where it loads is checked here
        backend._BackendBase__device = torch.device(device)  # type: ignore[attr-defined]
        backend._BackendBase__build_dir = tmp_path  # type: ignore[attr-defined]
        backend._activate()
        assert loaded == [("model.pt2", index)]


# ---------------------------------------------------------------------------- session and telemetry


class OnCudaModule(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(on_cuda(torch.zeros(2)))


class TestFreeMemoryOnCuda:
    def test_the_devices_free_memory(self, monkeypatch: pytest.MonkeyPatch) -> None:
        asked: list[torch.device] = []
        monkeypatch.setattr(
            torch.cuda, "mem_get_info", lambda d: asked.append(d) or (123_000, 999_000)
        )
        assert baseline._free_bytes(OnCudaModule()) == 123_000.0
        assert asked == [torch.device("cuda", 1)]

    def test_unknown_when_cuda_cannot_say(self, monkeypatch: pytest.MonkeyPatch) -> None:
        def refuse(device: torch.device) -> tuple[int, int]:
            raise RuntimeError("CUDA error: initialization error")

        monkeypatch.setattr(torch.cuda, "mem_get_info", refuse)
        assert baseline._free_bytes(OnCudaModule()) == float("inf")


class TestNvmlIdentity:
    @pytest.mark.parametrize(
        ("uuid", "pci", "expected"),
        [
            ("1f2e-33", (0, 0x3B, 0), ("GPU-1f2e-33", "00000000:3B:00.0")),
            ("GPU-1f2e-33", (1, 0x81, 2), ("GPU-1f2e-33", "00000001:81:02.0")),
            ("MIG-ab", (None, None, None), ("MIG-ab", None)),
            (None, (0, 7, 0), (None, "00000000:07:00.0")),
        ],
    )
    def test_device_identity(
        self,
        monkeypatch: pytest.MonkeyPatch,
        uuid: str | None,
        pci: tuple[int | None, ...],
        expected: tuple[str | None, str | None],
    ) -> None:
        fields = dict(zip(("pci_domain_id", "pci_bus_id", "pci_device_id"), pci, strict=True))
        props = types.SimpleNamespace(uuid=uuid, **fields)
        monkeypatch.setattr(torch.cuda, "get_device_properties", lambda d: props)
        assert telemetry.device_identity(torch.device("cuda", 0)) == expected

    @pytest.mark.parametrize("count", [1, 2])
    def test_the_only_device_is_taken_when_nothing_else_finds_it(
        self, monkeypatch: pytest.MonkeyPatch, count: int
    ) -> None:
        fake = FakeNvml()
        fake.nvmlDeviceGetCount = lambda: count  # type: ignore[attr-defined]
        fake.nvmlDeviceGetHandleByIndex = lambda i: f"index:{i}"  # type: ignore[attr-defined]
        monkeypatch.setitem(sys.modules, "pynvml", fake)
        monkeypatch.setattr(telemetry, "device_identity", lambda device: (None, None))
        sampler = telemetry.open_sampler(CudaClock())
        if count == 1:
            assert isinstance(sampler, telemetry.NvmlSampler)
            reading = sampler.sample()
            assert reading is not None and reading.sm_clock_mhz == 1500
            sampler.close()
        else:  # two devices and no identity: which one is ours is unknown, so none is read
            assert sampler is telemetry.NO_TELEMETRY
        assert fake.shutdowns == 1
