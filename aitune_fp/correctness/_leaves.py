"""Walking an output tree: its leaves and their paths, finiteness first, and what we refuse."""

from __future__ import annotations

import dataclasses
import math
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from aitune_fp._tree import object_children
from aitune_fp.correctness.failures import CorrectnessError

#: Python scalars compared exactly, and all the scalar types compared (float: with tolerances).
EXACT_SCALARS = (bool, int, str, bytes)
SCALARS = (*EXACT_SCALARS, float)


def as_tensor_if_array(value: Any) -> Any:
    """Convert a numpy array or scalar to a tensor (numpy only if already imported)."""
    numpy = sys.modules.get("numpy")
    if numpy is not None and isinstance(value, (numpy.ndarray, numpy.generic)):
        return torch.as_tensor(numpy.asarray(value))
    return value


def _reference_note(reference: Any) -> str:
    """Say whether eager's leaf at the same place is non-finite too (the model's own doing)."""
    ref = as_tensor_if_array(reference)
    if isinstance(ref, torch.Tensor) and (ref.is_floating_point() or ref.is_complex()):
        if not bool(torch.isfinite(ref).all()):
            return " (the eager reference is non-finite there too)"
        return " (the eager reference is finite there)"
    return ""


def check_finite_outputs(actual: Any, expected: Any, path: str) -> None:
    """Raise ``finite`` at the first tensor/float holding inf (checked first) or NaN."""
    for leaf_path, leaf in leaves(actual, path):
        leaf = as_tensor_if_array(leaf)
        if isinstance(leaf, torch.Tensor) and (leaf.is_floating_point() or leaf.is_complex()):
            data = leaf.detach()
            for label, mask in (("infinity", torch.isinf(data)), ("NaN", torch.isnan(data))):
                count = int(mask.sum())
                if count:
                    first = unravel(int(mask.reshape(-1).nonzero()[0]), tuple(data.shape))
                    raise CorrectnessError(
                        f"{leaf_path}: output tensor contains {label} values ({count} of "
                        f"{data.numel()} elements, first at index {first})"
                        f"{_reference_note(dict(leaves(expected, path)).get(leaf_path))}",
                        path=leaf_path,
                        check="finite",
                    )
        elif isinstance(leaf, float) and not math.isfinite(leaf):
            label = "NaN" if math.isnan(leaf) else "infinity"
            raise CorrectnessError(
                f"{leaf_path}: output float is {label} ({leaf!r})", path=leaf_path, check="finite"
            )


def leaves(value: Any, path: str = "output") -> list[tuple[str, Any]]:
    """All leaves of an output (see :func:`children`), each with its path."""
    found = children(value)
    if found is None:
        return [(path, value)]
    return [leaf for suffix, _, item in found[0] for leaf in leaves(item, f"{path}{suffix}")]


def children(value: Any) -> tuple[list[tuple[str, Any, Any]], Any] | None:
    """One level of an output tree: ``([(path suffix, key, child), ...], context)``, or None."""
    if isinstance(value, Mapping):
        return [(f"[{key!r}]", key, item) for key, item in value.items()], None
    if isinstance(value, (tuple, list)) and not isinstance(value, torch.Size):
        return [
            (item_path(value, "", index), index, item) for index, item in enumerate(value)
        ], None
    from torch.utils import _pytree

    node = _pytree.SUPPORTED_NODES.get(type(value))
    if node is not None:
        if node.flatten_with_keys_fn is not None:
            pairs, context = node.flatten_with_keys_fn(value)
            return [(str(key), key, item) for key, item in pairs], context
        items, context = node.flatten_fn(value)
        return [(f"[{index}]", index, item) for index, item in enumerate(items)], context
    attributes = object_children(value)
    if attributes is not None:
        return list(attributes), None
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return [
            (f".{field.name}", field.name, getattr(value, field.name))
            for field in dataclasses.fields(value)
        ], None
    return None


def item_path(container: Sequence[Any], path: str, index: int) -> str:
    """Path of a sequence item: ``.field`` for namedtuples, ``[i]`` otherwise."""
    fields = getattr(container, "_fields", None)
    if isinstance(container, tuple) and isinstance(fields, tuple) and index < len(fields):
        return f"{path}.{fields[index]}"
    return f"{path}[{index}]"


def same(a: Any, b: Any) -> bool:
    """``a == b`` as a bool; values that cannot say (tensors with several elements) count as same."""
    try:
        return bool(a == b)
    except Exception:
        return True


def kind(value: Any) -> str:
    """Describe a value's type for messages."""
    if isinstance(value, torch.Tensor):
        return f"tensor (dtype {value.dtype}, shape {tuple(value.shape)})"
    return type(value).__name__


def uncomparable(value: Any, path: str) -> CorrectnessError:
    """The error for an output leaf of a type nothing here can compare: its type and the fix."""
    cls = type(value)
    return CorrectnessError(
        f"{path}: cannot compare an output of type {cls.__module__}.{cls.__qualname__}: it is "
        "neither a tensor, a numpy array, None, bool, int, float, str or bytes, a container "
        "(tuple, list, namedtuple, mapping, dataclass) nor a registered pytree node. Register it "
        "so its tensors are compared: torch.utils._pytree.register_pytree_node("
        f"{cls.__qualname__}, flatten_fn, unflatten_fn), where flatten_fn(obj) returns "
        "(its tensors, its non-tensor part), with flatten_with_keys_fn for readable paths; or "
        "have the model return tensors (or a container of them) instead",
        path=path,
        check="type",
    )


def unravel(flat_index: int, shape: tuple[int, ...]) -> tuple[int, ...]:
    """Turn a flat (row-major) index into a tuple index for ``shape``."""
    index: list[int] = []
    for dim in reversed(shape):
        flat_index, rest = divmod(flat_index, dim)
        index.append(rest)
    return tuple(reversed(index))
