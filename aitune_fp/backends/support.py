"""What backends share besides the lifecycle: device checks, autocast, options as JSON, samples."""

from __future__ import annotations

import contextlib
import enum
import importlib.util
import os
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from aitune_fp.core._checks import check_choice
from aitune_fp.errors import InvalidTypeError, InvalidValueError

if TYPE_CHECKING:
    from aitune_fp.inputs import Sample

#: Autocast dtypes a backend may declare (the reduced precisions torch autocast supports).
_AUTOCAST_DTYPES = (torch.bfloat16, torch.float16)


def positional_sample(data: Sequence[Sample], who: str) -> Sample:
    """The first sample, for a backend that exports the model (ONNX, AOTInductor)."""
    from aitune_fp.inputs import as_sample

    if not data:
        raise InvalidValueError(f"{who} needs a sample to export the model")
    sample = as_sample(data[0])
    if sample.kwargs or not all(isinstance(a, torch.Tensor) for a in sample.args):
        raise InvalidValueError(f"{who} exports models called with positional tensors only")
    return sample


@contextlib.contextmanager
def written_whole(path: Path) -> Iterator[Path]:
    """A partial file to write ``path``'s content to; moved onto ``path`` if the block succeeds."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.stem}.{os.getpid()}.partial{path.suffix}")
    try:
        yield partial
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)


def first_line(exc: BaseException) -> str:
    """``Type: first line of the message`` (exporters' and compilers' messages run to pages)."""
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0] if lines else ''}"


def all_samples(data: Sequence[Sample], why: str, graph_spec: Any) -> list[Sample]:
    """Every sample as a ``Sample``; an error naming the graph spec when there are none."""
    from aitune_fp.inputs import as_sample

    if not data:
        raise InvalidValueError(
            f"data must hold at least one sample to {why} (graph spec {graph_spec.name!r}), got none"
        )
    return [as_sample(item) for item in data]


def cuda_unavailable_reason(device: torch.device) -> str | None:
    """Why a CUDA ``device`` cannot be used on this machine, or None (also None for CPU)."""
    if device.type != "cuda":
        return None
    if not torch.cuda.is_available():
        return f"CUDA is not available on this machine (torch {torch.__version__}, device {device})"
    if device.index is not None and device.index >= torch.cuda.device_count():
        return f"no CUDA device {device} ({torch.cuda.device_count()} present)"
    return None


def inductor_unavailable_reason(device: torch.device) -> str | None:
    """Why TorchInductor cannot generate code for ``device`` here: no C++ compiler, no Triton."""
    if device.type == "cuda":
        if importlib.util.find_spec("triton") is None:
            return "TorchInductor needs Triton for CUDA, and triton is not installed"
        return None
    try:
        from torch._inductor.cpp_builder import get_cpp_compiler

        get_cpp_compiler()
    except Exception as exc:
        return f"TorchInductor needs a C++ compiler for CPU code and found none ({exc})"
    return None


def safe_folder_name(name: str) -> str:
    """``name`` as one folder name inside a cache dir: letters, digits, ``-`` and ``_`` only."""
    safe = "".join(ch if ch.isascii() and (ch.isalnum() or ch in "-_") else "_" for ch in name)
    return safe[:120] or "backend"


def check_autocast_dtype(dtype: torch.dtype | None) -> torch.dtype | None:
    """Return ``dtype`` if it is None, torch.bfloat16 or torch.float16 (an autocast dtype)."""
    return None if dtype is None else check_choice("dtype", dtype, _AUTOCAST_DTYPES)


def autocast_context(device: torch.device, dtype: torch.dtype | None, *, cache: bool = True) -> Any:
    """Return ``torch.autocast`` for ``device`` and ``dtype``, or a no-op context when dtype is None."""
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=dtype, cache_enabled=cache)


def config_value_to_json(name: str, value: object) -> Any:
    """Convert one configuration value to a JSON value (dtypes and devices become strings)."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise InvalidValueError(f"backend option {name} must be finite, got {value!r}")
        return value
    if isinstance(value, (torch.dtype, torch.device)):
        return str(value)
    if isinstance(value, enum.Enum):
        return config_value_to_json(name, value.value)
    if isinstance(value, (list, tuple)):
        return [config_value_to_json(f"{name}[{i}]", item) for i, item in enumerate(value)]
    if isinstance(value, Mapping):
        return {str(k): config_value_to_json(f"{name}[{k!r}]", v) for k, v in value.items()}
    raise InvalidTypeError(
        f"backend option {name} must be JSON-representable (None, bool, int, float, str, "
        f"torch.dtype, torch.device, list, dict), got {value!r} ({type(value).__name__})"
    )
