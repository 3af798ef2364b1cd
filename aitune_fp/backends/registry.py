"""The built-in backends by name, what each builds and where (torch-free): the CLI's table."""

from __future__ import annotations

import importlib
import types
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

import attrs

from aitune_fp.errors import InvalidValueError

if TYPE_CHECKING:
    from aitune_fp.backends.protocol import Backend

__all__ = [
    "BACKENDS",
    "DEVICE_KINDS",
    "BackendChoiceError",
    "BackendEntry",
    "backend_names",
    "check_backend",
    "check_settings",
    "default_backends",
    "make_backend",
    "make_candidate",
]

#: The device kinds a backend can declare: ``cuda:N`` devices are of kind ``cuda``.
DEVICE_KINDS: frozenset[str] = frozenset({"cpu", "cuda"})


class BackendChoiceError(InvalidValueError):
    """An unknown backend name or device kind, or a backend asked for on a device it cannot use."""


def _check_devices(
    instance: BackendEntry, attribute: attrs.Attribute[frozenset[str]], value: frozenset[str]
) -> None:
    """Reject device sets that are not frozensets of known device kinds."""
    if not isinstance(value, frozenset) or not value <= DEVICE_KINDS:
        raise InvalidValueError(
            f"BackendEntry.{attribute.name} must be a frozenset of {sorted(DEVICE_KINDS)}, "
            f"got {value!r}"
        )


@attrs.frozen
class BackendEntry:
    """One built-in backend: its ``--backends`` name, a no-argument factory, where it runs."""

    name: str = attrs.field(validator=attrs.validators.min_len(1))
    factory: Callable[..., Backend] = attrs.field(validator=attrs.validators.is_callable())
    devices: frozenset[str] = attrs.field(validator=_check_devices)
    default_on: frozenset[str] = attrs.field(validator=_check_devices)
    summary: str = ""
    #: Settings a sweep file may give this backend: name -> allowed values (passed to the
    #: factory as keyword arguments). Empty: the backend takes none.
    settings: Mapping[str, tuple[object, ...]] = attrs.field(factory=dict)

    def __attrs_post_init__(self) -> None:
        """Refuse an entry that runs nowhere or is a default where it cannot run."""
        if not self.devices:
            raise InvalidValueError(f"backend {self.name!r}: devices must not be empty")
        if not self.default_on <= self.devices:
            raise InvalidValueError(
                f"backend {self.name!r}: default_on {sorted(self.default_on)} is not a subset "
                f"of devices {sorted(self.devices)}"
            )


def _lazy(module: str, cls: str, *, dtype: str = "", **fixed: object) -> Callable[..., Backend]:
    """A factory for ``aitune_fp.backends.<module>.<cls>``, imported when called."""

    def factory(**settings: object) -> Backend:
        options = dict(fixed)
        if dtype:
            import torch

            options["dtype"] = getattr(torch, dtype)
        backend_cls = getattr(importlib.import_module(f"aitune_fp.backends.{module}"), cls)
        backend: Backend = backend_cls(**options, **settings)
        return backend

    factory.__qualname__ = factory.__name__ = cls
    return factory


_eager = _lazy("eager", "TorchEagerBackend")
_eager_bf16 = _lazy("eager", "TorchEagerBackend", dtype="bfloat16")
_eager_fp16 = _lazy("eager", "TorchEagerBackend", dtype="float16")
_compile = _lazy("compile", "TorchCompileBackend")
_compile_bf16 = _lazy("compile", "TorchCompileBackend", dtype="bfloat16")
_compile_max_autotune = _lazy("compile", "TorchCompileBackend", mode="max-autotune-no-cudagraphs")
_compile_reduce_overhead = _lazy("compile", "TorchCompileBackend", mode="reduce-overhead")
_cuda_graphs = _lazy("cuda_graph", "CudaGraphBackend")
_int8_dynamic = _lazy("quantized", "Int8DynamicBackend")
_int8_weight_only = _lazy("quantized", "Int8DynamicBackend", scheme="weight-only")
_channels_last = _lazy("channels_last", "ChannelsLastBackend")
_onnxruntime = _lazy("onnxruntime", "OnnxRuntimeBackend")
_aot_inductor = _lazy("aot_inductor", "AotInductorBackend")

_CPU = frozenset({"cpu"})
_ANY = frozenset({"cpu", "cuda"})
_CUDA = frozenset({"cuda"})
_NOWHERE: frozenset[str] = frozenset()
#: What ``torch.compile`` takes from a sweep file (its own option names and values).
_COMPILE_SETTINGS: Mapping[str, tuple[object, ...]] = types.MappingProxyType(
    {
        "mode": ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"),
        "dynamic": (True, False),
        "fullgraph": (True, False),
    }
)

# Order matters: it is the order of names in help and of the default candidates (first-wins tries
# them in this order).
_ENTRIES = (
    BackendEntry("eager", _eager, _ANY, _NOWHERE, "eager PyTorch (the baseline's configuration)"),
    BackendEntry("compile", _compile, _ANY, _ANY, "torch.compile, default mode", _COMPILE_SETTINGS),
    BackendEntry("eager-bf16", _eager_bf16, _ANY, _ANY, "eager PyTorch under bfloat16 autocast"),
    BackendEntry("eager-fp16", _eager_fp16, _ANY, _CUDA, "eager PyTorch under float16 autocast"),
    BackendEntry(
        "int8-dynamic", _int8_dynamic, _CPU, _CPU, "int8 dynamic quantization of Linear layers"
    ),
    BackendEntry(
        "int8-weight-only",
        _int8_weight_only,
        _ANY,
        _CUDA,
        "int8 weight-only quantization of Linear layers",
    ),
    BackendEntry(
        "channels-last", _channels_last, _ANY, _NOWHERE, "channels-last layout (conv models)"
    ),
    BackendEntry(
        "compile-bf16",
        _compile_bf16,
        _ANY,
        _NOWHERE,
        "torch.compile under bf16 autocast",
        _COMPILE_SETTINGS,
    ),
    BackendEntry(
        "compile-max-autotune",
        _compile_max_autotune,
        _ANY,
        _NOWHERE,
        "torch.compile mode=max-autotune-no-cudagraphs",
    ),
    BackendEntry(
        "onnxruntime", _onnxruntime, _ANY, _CUDA, "ONNX export run by ONNX Runtime (extra onnx)"
    ),
    BackendEntry(
        "aot-inductor", _aot_inductor, _ANY, _NOWHERE, "torch.export compiled ahead of time (AOTI)"
    ),
    BackendEntry("cuda-graphs", _cuda_graphs, _CUDA, _CUDA, "CUDA graph capture and replay"),
    BackendEntry(
        "compile-reduce-overhead",
        _compile_reduce_overhead,
        _CUDA,
        _CUDA,
        "torch.compile mode=reduce-overhead (CUDA graphs)",
    ),
)

#: The built-in backends, name -> entry, in help and default order. Read-only.
BACKENDS: Mapping[str, BackendEntry] = types.MappingProxyType({e.name: e for e in _ENTRIES})


def _device_kind(device: str) -> str:
    """``cpu`` or ``cuda`` for a device string (``cuda:1`` is ``cuda``); refuse anything else."""
    kind = device.partition(":")[0]
    if kind not in DEVICE_KINDS:
        raise BackendChoiceError(
            f"unknown device {device!r}; backends run on {', '.join(sorted(DEVICE_KINDS))}"
        )
    return kind


def backend_names() -> tuple[str, ...]:
    """Every built-in backend name, in registry order."""
    return tuple(BACKENDS)


def default_backends(device_kind: str) -> tuple[str, ...]:
    """The default candidate names on ``device_kind`` (``cpu``, ``cuda`` or ``cuda:N``)."""
    kind = _device_kind(device_kind)
    return tuple(name for name, entry in BACKENDS.items() if kind in entry.default_on)


def check_backend(name: str, device_kind: str) -> BackendEntry:
    """The entry for ``name`` if it exists and runs on ``device_kind``; else BackendChoiceError."""
    kind = _device_kind(device_kind)
    entry = _entry(name)
    if kind not in entry.devices:
        raise BackendChoiceError(
            f"backend {name!r} runs on {' or '.join(sorted(entry.devices))} only, not on {kind}"
        )
    return entry


def _entry(name: str) -> BackendEntry:
    """The entry for ``name``; BackendChoiceError naming the choices when there is none."""
    entry = BACKENDS.get(name)
    if entry is None:
        raise BackendChoiceError(
            f"unknown backend {name!r}; choose from {', '.join(backend_names())}"
        )
    return entry


def _same(a: object, b: object) -> bool:
    """Equal and of the same type (``1`` is not ``True``)."""
    return type(a) is type(b) and a == b


def check_settings(name: str, settings: Mapping[str, object]) -> None:
    """Refuse settings ``name`` does not take, or values it does not allow (BackendChoiceError)."""
    entry = _entry(name)
    for key, value in settings.items():
        allowed = entry.settings.get(key)
        if allowed is None:
            takes = ", ".join(entry.settings) or "none"
            raise BackendChoiceError(
                f"backend {name!r} has no setting {key!r} (settings it takes: {takes})"
            )
        if not any(_same(value, a) for a in allowed):
            raise BackendChoiceError(
                f"backend {name!r} setting {key!r} must be one of "
                f"{', '.join(repr(a) for a in allowed)}, got {value!r}"
            )


def make_backend(
    name: str, device_kind: str, settings: Mapping[str, object] | None = None
) -> Backend:
    """A new, unbuilt backend for ``name`` on ``device_kind``; BackendChoiceError if not allowed."""
    entry = check_backend(name, device_kind)
    check_settings(name, settings or {})
    return entry.factory(**(settings or {}))


def make_candidate(
    name: str, device_kind: str, settings: Mapping[str, object] | None = None
) -> Backend:
    """Like :func:`make_backend`, but a backend for another device comes back unavailable."""
    kind = _device_kind(device_kind)
    entry = BACKENDS.get(name)
    if entry is None or kind in entry.devices:
        return make_backend(name, device_kind, settings)
    check_settings(name, settings or {})
    import torch

    from aitune_fp.backends.base import UnavailableBackend

    where = " or ".join(sorted(entry.devices))
    reason = f"backend {name!r} runs on {where} only, and this tune runs on {kind}"
    if "cuda" in entry.devices and not torch.cuda.is_available():
        reason += " (no CUDA device on this machine)"
    return UnavailableBackend(entry.factory(**(settings or {})), reason)
