"""What crosses from a worker process to the judging one: plain data, never code.

How messages and outputs are read back with no code of the worker's running: docs/architecture.md.
"""

from __future__ import annotations

import collections
import hashlib
import io
import pickle
from collections.abc import Iterable, Mapping
from typing import Any

from aitune_fp.errors import InvalidTypeError

_BUILTIN: dict[str, Any] = {"builtins:tuple": tuple, "builtins:list": list, "builtins:dict": dict}


class _Restricted(pickle.Unpickler):
    """Unpickles plain values only: containers, numbers, text, bytes and torch dtypes."""

    def find_class(self, module: str, name: str) -> Any:
        import torch

        if module == "torch" and isinstance(getattr(torch, name, None), torch.dtype):
            return getattr(torch, name)
        raise pickle.UnpicklingError(f"a worker may send plain values only, not {module}.{name}")


def loads(data: bytes) -> Any:
    return _Restricted(io.BytesIO(data)).load()


def _name(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


def _encode(value: Any) -> Any:
    """In the worker: an output as plain data (tensors, lists, dicts, text), types by name."""
    import torch

    if isinstance(value, torch.Tensor) and value.requires_grad:  # the flag, not the graph
        return ["grad", value.detach()]
    if isinstance(value, (torch.Tensor, torch.dtype, torch.Size, str, bytes, int, float)):
        return value
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, torch.device):
        return ["device", str(value)]
    cls = type(value)
    if isinstance(value, Mapping):
        state = getattr(value, "__dict__", {}) if cls is not dict else {}
        return ["mapping", _name(cls), _pairs(value), _pairs(state)]
    if isinstance(value, (tuple, list)):
        return ["sequence", _name(cls), [_encode(v) for v in value]]
    state = getattr(value, "__dict__", None)
    if not isinstance(state, dict):
        raise InvalidTypeError(f"an output of type {_name(cls)} cannot be carried (no __dict__)")
    return ["object", _name(cls), _pairs(state)]


def _pairs(mapping: Mapping[Any, Any]) -> list[list[Any]]:
    return [[_encode(k), _encode(v)] for k, v in mapping.items()]


def _decode(value: Any, allowed: Mapping[str, type]) -> Any:
    """In the parent: the plain data as objects of ``allowed`` types; none of their code runs."""
    import torch

    if not isinstance(value, list):
        return value
    kind, *rest = value
    if kind == "device":
        return torch.device(rest[0])
    if kind == "grad" and isinstance(rest[0], torch.Tensor) and rest[0].is_floating_point():
        return rest[0].requires_grad_(True)

    def of(name: str) -> Any:
        if name in _BUILTIN:
            return _BUILTIN[name]
        if name not in allowed:
            raise pickle.UnpicklingError(f"{name.replace(':', '.')} is not among eager's outputs")
        return allowed[name]

    def pairs(encoded: list[list[Any]]) -> list[tuple[Any, Any]]:
        return [(_decode(k, allowed), _decode(v, allowed)) for k, v in encoded]

    made: Any
    if kind == "sequence":
        cls, items = of(rest[0]), [_decode(v, allowed) for v in rest[1]]
        if cls in (tuple, list):
            return cls(items)
        if issubclass(cls, tuple):
            return tuple.__new__(cls, items)
        made = list.__new__(cls)
        list.extend(made, items)
        return made
    if kind == "mapping":
        cls = of(rest[0])
        if cls is dict:
            return dict(pairs(rest[1]))
        base: Any = collections.OrderedDict if issubclass(cls, collections.OrderedDict) else dict
        made = base.__new__(cls)
        for k, v in pairs(rest[1]):
            base.__setitem__(made, k, v)  # the builtin's: none of the class's own code runs
        made.__dict__.update(pairs(rest[2]))
        return made
    if kind == "object":
        made = object.__new__(of(rest[0]))
        made.__dict__.update(pairs(rest[1]))
        return made
    raise pickle.UnpicklingError(f"unknown output part {kind!r}")


def _tensor(dtype: Any, shape: tuple[int, ...], data: bytes, grad: bool) -> Any:
    """A CPU tensor of ``dtype`` and ``shape`` remade from its raw bytes (in the worker)."""
    import torch

    made = torch.empty(shape, dtype=dtype)  # torch's own allocation, as a loaded tensor's
    if data:
        made.reshape(-1).view(torch.uint8).copy_(
            torch.frombuffer(bytearray(data), dtype=torch.uint8)
        )
    return made.requires_grad_(grad)


def _row_major(shape: tuple[int, ...]) -> tuple[int, ...]:
    """The strides of a contiguous tensor of ``shape``, as torch makes them."""
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= max(size, 1)
    return tuple(reversed(strides))


class _RawTensors(pickle.Pickler):
    """Pickles a contiguous CPU tensor as its raw bytes: a tenth of ``torch.save``'s cost."""

    def reducer_override(self, obj: Any) -> Any:
        import torch

        if (
            type(obj) is not torch.Tensor
            or obj.device.type != "cpu"
            or obj.is_quantized
            or obj.stride() != _row_major(obj.shape)
            or obj.grad_fn is not None
        ):
            return NotImplemented
        data = obj.detach().reshape(-1).view(torch.uint8).numpy().tobytes() if obj.numel() else b""
        return _tensor, (obj.dtype, tuple(obj.shape), data, obj.requires_grad)


def dump_samples(samples: Iterable[Any], lead: bool) -> bytes:
    """The judge's inputs for a worker's block, and whether it leads (the worker trusts them)."""
    buffer = io.BytesIO()
    _RawTensors(buffer, protocol=pickle.HIGHEST_PROTOCOL).dump(
        ([(s.args, dict(s.kwargs)) for s in samples], lead)
    )
    return buffer.getvalue()


def load_samples(data: bytes) -> tuple[list[tuple[tuple[Any, ...], dict[str, Any]]], bool]:
    """In the worker: the (args, kwargs) of each of a block's samples, and whether it leads."""
    loaded: tuple[list[tuple[tuple[Any, ...], dict[str, Any]]], bool] = pickle.loads(data)
    return loaded


def dump_output(output: Any) -> bytes:
    """An output as ``torch.save`` bytes of its plain form (read back with ``weights_only``)."""
    import torch

    buffer = io.BytesIO()
    torch.save(_encode(output), buffer)
    return buffer.getvalue()


def load_output(data: bytes, allowed: Iterable[type]) -> Any:
    """An output a worker sent: tensors and plain data only, objects of the ``allowed`` types."""
    import torch

    plain = torch.load(io.BytesIO(data), weights_only=True)
    return _decode(plain, {_name(cls): cls for cls in allowed})


def _tensors(value: Any, seen: set[int]) -> list[Any]:
    """Every tensor in an output, in a fixed order (containers and objects' attributes)."""
    import torch

    if isinstance(value, torch.Tensor):
        return [value]
    if id(value) in seen or isinstance(value, (str, bytes, int, float, type(None))):
        return []
    seen.add(id(value))
    if isinstance(value, Mapping):
        items: Any = value.values()
    elif isinstance(value, (tuple, list)):
        items = value
    else:
        items = getattr(value, "__dict__", {}).values()
    return [t for item in items for t in _tensors(item, seen)]


def digest_of(output: Any, nonce: bytes) -> bytes:
    """A 16-byte hash, keyed by ``nonce``, of each tensor's dtype, shape and every value.

    Made inside a timed block, before its answer, with the nonce its request brought: an output
    read later must match, so none is made after the answer, even in part. Each tensor's bytes
    are read as 32-bit words, each mixed (times an odd key, xor its shift) and summed: one
    vectorised pass (about 9 us for 8,192 floats), which no part of the values can give.
    """
    import numpy as np
    import torch

    digest = hashlib.blake2b(key=nonce, digest_size=16)
    key = np.uint32(int.from_bytes(nonce[:4], "little") | 1)
    for t in _tensors(output, set()):
        value = t.detach()
        digest.update(f"{value.dtype}{tuple(value.shape)}".encode())
        if value.device.type != "cpu" or not value.is_contiguous():
            value = value.cpu().contiguous()
        try:  # NumPy's own view where it has the dtype (cheaper), else torch's bytes
            raw = value.numpy().reshape(-1).view(np.uint8)
        except (TypeError, RuntimeError):  # bfloat16, a conjugate view
            raw = value.resolve_conj().resolve_neg().view(-1).view(torch.uint8).numpy()
        if raw.size % 4:
            raw = np.concatenate([raw, np.zeros(4 - raw.size % 4, np.uint8)])
        words = raw.view(np.uint32) * key
        words ^= words >> np.uint32(15)
        digest.update(int(words.sum(dtype=np.uint64)).to_bytes(8, "little"))
    return digest.digest()
