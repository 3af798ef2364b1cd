"""``AotInductorBackend``: ``torch.export``, AOTInductor into the cache folder, loaded back."""

from __future__ import annotations

import copy
import time
from typing import Any

import torch

from aitune_fp.backends.base import BackendBase, Build
from aitune_fp.backends.support import (
    first_line,
    inductor_unavailable_reason,
    positional_sample,
    written_whole,
)
from aitune_fp.errors import InvalidTypeError, InvalidValueError


class AotInductorBackend(BackendBase):
    """A deep copy of the module, ``torch.export``-ed and compiled ahead of time by AOTInductor."""

    def __init__(self) -> None:
        """No options: AOTInductor's default configuration."""
        self._runner: Any = None
        self.build_seconds: float | None = None

    #: The compiled package: loading it gives this backend as built.
    artefact_name = "model.pt2"

    def _load_artefact(self, given: Build) -> None:
        """Load the package a build in another process compiled (a worker's, once chosen)."""
        start = time.perf_counter()
        self._runner = self._load()
        self.build_seconds = time.perf_counter() - start

    def unavailable_reason(self, device: torch.device | str) -> str | None:
        """No CUDA device, or no C++ compiler (CPU) / no Triton (CUDA) for AOTInductor."""
        target = torch.device(device)
        return super().unavailable_reason(target) or inductor_unavailable_reason(target)

    def _build(self, given: Build) -> None:
        """Export a copy of ``module``, compile it into the cache folder and load it back."""
        graph_spec, device = given.graph_spec, given.device
        if device.type not in ("cpu", "cuda"):
            raise InvalidValueError(f"AotInductorBackend runs on CPU or CUDA, not on {device}")
        sample = positional_sample(given.data, "AotInductorBackend")
        low, high = graph_spec.min_batch_size, graph_spec.max_batch_size
        batch = graph_spec.batch_dim(sample)
        if batch is not None and low < high:
            # an example batch of at least 2 rows, so export does not specialise the dimension
            example = graph_spec.make_batch(sample, min(max(batch, low, 2), high))
            dim = torch.export.Dim("batch", min=low, max=high)
            dynamic_shapes: tuple[dict[int, Any] | None, ...] | None = tuple(
                None if (axis := graph_spec.axis_of(i)) is None else {axis: dim}
                for i in range(len(example.args))
            )
        else:
            example = sample if batch is None else graph_spec.make_batch(sample, low)
            dynamic_shapes = None
        start = time.perf_counter()
        model = copy.deepcopy(given.module).to(device).eval()
        args = tuple(a.detach().to(device) for a in example.args)
        try:
            with torch.no_grad():
                exported = torch.export.export(model, args, dynamic_shapes=dynamic_shapes)
        except Exception as exc:
            raise InvalidValueError(
                f"torch.export cannot export this model: {first_line(exc)}"
            ) from exc
        path = self.artefact()
        assert path is not None
        with written_whole(path) as partial:
            try:
                torch._inductor.aoti_compile_and_package(exported, package_path=str(partial))
            except Exception as exc:
                raise InvalidValueError(
                    f"AOTInductor cannot compile this model: {first_line(exc)}"
                ) from exc
        del exported, model
        self._runner = self._load()
        self.build_seconds = time.perf_counter() - start

    def _load(self) -> Any:
        """Load the compiled package on the build's device."""
        device = self.device
        index = -1 if device is None or device.type != "cuda" else (device.index or 0)
        return torch._inductor.aoti_load_package(str(self.artefact()), device_index=index)

    def _infer(self, *args: Any, **kwargs: Any) -> Any:
        """Run the compiled model on one batch."""
        assert self._runner is not None
        if kwargs:
            raise InvalidTypeError("AotInductorBackend takes positional tensor inputs only")
        # the package was compiled for contiguous inputs and reads their memory as laid out then:
        # a non-contiguous or channels_last input gave wrong values (held-out layout variants)
        inputs = [a.contiguous() if isinstance(a, torch.Tensor) else a for a in args]
        with torch.no_grad():
            return self._runner(*inputs)

    def _deactivate(self) -> None:
        """Drop the loaded model (the package stays in the cache folder, for activate)."""
        self._runner = None

    def _activate(self) -> None:
        """Load the compiled package again."""
        self._runner = self._load()
