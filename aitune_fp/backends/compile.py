"""``TorchCompileBackend``: ``torch.compile`` with compilation and warm-up done inside ``build``."""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any

import torch

from aitune_fp._tree import map_tensors, to_device
from aitune_fp.backends.base import Build, ModuleBackend
from aitune_fp.backends.support import (
    all_samples,
    autocast_context,
    check_autocast_dtype,
    inductor_unavailable_reason,
)
from aitune_fp.core._checks import check_type
from aitune_fp.errors import InvalidTypeError

if TYPE_CHECKING:
    from collections.abc import Callable

#: Warm-up calls per batch size (reduce-overhead's CUDA graph trees record on the second call
#: and replay from the third, so three calls leave every mode in its steady state).
_WARMUP_CALLS_PER_BATCH_SIZE = 3

#: The modes whose compiled code replays CUDA graphs on CUDA (static output buffers).
_CUDA_GRAPH_MODES = frozenset({"reduce-overhead", "max-autotune"})

#: Compile backends that hold compiled code right now; the global dynamo reset waits for the last.
_LIVE: weakref.WeakSet[TorchCompileBackend] = weakref.WeakSet()


class TorchCompileBackend(ModuleBackend):
    """``torch.compile(module, mode=, dynamic=, fullgraph=, backend=)``, optionally under autocast."""

    def __init__(
        self,
        mode: str | None = None,
        dynamic: bool | None = None,
        fullgraph: bool = False,
        backend: str = "inductor",
        dtype: torch.dtype | None = None,
    ) -> None:
        """Configure the compilation; the options are passed to ``torch.compile`` unchanged."""
        if mode is not None and (not isinstance(mode, str) or not mode):
            raise InvalidTypeError(f"mode must be None or a non-empty str, got {mode!r}")
        if not isinstance(backend, str) or not backend:
            raise InvalidTypeError(
                f"backend must be a non-empty str (a torch.compile backend name), got {backend!r}"
            )
        self._mode, self._backend = mode, backend
        self._dynamic = None if dynamic is None else check_type("dynamic", dynamic, bool)
        self._fullgraph = check_type("fullgraph", fullgraph, bool)
        self._dtype = check_autocast_dtype(dtype)
        self._compiled: Callable[..., Any] | None = None

    def unavailable_reason(self, device: torch.device | str) -> str | None:
        """No CUDA device, or (inductor) no C++ compiler for CPU / no Triton for CUDA."""
        target = torch.device(device)
        reason = super().unavailable_reason(target)
        if reason is None and self._backend == "inductor":
            reason = inductor_unavailable_reason(target)
        return reason

    def _config(self) -> dict[str, Any]:
        """The options, in the constructor's order."""
        return {
            "mode": self._mode,
            "dynamic": self._dynamic,
            "fullgraph": self._fullgraph,
            "backend": self._backend,
            "dtype": self._dtype,
        }

    def _prepare(self, given: Build) -> None:
        """Compile the module and warm it up at min and max batch size."""
        spec = given.graph_spec
        samples = all_samples(given.data, f"warm up {self.describe()}", spec)
        self._compiled = torch.compile(
            given.module,
            mode=self._mode,
            dynamic=self._dynamic,
            fullgraph=self._fullgraph,
            backend=self._backend,
        )
        _LIVE.add(self)
        for size in sorted({spec.min_batch_size, spec.get_max_batch_size()}):
            for i in range(_WARMUP_CALLS_PER_BATCH_SIZE):
                batch = spec.make_batch(samples[i % len(samples)], size)
                args, kwargs = to_device((batch.args, dict(batch.kwargs)), given.device)
                self._run(*args, **kwargs)

    def _run(self, *args: Any, **kwargs: Any) -> Any:
        """Call the compiled module without gradients, under autocast when a dtype is set."""
        assert self._compiled is not None
        assert self.device is not None
        with torch.no_grad(), autocast_context(self.device, self._dtype):
            return self._compiled(*args, **kwargs)

    def _infer(self, *args: Any, **kwargs: Any) -> Any:
        """Run the compiled module; under CUDA graphs, return copies of the outputs."""
        out = self._run(*args, **kwargs)
        if self._mode in _CUDA_GRAPH_MODES:
            return map_tensors(torch.clone, out)
        return out

    def _deactivate(self) -> None:
        """Drop the compiled callable; reset dynamo globally when no other compile backend is live."""
        self._compiled = None
        _LIVE.discard(self)
        if not _LIVE:
            torch.compiler.reset()
