"""``CudaGraphBackend``: capture the module's CUDA kernels once per input shape, then replay them."""

from __future__ import annotations

from typing import Any

import attrs
import torch

from aitune_fp._tree import (
    clone_inputs,
    flatten_tensors,
    map_tensors,
    shape_signature,
    to_device,
)
from aitune_fp.backends.base import Build, ModuleBackend
from aitune_fp.backends.support import all_samples, autocast_context, check_autocast_dtype
from aitune_fp.core._checks import check_int
from aitune_fp.errors import BackendFailedError


@attrs.frozen(kw_only=True)
class _Captured:
    """One captured graph with the static input buffers it reads and the outputs it writes."""

    graph: Any  # torch.cuda.CUDAGraph
    static_inputs: list[torch.Tensor]
    static_output: Any


class CudaGraphBackend(ModuleBackend):
    """Replay a captured CUDA graph per input shape (static buffers; outputs returned as copies)."""

    def __init__(self, dtype: torch.dtype | None = None, warmup_calls: int = 3) -> None:
        """Configure capture: ``dtype`` enables autocast, ``warmup_calls`` eager calls precede it."""
        self._dtype = check_autocast_dtype(dtype)
        self._warmup_calls = check_int("warmup_calls", warmup_calls, minimum=1)
        self._graphs: dict[tuple[Any, ...], _Captured] = {}

    def _config(self) -> dict[str, Any]:
        """The options, in the constructor's order."""
        return {"dtype": self._dtype, "warmup_calls": self._warmup_calls}

    @property
    def num_graphs(self) -> int:
        """How many graphs are captured right now (one per distinct input shape)."""
        return len(self._graphs)

    def unavailable_reason(self, device: torch.device | str) -> str | None:
        """CUDA graphs need a CUDA device that is present (CPU devices are unavailable)."""
        target = torch.device(device)
        if target.type != "cuda":
            return (
                "CudaGraphBackend needs a CUDA device (CUDA graphs capture and replay CUDA "
                f"kernels), got device {str(target)!r}"
            )
        reason = super().unavailable_reason(target)
        return None if reason is None else f"CudaGraphBackend needs a CUDA device: {reason}"

    def _prepare(self, given: Build) -> None:
        """Capture a graph for every sample at the smallest and the largest batch size."""
        spec = given.graph_spec
        samples = all_samples(given.data, f"capture {self.describe()}", spec)
        for size in sorted({spec.min_batch_size, spec.get_max_batch_size()}):
            for sample in samples:
                batch = spec.make_batch(sample, size)
                self._graph_for(batch.args, dict(batch.kwargs))

    def _graph_for(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> _Captured:
        """Return the graph for these inputs' shapes, capturing it first when it is new."""
        signature = shape_signature((args, kwargs))
        if signature not in self._graphs:
            self._graphs[signature] = self._capture(args, kwargs)
        return self._graphs[signature]

    def _capture(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> _Captured:
        """Warm up on a side stream, then capture one graph reading static copies of the inputs."""
        assert self._given is not None
        module, device = self._given.module, self._given.device
        static_args, static_kwargs = to_device(clone_inputs(args, kwargs), device)
        current = torch.cuda.current_stream(device)
        side = torch.cuda.Stream(device)  # type: ignore[no-untyped-call]
        side.wait_stream(current)
        with (
            torch.cuda.stream(side),
            torch.no_grad(),
            autocast_context(device, self._dtype, cache=False),
        ):
            for _ in range(self._warmup_calls):
                module(*static_args, **static_kwargs)
        current.wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with (
            torch.no_grad(),
            autocast_context(device, self._dtype, cache=False),
            torch.cuda.graph(graph),
        ):
            static_output = module(*static_args, **static_kwargs)
        return _Captured(
            graph=graph,
            static_inputs=flatten_tensors((static_args, static_kwargs)),
            static_output=static_output,
        )

    def _infer(self, *args: Any, **kwargs: Any) -> Any:
        """Copy the inputs into the static buffers, replay, and return copies of the outputs."""
        try:
            captured = self._graph_for(args, kwargs)
        except Exception as exc:
            raise BackendFailedError(
                f"{self.describe()} could not capture a CUDA graph for new input shapes "
                f"{shape_signature((args, kwargs))!r}: {type(exc).__name__}: {exc}"
            ) from exc
        for static, given in zip(
            captured.static_inputs, flatten_tensors((args, kwargs)), strict=True
        ):
            static.copy_(given)
        captured.graph.replay()
        return map_tensors(lambda tensor: tensor.clone(), captured.static_output)

    def _deactivate(self) -> None:
        """Drop every captured graph and its static buffers (the memory pools go with them)."""
        self._graphs.clear()
