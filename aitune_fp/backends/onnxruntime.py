"""``OnnxRuntimeBackend``: ONNX export run in an ONNX Runtime session (``onnx`` extra, at build)."""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Any

import torch

from aitune_fp.backends.base import BackendBase, Build
from aitune_fp.backends.support import positional_sample
from aitune_fp.errors import BackendUnavailableError, InvalidTypeError, InvalidValueError

#: The exported model's file name inside ``cache_dir/<key()>/``.
ONNX_FILE_NAME = "model.onnx"


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

    @property
    def onnx_path(self) -> Path | None:
        """Where the exported model is written (None before the build)."""
        return None if self.build_dir is None else self.build_dir / ONNX_FILE_NAME

    def artefact(self) -> Path | None:
        """The exported ONNX file: a session on it is this backend as built."""
        return self.onnx_path

    def _load_artefact(self, given: Build) -> None:
        """Open a session on the file a build in another process exported (a worker's)."""
        assert self.onnx_path is not None
        sample = positional_sample(given.data, "OnnxRuntimeBackend")
        with torch.no_grad():
            model = copy.deepcopy(given.module).cpu().eval()
            reference = model(*(a.detach().cpu() for a in sample.args))
        self._output_kind = _output_kind(reference)
        self._providers = _providers(given.device)
        self._model_bytes = self.onnx_path.read_bytes()
        self._activate()
        assert self._session is not None
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
        ort = _import_onnxruntime()
        providers = _providers(given.device)
        sample = positional_sample(given.data, "OnnxRuntimeBackend")
        model = copy.deepcopy(given.module).cpu().eval()
        args = tuple(a.detach().cpu() for a in sample.args)
        with torch.no_grad():
            reference = model(*args)
        if isinstance(reference, torch.Tensor):
            outputs = 1
        elif isinstance(reference, (tuple, list)) and all(
            isinstance(o, torch.Tensor) for o in reference
        ):
            outputs = len(reference)
        else:
            raise InvalidValueError(
                "OnnxRuntimeBackend needs a tensor or a tuple/list of tensors as output, got "
                f"{type(reference).__name__}"
            )
        input_names = [f"input_{i}" for i in range(len(args))]
        output_names = [f"output_{i}" for i in range(outputs)]
        dynamic_axes: dict[str, dict[int, str]] = {}
        for i, name in enumerate(input_names):
            axis = given.graph_spec.axis_of(i)
            if axis is not None:
                dynamic_axes[name] = {axis: "batch"}
        assert self.onnx_path is not None
        path = self.onnx_path
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
        try:
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
                        output_names=output_names,
                        dynamic_axes=dynamic_axes,
                    )
            except Exception as exc:
                raise InvalidValueError(
                    "torch.onnx.export cannot export this model: "
                    f"{type(exc).__name__}: {str(exc).strip().splitlines()[0]}"
                ) from exc
            session = ort.InferenceSession(str(partial), _session_options(ort), providers=providers)
            os.replace(partial, path)
        finally:
            partial.unlink(missing_ok=True)
        self._input_names = [i.name for i in session.get_inputs()]
        self._output_kind = _output_kind(reference)
        self._providers = providers
        self._model_bytes = path.read_bytes()
        self._session = session

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
