"""``OnnxRuntimeBackend``: ONNX export run in an ONNX Runtime session (``onnx`` extra, at build)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import torch

from aitune_fp.backends.base import BackendBase, Build
from aitune_fp.backends.support import first_line, positional_sample, written_whole
from aitune_fp.errors import BackendUnavailableError, InvalidTypeError, InvalidValueError


def _import_onnxruntime() -> Any:
    """Import ``onnx`` and ``onnxruntime`` or fail, unavailable, naming the extra to install."""
    try:
        import onnx  # noqa: F401  (torch.onnx.export needs it)
        import onnxruntime
    except ImportError as exc:
        raise BackendUnavailableError(
            f"OnnxRuntimeBackend needs the 'onnx' extra (pip install 'aitune-fp[onnx]'): {exc}"
        ) from exc
    return onnxruntime


class OnnxRuntimeBackend(BackendBase):
    """A deep copy of the module exported with ``torch.onnx.export``, run by ONNX Runtime."""

    def __init__(self) -> None:
        """No options: the default ONNX opset and ONNX Runtime's default graph optimizations."""
        self._session: Any = None
        self._input_names: list[str] = []
        self._output_kind: type[tuple[Any, ...]] | type[list[Any]] | None = None
        self._providers: list[Any] = []
        self._model_bytes = b""

    #: The exported ONNX file: a session on it is this backend as built.
    artefact_name = "model.onnx"

    def _load_artefact(self, given: Build) -> None:
        """Open a session on the file a build in another process exported (a worker's)."""
        sample = positional_sample(given.data, "OnnxRuntimeBackend")
        with torch.no_grad():
            model = copy.deepcopy(given.module).cpu().eval()
            reference = model(*(a.detach().cpu() for a in sample.args))
        path = self.artefact()
        assert path is not None
        self._open(path, reference, given.device)

    def _open(self, path: Path, reference: Any, device: torch.device) -> None:
        """A session on the model in ``path`` (kept in memory), on ``device``, outputs as eager's."""
        self._output_kind = _output_kind(reference)
        self._providers = _providers(device)
        self._model_bytes = path.read_bytes()
        self._activate()
        self._input_names = [i.name for i in self._session.get_inputs()]

    def unavailable_reason(self, device: torch.device | str) -> str | None:
        """No ``onnx``/``onnxruntime`` (the extra), no CUDA device, or no CUDA provider for it."""
        target = torch.device(device)
        try:
            ort = _import_onnxruntime()
        except BackendUnavailableError as exc:
            return str(exc)
        reason = super().unavailable_reason(target)
        if reason is None and target.type == "cuda":
            available = list(ort.get_available_providers())
            if "CUDAExecutionProvider" not in available:
                reason = (
                    "onnxruntime has no CUDA provider here (install onnxruntime-gpu); "
                    f"available: {available}"
                )
        return reason

    def _build(self, given: Build) -> None:
        """Export a copy of ``module`` to ONNX and open an inference session on it."""
        _import_onnxruntime()
        _providers(given.device)  # refuse another device before exporting
        sample = positional_sample(given.data, "OnnxRuntimeBackend")
        model = copy.deepcopy(given.module).cpu().eval()
        args = tuple(a.detach().cpu() for a in sample.args)
        with torch.no_grad():
            reference = model(*args)
        outputs = [reference] if isinstance(reference, torch.Tensor) else reference
        if not isinstance(outputs, (tuple, list)) or not all(
            isinstance(o, torch.Tensor) for o in outputs
        ):
            raise InvalidValueError(
                "OnnxRuntimeBackend needs a tensor or a tuple/list of tensors as output, got "
                f"{type(reference).__name__}"
            )
        input_names = [f"input_{i}" for i in range(len(args))]
        dynamic_axes = {
            name: {axis: "batch"}
            for i, name in enumerate(input_names)
            if (axis := given.graph_spec.axis_of(i)) is not None
        }
        path = self.artefact()
        assert path is not None
        with written_whole(path) as partial:
            try:
                # with grad enabled, so modules trace their plain path (the transformer's fused
                # inference kernel has no ONNX symbolic)
                with torch.enable_grad():
                    torch.onnx.export(
                        model,
                        args,
                        str(partial),
                        dynamo=False,
                        input_names=input_names,
                        output_names=[f"output_{i}" for i in range(len(outputs))],
                        dynamic_axes=dynamic_axes,
                    )
            except Exception as exc:
                raise InvalidValueError(
                    f"torch.onnx.export cannot export this model: {first_line(exc)}"
                ) from exc
            self._open(partial, reference, given.device)  # a file ONNX Runtime refuses stays out

    def _infer(self, *args: Any, **kwargs: Any) -> Any:
        """Run the session on numpy views of the inputs; outputs come back as tensors."""
        assert self._session is not None
        if kwargs:
            raise InvalidTypeError("OnnxRuntimeBackend takes positional tensor inputs only")
        feeds = {
            name: a.detach().cpu().contiguous().numpy()
            for name, a in zip(self._input_names, args, strict=True)
        }
        results = self._session.run(None, feeds)
        device = self.device
        tensors = [torch.from_numpy(r) for r in results]
        if device is not None and device.type != "cpu":
            tensors = [t.to(device) for t in tensors]
        if self._output_kind is None:
            return tensors[0]
        return self._output_kind(tensors)

    def _deactivate(self) -> None:
        """Drop the session (the exported model stays, for activate)."""
        self._session = None

    def _activate(self) -> None:
        """Open a new session on the exported model, kept in memory (the file may be rewritten)."""
        ort = _import_onnxruntime()
        self._session = ort.InferenceSession(
            self._model_bytes, _session_options(ort), providers=self._providers
        )


def _providers(device: torch.device) -> list[Any]:
    """ONNX Runtime's execution providers for ``device`` (CPU or CUDA only)."""
    if device.type == "cuda":
        return [("CUDAExecutionProvider", {"device_id": device.index or 0}), "CPUExecutionProvider"]
    if device.type == "cpu":
        return ["CPUExecutionProvider"]
    raise InvalidValueError(f"OnnxRuntimeBackend runs on CPU or CUDA, not on {device}")


def _output_kind(reference: Any) -> Any:
    """How the model's outputs come back: one tensor (None), a tuple or a list."""
    if isinstance(reference, torch.Tensor):
        return None
    return tuple if isinstance(reference, tuple) else list


def _session_options(ort: Any) -> Any:
    """Run on torch's intra-op threads, as eager does, and never spin between calls."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = torch.get_num_threads()
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return options
