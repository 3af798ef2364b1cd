"""What a guard keeps of one value, container or tensor, and how it compares and puts it back."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

#: Types whose instances are immutable values, compared by value (tuples and frozensets of them
#: too).
_VALUE_TYPES = (
    type(None),
    bool,
    int,
    float,
    complex,
    str,
    bytes,
    torch.dtype,
    torch.device,
    torch.layout,
    torch.memory_format,
)

MISSING: Any = object()


def _same_bits(now: torch.Tensor, then: torch.Tensor) -> bool:
    """Whether two same-shape tensors hold the same bits (NaN equals itself), via numpy (fast)."""
    try:
        a = now.detach().reshape(-1).contiguous().view(torch.uint8).numpy()
        b = then.reshape(-1).contiguous().view(torch.uint8).numpy()
    except (RuntimeError, TypeError):  # dtypes without a byte view (quantized, sparse)
        return torch.equal(now, then)
    if a.size % 8 == 0:  # compare 8 bytes at a time
        a, b = a.view(np.uint64), b.view(np.uint64)
    return bool(np.array_equal(a, b))


def _max_abs_diff(now: torch.Tensor, then: torch.Tensor) -> str:
    try:
        diff = (now.detach().to("cpu", torch.float64) - then.to(torch.float64)).abs().max()
        return f" (max |Δ| {float(diff):.3g})"
    except (RuntimeError, TypeError):
        return ""


def is_value(value: object) -> bool:
    """Whether ``value`` is immutable and compared by value (see :data:`_VALUE_TYPES`)."""
    if isinstance(value, (tuple, frozenset)):
        return all(is_value(item) for item in value)
    return isinstance(value, _VALUE_TYPES)


def same_value(then: Any, now: Any) -> bool:
    """Whether ``now`` still is ``then``: the same object, or an equal value (tuples by item)."""
    if then is now:
        return True
    if type(then) is not type(now):
        return False
    if isinstance(then, float):  # exact: -0.0 is not 0.0, NaN is NaN
        return bool(then.hex() == now.hex())
    if isinstance(then, tuple):
        return len(then) == len(now) and all(map(same_value, then, now))
    return is_value(then) and bool(then == now)


def short_repr(value: object) -> str:
    """A repr short enough for a one-line message."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def is_container(value: object) -> bool:
    """Whether ``value`` is a mutable container kept by a shallow copy of its contents."""
    return isinstance(value, (dict, list, set))


def contents_of(container: Any) -> Any:
    """A shallow copy of a container's contents; ``()`` when empty (most hook dicts, kept cheap)."""
    if not container:
        return ()
    if isinstance(container, dict):
        return list(container.items())
    if isinstance(container, list):
        return list(container)
    return set(container)


def same_contents(container: Any, contents: Any) -> bool:
    """Whether ``container`` holds what :func:`contents_of` copied (same keys, order and items)."""
    if len(container) != len(contents):
        return False
    if not contents:
        return True
    if isinstance(container, set):
        return bool(container == contents)
    if isinstance(container, dict):
        return all(
            k == j and same_value(then, now)
            for (j, then), (k, now) in zip(contents, container.items(), strict=True)
        )
    return all(map(same_value, contents, container))


def put_back(container: Any, contents: Any) -> None:
    """Make ``container`` (the same object) hold ``contents`` again."""
    if isinstance(container, list):
        container[:] = contents
    else:
        container.clear()
        container.update(contents)


def contents_change(container: object, contents: Any) -> str:
    """What differs between a container and its copy: the first entry added, removed, replaced."""
    if isinstance(container, dict):
        then = dict(contents)
        added = [k for k in container if k not in then]
        removed = [k for k in then if k not in container]
        if added:
            return f"entry {short_repr(added[0])} added"
        if removed:
            return f"entry {short_repr(removed[0])} removed"
        for key, value in container.items():
            if not same_value(then[key], value):
                return f"entry {short_repr(key)} replaced"
        return "entries reordered"
    if isinstance(container, list):
        if len(container) != len(contents):
            return f"length changed {len(contents)} -> {len(container)}"
        index = next(
            i
            for i, (a, b) in enumerate(zip(contents, container, strict=True))
            if not same_value(a, b)
        )
        return f"item {index} replaced"
    return f"changed {short_repr(set(contents))} -> {short_repr(container)}"


def _host_copy(tensor: torch.Tensor) -> torch.Tensor | None:
    """A host copy of a tensor's values, or None for one that has none (a meta tensor)."""
    try:
        return tensor.detach().to("cpu", copy=True)
    except (RuntimeError, NotImplementedError, TypeError):
        return None


def _set_data(tensor: torch.Tensor, data: torch.Tensor) -> None:
    """Give ``tensor`` (the same object) new data, even of another tensor type (from meta)."""
    try:
        tensor.data = data
    except RuntimeError:  # `.data` refuses another tensor type: swap the object's contents
        kept = dict(vars(tensor))
        if isinstance(tensor, torch.nn.Parameter):
            data = torch.nn.Parameter(data, requires_grad=tensor.requires_grad)
        torch.utils.swap_tensors(tensor, data)  # type: ignore[no-untyped-call]
        vars(tensor).update(kept)


class TensorState:
    """One tensor: the object, a host copy of its values, its device and ``requires_grad``."""

    __slots__ = ("copy", "device", "name", "requires_grad", "tensor")

    def __init__(self, name: str, tensor: torch.Tensor) -> None:
        self.name = name
        self.tensor = tensor
        self.copy = _host_copy(tensor)
        self.device = tensor.device
        self.requires_grad = tensor.requires_grad

    def _now(self) -> torch.Tensor | None:
        """The tensor's values on the host now, or None when they cannot be read (meta)."""
        try:
            return self.tensor.detach().to("cpu")
        except (RuntimeError, NotImplementedError):
            return None

    def changed(self) -> str | None:
        """What changed in the tensor (dtype or shape, values, requires_grad), or None."""
        tensor, copy = self.tensor, self.copy
        if copy is not None:
            if tensor.dtype != copy.dtype or tensor.shape != copy.shape:
                return (
                    f"changed from {copy.dtype} {tuple(copy.shape)} to "
                    f"{tensor.dtype} {tuple(tensor.shape)}"
                )
            now = self._now()
            if now is None:
                return f"values can no longer be read (now on {tensor.device})"
            if not _same_bits(now, copy):
                return f"values changed{_max_abs_diff(now, copy)}"
        if tensor.requires_grad != self.requires_grad:
            return f"requires_grad changed {self.requires_grad} -> {tensor.requires_grad}"
        return None

    def restore(self, failures: list[str]) -> None:
        """Put the values, dtype and ``requires_grad`` back into the same tensor object."""
        tensor, copy = self.tensor, self.copy
        try:
            if copy is not None:
                now = None
                if tensor.dtype == copy.dtype and tensor.shape == copy.shape:
                    now = self._now()
                if now is None:  # cast, reshaped or unreadable: new data, on a usable device
                    device = tensor.device if tensor.device.type != "meta" else self.device
                    # a copy of the copy: the tensor must never share memory with the snapshot
                    _set_data(tensor, copy.to(device, copy=True))
                elif not _same_bits(now, copy):
                    with torch.inference_mode() if tensor.is_inference() else torch.no_grad():
                        tensor.copy_(copy)
            if tensor.requires_grad != self.requires_grad:
                tensor.requires_grad_(self.requires_grad)
        except RuntimeError as exc:
            failures.append(f"{self.name}: {exc}")


class ContainerState:
    """A list or dict inside a sample: the object and a shallow copy of its contents."""

    __slots__ = ("container", "contents", "label")

    def __init__(self, label: str, container: list[Any] | dict[Any, Any]) -> None:
        self.label = label
        self.container = container
        self.contents = contents_of(container)

    def changed(self) -> str | None:
        """The first entry added, removed or replaced, named; or None."""
        if same_contents(self.container, self.contents):
            return None
        return f"{self.label}: {contents_change(self.container, self.contents)}"

    def restore(self, failures: list[str]) -> None:
        """Make the same container hold its snapshot entries again."""
        if not same_contents(self.container, self.contents):
            put_back(self.container, self.contents)
