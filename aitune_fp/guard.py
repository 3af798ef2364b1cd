"""The user's model and samples, guarded: what a tune must leave unchanged, and how to put it back.

A :class:`ModelGuard` is taken before anything runs. It isolates the whole module object rather
than a list of known edits: for every submodule it keeps the class and the entire instance
``__dict__``. Plain values (numbers, strings, dtypes, devices, tuples of them) are kept by value;
dicts, lists and sets (``_modules``, ``_parameters``, ``_buffers``, every hook dict, a user's own
containers) by the object and a shallow copy of what they hold; anything else by identity. Every
tensor it reaches (parameters, buffers, tensors held in an attribute or one container deep) is
kept by identity with a host copy of its values, its dtype, shape and ``requires_grad``, so a
candidate that swaps one (as in-place quantization does), writes into it, casts it, flips its
``requires_grad``, adds a hook or an attribute, or replaces ``forward`` or ``__class__`` is found
and undone. Device moves are not changes: the tune itself moves the module.

A :class:`SampleGuard` does the same for the caller's samples: every tensor in them, nested ones
too, and the mutable lists and dicts that hold them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from aitune_fp.errors import InvalidStateError
from aitune_fp.inputs import Sample

__all__ = ["ModelGuard", "SampleGuard"]

#: Attributes torch itself sets on a module it wraps (``torch.compile(module)`` marks the module
#: with ``_is_torch_compile = True``). Not a change; left as they are.
_BENIGN = frozenset({"_is_torch_compile"})

#: The containers of a module's registered children, and what their entries are called.
_STRUCTURE = {"_modules": "submodule", "_parameters": "parameter", "_buffers": "buffer"}

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

_MISSING: Any = object()


def _same_bits(now: torch.Tensor, then: torch.Tensor) -> bool:
    """Whether two tensors of one dtype and shape hold the same bits (NaN equals itself).

    A byte compare through numpy: several times faster than ``torch.equal`` on CPU.
    """
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


def _is_value(value: object) -> bool:
    """Whether ``value`` is immutable and compared by value (see :data:`_VALUE_TYPES`)."""
    if isinstance(value, (tuple, frozenset)):
        return all(_is_value(item) for item in value)
    return isinstance(value, _VALUE_TYPES)


def _same(then: Any, now: Any) -> bool:
    """Whether ``now`` still is ``then``: the same object, or an equal value of the same type.

    Tuples compare item by item (so a tuple of modules compares their identities).
    """
    if then is now:
        return True
    if type(then) is not type(now):
        return False
    if isinstance(then, float):  # exact: -0.0 is not 0.0, NaN is NaN
        return bool(then.hex() == now.hex())
    if isinstance(then, tuple):
        return len(then) == len(now) and all(map(_same, then, now))
    return _is_value(then) and bool(then == now)


def _short(value: object) -> str:
    """A repr short enough for a one-line message."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _is_container(value: object) -> bool:
    """Whether ``value`` is a mutable container kept by a shallow copy of its contents."""
    return isinstance(value, (dict, list, set))


def _contents(container: Any) -> Any:
    """A shallow copy of a dict's items, a list's items or a set's members.

    An empty container gives ``()``: most hook dicts are empty, and not allocating for them keeps
    the snapshot of a many-module model fast (fewer objects, fewer garbage collections).
    """
    if not container:
        return ()
    if isinstance(container, dict):
        return list(container.items())
    if isinstance(container, list):
        return list(container)
    return set(container)


def _same_contents(container: Any, contents: Any) -> bool:
    """Whether ``container`` holds what :func:`_contents` copied (same keys, order and items)."""
    if len(container) != len(contents):
        return False
    if not contents:
        return True
    if isinstance(container, set):
        return bool(container == contents)
    if isinstance(container, dict):
        return all(
            k == j and _same(then, now)
            for (j, then), (k, now) in zip(contents, container.items(), strict=True)
        )
    return all(map(_same, contents, container))


def _put_back(container: Any, contents: Any) -> None:
    """Make ``container`` (the same object) hold ``contents`` again."""
    if isinstance(container, list):
        container[:] = contents
    else:
        container.clear()
        container.update(contents)


def _contents_change(container: object, contents: Any) -> str:
    """What differs between a container and its copy: the first entry added, removed, replaced."""
    if isinstance(container, dict):
        then = dict(contents)
        added = [k for k in container if k not in then]
        removed = [k for k in then if k not in container]
        if added:
            return f"entry {_short(added[0])} added"
        if removed:
            return f"entry {_short(removed[0])} removed"
        for key, value in container.items():
            if not _same(then[key], value):
                return f"entry {_short(key)} replaced"
        return "entries reordered"
    if isinstance(container, list):
        if len(container) != len(contents):
            return f"length changed {len(contents)} -> {len(container)}"
        index = next(
            i for i, (a, b) in enumerate(zip(contents, container, strict=True)) if not _same(a, b)
        )
        return f"item {index} replaced"
    return f"changed {_short(set(contents))} -> {_short(container)}"


def _hook_label(key: str) -> str:
    """The hook kind a hook dict holds: ``_forward_pre_hooks`` -> ``forward pre-hook``."""
    text = " ".join(key.strip("_").split("_"))
    for plural, singular in ((" pre hooks", " pre-hook"), (" post hooks", " post-hook")):
        text = text.replace(plural, singular)
    return text.replace(" hooks", " hook")


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


class _TensorState:
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


class _ModuleState:
    """One submodule: its class and its whole instance ``__dict__``."""

    __slots__ = ("attrs", "cls", "contents", "module", "where")

    def __init__(self, name: str, module: torch.nn.Module) -> None:
        self.where = name or "<root>"
        self.module = module
        self.cls = type(module)
        self.attrs = {k: v for k, v in vars(module).items() if k not in _BENIGN}
        self.contents = {k: _contents(v) for k, v in self.attrs.items() if _is_container(v)}

    def _now(self, key: str) -> Any:
        """The attribute's object now, or ``_MISSING``."""
        return vars(self.module).get(key, _MISSING)

    def structure_changed(self) -> str | None:
        """A changed class, or a registered submodule, parameter or buffer added/removed/swapped."""
        if type(self.module) is not self.cls:
            return (
                f"{self.where}: class changed {self.cls.__name__} -> {type(self.module).__name__}"
            )
        for key, kind in _STRUCTURE.items():
            if key not in self.attrs:
                continue
            now, then = self._now(key), dict(self.contents[key])
            if not isinstance(now, dict):
                return f"{self.where}: attribute {key!r} replaced"
            if now.keys() != then.keys():
                added = sorted(set(now) - set(then)) or sorted(set(then) - set(now))
                return f"{kind} {added[0]!r} of {self.where!r} was added or removed"
            for name, value in now.items():
                if value is not then[name]:
                    return f"{kind} {name!r} of {self.where!r} was replaced"
        return None

    def training_changed(self) -> str | None:
        """A flipped training flag."""
        then, now = self.attrs.get("training", _MISSING), self._now("training")
        if _same(then, now):
            return None
        return f"{self.where}: training flag changed {_short(then)} -> {_short(now)}"

    def attribute_changed(self) -> str | None:
        """Any other instance attribute added, removed or changed (hooks, forward, plain ones)."""
        now_attrs = vars(self.module)
        for key in now_attrs:
            if key not in self.attrs and key not in _BENIGN:
                return self._describe(key, _MISSING, now_attrs[key])
        for key, then in self.attrs.items():
            if key in _STRUCTURE or key == "training":
                continue
            now = now_attrs.get(key, _MISSING)
            if key in self.contents:
                if now is _MISSING or type(now) is not type(then):
                    return self._describe(key, then, now)
                if not _same_contents(now, self.contents[key]):
                    return self._describe_contents(key, now)
            elif not _same(then, now):
                return self._describe(key, then, now)
        return None

    def _describe(self, key: str, then: Any, now: Any) -> str:
        """One attribute added (``then`` missing), removed (``now`` missing) or replaced."""
        where = self.where
        if key == "forward":
            return f"{where}: forward replaced"
        if callable(getattr(self.cls, key, None)) and not key.startswith("__"):
            return f"{where}: method {key!r} replaced"
        if then is _MISSING:
            return f"{where}: attribute {key!r} added ({_short(now)})"
        if now is _MISSING:
            return f"{where}: attribute {key!r} removed"
        if _is_value(then) and _is_value(now):
            return f"{where}: attribute {key!r} changed {_short(then)} -> {_short(now)}"
        if isinstance(then, torch.Tensor):
            return f"{where}: tensor attribute {key!r} replaced"
        return f"{where}: attribute {key!r} replaced"

    def _describe_contents(self, key: str, now: Any) -> str:
        """A container attribute whose contents changed: for a hook dict, the hook kind."""
        contents = self.contents[key]
        if "hook" in key and isinstance(now, dict):
            then = dict(contents)
            label = _hook_label(key)
            if any(k not in then for k in now):
                return f"{self.where}: {label} added"
            if any(k not in now for k in then):
                return f"{self.where}: {label} removed"
            return f"{self.where}: {label} replaced or reordered"
        return f"{self.where}: attribute {key!r}: {_contents_change(now, contents)}"

    def restore(self, failures: list[str]) -> None:
        """Put back the class, every attribute object and every container's contents."""
        module = self.module
        if type(module) is not self.cls:
            try:
                module.__class__ = self.cls
            except TypeError as exc:
                failures.append(f"{self.where}: class {self.cls.__name__} not restored: {exc}")
        now_attrs = vars(module)
        for key in [k for k in now_attrs if k not in self.attrs and k not in _BENIGN]:
            del now_attrs[key]
        for key, then in self.attrs.items():
            if now_attrs.get(key, _MISSING) is not then:
                now_attrs[key] = then
            if key in self.contents and not _same_contents(then, self.contents[key]):
                _put_back(then, self.contents[key])

    def tensors(self) -> list[tuple[str, torch.Tensor]]:
        """Tensors held in an attribute other than ``_parameters``/``_buffers``, one level deep."""
        prefix = "" if self.where == "<root>" else self.where + "."
        found: list[tuple[str, torch.Tensor]] = []
        for key, value in self.attrs.items():
            if key in _STRUCTURE:
                continue
            if isinstance(value, torch.Tensor):
                found.append((prefix + key, value))
            elif isinstance(value, dict):
                found += [
                    (f"{prefix}{key}[{k!r}]", v)
                    for k, v in value.items()
                    if isinstance(v, torch.Tensor)
                ]
            elif isinstance(value, (list, tuple)):
                found += [
                    (f"{prefix}{key}[{i}]", v)
                    for i, v in enumerate(value)
                    if isinstance(v, torch.Tensor)
                ]
        return found


class ModelGuard:
    """A snapshot of a whole module object, to check and restore.

    It holds every submodule's class and ``__dict__`` and every tensor's values (see the module
    docstring for how each kind of value is kept).
    """

    def __init__(self, module: torch.nn.Module) -> None:
        """Take the snapshot now (a host copy of every tensor's values)."""
        self.module = module
        self._modules = [_ModuleState(name, m) for name, m in module.named_modules()]
        seen: set[int] = set()
        self._tensors: list[_TensorState] = []
        candidates = [
            *module.named_parameters(),
            *module.named_buffers(),
            *(found for state in self._modules for found in state.tensors()),
        ]
        for name, tensor in candidates:
            if id(tensor) not in seen:
                seen.add(id(tensor))
                self._tensors.append(_TensorState(name, tensor))

    def changed(self) -> str | None:
        """What differs from the snapshot (the first thing found, named), or None."""
        for check in (
            _ModuleState.structure_changed,
            _ModuleState.training_changed,
            _ModuleState.attribute_changed,
        ):
            for state in self._modules:
                what = check(state)
                if what is not None:
                    return what
        for tensor in self._tensors:
            what = tensor.changed()
            if what is not None:
                return f"tensor {tensor.name!r} {what}"
        return None

    def restore(self) -> None:
        """Put back every class, attribute, container, tensor value and flag the snapshot holds.

        Raises:
            InvalidStateError: something could not be put back (named); the rest was.
        """
        failures: list[str] = []
        for state in self._modules:
            state.restore(failures)
        for tensor in self._tensors:
            tensor.restore(failures)
        if failures:
            raise InvalidStateError("the model could not be fully restored: " + "; ".join(failures))

    @staticmethod
    def training_modules(module: torch.nn.Module) -> list[Any]:
        """The submodules (the module included) that are in training mode."""
        return [m for m in module.modules() if m.training]


class _ContainerState:
    """A list or dict inside a sample: the object and a shallow copy of its contents."""

    __slots__ = ("container", "contents", "label")

    def __init__(self, label: str, container: list[Any] | dict[Any, Any]) -> None:
        self.label = label
        self.container = container
        self.contents = _contents(container)

    def changed(self) -> str | None:
        """The first entry added, removed or replaced, named; or None."""
        if _same_contents(self.container, self.contents):
            return None
        return f"{self.label}: {_contents_change(self.container, self.contents)}"

    def restore(self, failures: list[str]) -> None:
        """Make the same container hold its snapshot entries again."""
        if not _same_contents(self.container, self.contents):
            _put_back(self.container, self.contents)


class _SampleFields:
    """A :class:`Sample`'s ``args`` and ``kwargs`` objects (frozen, but not beyond reach)."""

    __slots__ = ("args", "kwargs", "label", "sample")

    def __init__(self, label: str, sample: Sample) -> None:
        self.label = label
        self.sample = sample
        self.args, self.kwargs = sample.args, sample.kwargs

    def changed(self) -> str | None:
        """Which field was swapped for another object, or None."""
        for field in ("args", "kwargs"):
            if getattr(self.sample, field) is not getattr(self, field):
                return f"{self.label}: {field} replaced"
        return None

    def restore(self, failures: list[str]) -> None:
        """Put the original ``args`` and ``kwargs`` objects back (past the frozen class)."""
        for field in ("args", "kwargs"):
            if getattr(self.sample, field) is not getattr(self, field):
                object.__setattr__(self.sample, field, getattr(self, field))


class _SampleTensor(_TensorState):
    """A tensor inside a sample, named by where it sits."""

    __slots__ = ()

    def changed(self) -> str | None:
        """What changed, prefixed with where the tensor sits in the samples."""
        what = super().changed()
        return None if what is None else f"{self.name}: {what}"


def _is_pair(value: object) -> bool:
    """Whether ``value`` is an ``(args, kwargs)`` pair, as ``as_sample`` reads one."""
    return (
        isinstance(value, tuple)
        and len(value) == 2
        and isinstance(value[0], (tuple, list))
        and isinstance(value[1], Mapping)
    )


class SampleGuard:
    """A snapshot of the caller's samples, to check and restore.

    Every tensor in them (positional and keyword arguments, nested in tuples, lists and dicts) is
    kept by identity with a host copy of its values, dtype, shape and ``requires_grad``; every
    mutable list and dict by a shallow copy of its contents; a :class:`Sample`'s ``args`` and
    ``kwargs`` by identity. Samples may be :class:`Sample` objects, ``(args, kwargs)`` pairs,
    tensors, or tuples, lists and dicts of them.
    """

    def __init__(self, samples: Sequence[Any]) -> None:
        """Take the snapshot now (a host copy of every tensor's values)."""
        self.samples = samples
        self._states: list[_SampleFields | _ContainerState | _SampleTensor] = []
        self._seen: set[int] = set()
        for i, sample in enumerate(samples):
            self._walk(sample, f"sample {i}")
        del self._seen

    def _walk(self, value: Any, label: str) -> None:
        """Record ``value`` (a tensor, or the containers and tensors it holds) under ``label``."""
        if isinstance(value, torch.Tensor):
            if id(value) not in self._seen:
                self._seen.add(id(value))
                self._states.append(_SampleTensor(label, value))
            return
        if isinstance(value, (list, dict, tuple, Sample)):
            if id(value) in self._seen:  # shared, or a cycle
                return
            self._seen.add(id(value))
        if isinstance(value, Sample) or _is_pair(value):
            if isinstance(value, Sample):
                self._states.append(_SampleFields(label, value))
                args, kwargs = value.args, value.kwargs
            else:
                args, kwargs = value
                self._walk_container(args, f"{label}, args")
                self._walk_container(kwargs, f"{label}, kwargs")
            for index, arg in enumerate(args):
                self._walk(arg, f"{label}, arg {index}")
            for key, kwarg in kwargs.items():
                self._walk(kwarg, f"{label}, kwarg {key!r}")
            return
        self._walk_container(value, label)
        if isinstance(value, (list, tuple)):
            for index, item in enumerate(value):
                self._walk(item, f"{label}[{index}]")
        elif isinstance(value, Mapping):
            for key, item in value.items():
                self._walk(item, f"{label}[{key!r}]")

    def _walk_container(self, value: Any, label: str) -> None:
        """Record a mutable list or dict's contents (an immutable container needs nothing)."""
        if isinstance(value, (list, dict)):
            self._states.append(_ContainerState(label, value))

    def changed(self) -> str | None:
        """The first input that differs from the snapshot, named, or None."""
        for state in self._states:
            what = state.changed()
            if what is not None:
                return what
        return None

    def restore(self) -> None:
        """Put back every container entry, then every tensor's values, dtype and flag, in place.

        Raises:
            InvalidStateError: something could not be put back (named); the rest was.
        """
        failures: list[str] = []
        for state in self._states:
            state.restore(failures)
        if failures:
            raise InvalidStateError(
                "the samples could not be fully restored: " + "; ".join(failures)
            )
