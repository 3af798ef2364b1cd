"""Nested inputs and outputs (pytree's, and transformers' caches): map, copy, find the device."""

from __future__ import annotations

import copy
import sys
from collections.abc import Callable, Mapping
from typing import Any

import torch


def _is_namedtuple(value: object) -> bool:
    """Tell a namedtuple instance from a plain tuple (it has ``_fields`` and ``_make``)."""
    return isinstance(value, tuple) and hasattr(value, "_fields") and hasattr(value, "_make")


def _rebuild(value: Any, tensor: Callable[[torch.Tensor], Any], leaf: Callable[[Any], Any]) -> Any:
    """``value`` rebuilt through tuples, lists and mappings: ``tensor`` on tensors, ``leaf`` on the rest."""
    if isinstance(value, torch.Tensor):
        return tensor(value)
    if _is_namedtuple(value):
        return type(value)._make(_rebuild(item, tensor, leaf) for item in value)
    if isinstance(value, tuple):
        return tuple(_rebuild(item, tensor, leaf) for item in value)
    if isinstance(value, list):
        return [_rebuild(item, tensor, leaf) for item in value]
    if isinstance(value, Mapping):
        items = {key: _rebuild(item, tensor, leaf) for key, item in value.items()}
        if type(value) is dict:
            return items
        factory: Any = type(value)
        try:
            return factory(items)
        except TypeError:
            return items
    return leaf(value)


def map_tensors(fn: Callable[[torch.Tensor], Any], value: Any) -> Any:
    """Rebuild ``value`` with ``fn`` applied to every tensor inside tuples, lists and mappings."""
    return _rebuild(value, fn, lambda leaf: leaf)


def clone_value(value: Any) -> Any:
    """Return a deep copy of ``value``; tensors are detached and cloned (deepcopy refuses non-leaves)."""
    return _rebuild(value, lambda tensor: tensor.detach().clone(), copy.deepcopy)


def clone_inputs(
    args: tuple[Any, ...], kwargs: Mapping[str, Any]
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """Return fresh copies of call arguments so a call can never mutate the caller's inputs."""
    return tuple(clone_value(item) for item in args), {
        key: clone_value(item) for key, item in kwargs.items()
    }


def to_device(value: Any, device: torch.device) -> Any:
    """Return ``value`` with every tensor moved to ``device`` (tensors already there are kept)."""
    return map_tensors(lambda tensor: tensor.to(device), value)


def module_device(module: torch.nn.Module) -> torch.device | None:
    """Return the device of the module's first parameter or buffer, or None when it has neither."""
    first: torch.Tensor | None = next(iter(module.parameters()), None)
    if first is None:
        first = next(iter(module.buffers()), None)
    return None if first is None else first.device


def shape_signature(value: Any) -> tuple[Any, ...]:
    """Return a hashable description of a nested value: tensor shapes/dtypes/devices, other leaves."""
    if isinstance(value, torch.Tensor):
        return ("tensor", tuple(value.shape), str(value.dtype), str(value.device))
    if isinstance(value, tuple):
        return (type(value).__name__, tuple(shape_signature(item) for item in value))
    if isinstance(value, list):
        return ("list", tuple(shape_signature(item) for item in value))
    if isinstance(value, Mapping):
        return (
            "mapping",
            tuple((repr(key), shape_signature(item)) for key, item in value.items()),
        )
    if value is None or isinstance(value, (bool, int, float, str, bytes)):
        return ("value", type(value).__name__, value)
    return ("object", type(value).__qualname__, repr(value))


def flatten_tensors(value: Any) -> list[torch.Tensor]:
    """Return the tensors inside ``value`` in the order :func:`map_tensors` visits them."""
    found: list[torch.Tensor] = []

    def visit(tensor: torch.Tensor) -> torch.Tensor:
        found.append(tensor)
        return tensor

    map_tensors(visit, value)
    return found


def _holds_tensors(value: Any, depth: int = 0) -> bool:
    """Whether ``value`` is a tensor, a known cache object, or a container holding one."""
    if isinstance(value, torch.Tensor) or _cache_kind(value) is not None:
        return True
    if depth >= 3:
        return False
    if isinstance(value, Mapping):
        return any(_holds_tensors(item, depth + 1) for item in value.values())
    if isinstance(value, (tuple, list)):
        return any(_holds_tensors(item, depth + 1) for item in value)
    return False


def _cache_kind(value: Any) -> str | None:
    """``"cache"`` or ``"layer"`` for transformers' cache objects, else None."""
    cache_utils = sys.modules.get("transformers.cache_utils")
    if cache_utils is None:
        return None
    cache = getattr(cache_utils, "Cache", None)
    if isinstance(cache, type) and isinstance(value, cache):
        return "cache"
    layers = tuple(
        cls
        for name in ("CacheLayerMixin", "LinearAttentionCacheLayerMixin")
        if isinstance(cls := getattr(cache_utils, name, None), type)
    )
    if layers and isinstance(value, layers):
        return "layer"
    return None


def object_children(value: Any) -> list[tuple[str, str, Any]] | None:
    """The tensor-holding attributes of a cache object that is not a pytree node, or None."""
    if _cache_kind(value) is None:
        return None
    state = getattr(value, "__dict__", None)
    if not isinstance(state, dict):
        return None
    return [
        (f".{name}", name, item)
        for name, item in state.items()
        if isinstance(name, str) and not name.startswith("_") and _holds_tensors(item)
    ]
