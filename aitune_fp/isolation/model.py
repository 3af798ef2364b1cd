"""The model and sample guards: the caller's objects kept before a tune, checked and restored after.

Also one tune per module object at a time (``exclusive_module``).
"""

from __future__ import annotations

import contextlib
import threading
import weakref
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import torch

from aitune_fp.errors import InvalidStateError
from aitune_fp.inputs import Sample, is_pair
from aitune_fp.isolation.values import (
    MISSING,
    ContainerState,
    TensorState,
    contents_change,
    contents_of,
    is_container,
    is_value,
    put_back,
    same_contents,
    same_value,
    short_repr,
)

#: Attributes torch itself sets on a module it wraps (``torch.compile(module)`` marks the module
#: with ``_is_torch_compile = True``). Not a change; left as they are.
_BENIGN = frozenset({"_is_torch_compile"})

#: The containers of a module's registered children, and what their entries are called.
_STRUCTURE = {"_modules": "submodule", "_parameters": "parameter", "_buffers": "buffer"}


def _hook_label(key: str) -> str:
    """The hook kind a hook dict holds: ``_forward_pre_hooks`` -> ``forward pre-hook``."""
    text = " ".join(key.strip("_").split("_"))
    for plural, singular in ((" pre hooks", " pre-hook"), (" post hooks", " post-hook")):
        text = text.replace(plural, singular)
    return text.replace(" hooks", " hook")


class _ModuleState:
    """One submodule: its class and its whole instance ``__dict__``."""

    __slots__ = ("attrs", "cls", "contents", "module", "where")

    def __init__(self, name: str, module: torch.nn.Module) -> None:
        self.where = name or "<root>"
        self.module = module
        self.cls = type(module)
        self.attrs = {k: v for k, v in vars(module).items() if k not in _BENIGN}
        self.contents = {k: contents_of(v) for k, v in self.attrs.items() if is_container(v)}

    def _now(self, key: str) -> Any:
        """The attribute's object now, or ``MISSING``."""
        return vars(self.module).get(key, MISSING)

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
        then, now = self.attrs.get("training", MISSING), self._now("training")
        if same_value(then, now):
            return None
        return f"{self.where}: training flag changed {short_repr(then)} -> {short_repr(now)}"

    def attribute_changed(self) -> str | None:
        """Any other instance attribute added, removed or changed (hooks, forward, plain ones)."""
        now_attrs = vars(self.module)
        for key in now_attrs:
            if key not in self.attrs and key not in _BENIGN:
                return self._describe(key, MISSING, now_attrs[key])
        for key, then in self.attrs.items():
            if key in _STRUCTURE or key == "training":
                continue
            now = now_attrs.get(key, MISSING)
            if key in self.contents:
                if now is MISSING or type(now) is not type(then):
                    return self._describe(key, then, now)
                if not same_contents(now, self.contents[key]):
                    return self._describe_contents(key, now)
            elif not same_value(then, now):
                return self._describe(key, then, now)
        return None

    def _describe(self, key: str, then: Any, now: Any) -> str:
        """One attribute added (``then`` missing), removed (``now`` missing) or replaced."""
        where = self.where
        if key == "forward":
            return f"{where}: forward replaced"
        if callable(getattr(self.cls, key, None)) and not key.startswith("__"):
            return f"{where}: method {key!r} replaced"
        if then is MISSING:
            return f"{where}: attribute {key!r} added ({short_repr(now)})"
        if now is MISSING:
            return f"{where}: attribute {key!r} removed"
        if is_value(then) and is_value(now):
            return f"{where}: attribute {key!r} changed {short_repr(then)} -> {short_repr(now)}"
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
        return f"{self.where}: attribute {key!r}: {contents_change(now, contents)}"

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
            if now_attrs.get(key, MISSING) is not then:
                now_attrs[key] = then
            if key in self.contents and not same_contents(then, self.contents[key]):
                put_back(then, self.contents[key])

    def tensors(self) -> list[tuple[str, torch.Tensor]]:
        """Tensors held in an attribute other than ``_parameters``/``_buffers``, one level deep."""
        prefix = "" if self.where == "<root>" else self.where + "."
        found: list[tuple[str, object]] = []
        for key, value in self.attrs.items():
            if isinstance(value, dict) and key not in _STRUCTURE:
                found += [(f"{prefix}{key}[{k!r}]", v) for k, v in value.items()]
            elif isinstance(value, (list, tuple)):
                found += [(f"{prefix}{key}[{i}]", v) for i, v in enumerate(value)]
            else:
                found.append((prefix + key, value))
        return [(name, t) for name, t in found if isinstance(t, torch.Tensor)]


class ModelGuard:
    """A snapshot of a module object (classes, ``__dict__``s, tensors) to check and restore."""

    def __init__(self, module: torch.nn.Module) -> None:
        """Take the snapshot now (a host copy of every tensor's values)."""
        self.module = module
        self._modules = [_ModuleState(name, m) for name, m in module.named_modules()]
        seen: set[int] = set()
        self._tensors: list[TensorState] = []
        candidates = [
            *module.named_parameters(),
            *module.named_buffers(),
            *(found for state in self._modules for found in state.tensors()),
        ]
        for name, tensor in candidates:
            if id(tensor) not in seen:
                seen.add(id(tensor))
                self._tensors.append(TensorState(name, tensor))

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
        """Put back all the snapshot holds; :class:`InvalidStateError` names what could not be."""
        _restore_all([*self._modules, *self._tensors], "the model")


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


class SampleGuard:
    """A snapshot of the caller's samples (tensors by host copy, containers shallowly)."""

    def __init__(self, samples: Sequence[Any]) -> None:
        """Take the snapshot now (a host copy of every tensor's values)."""
        self.samples = samples
        self._states: list[_SampleFields | ContainerState | TensorState] = []
        self._seen: set[int] = set()
        for i, sample in enumerate(samples):
            self._walk(sample, f"sample {i}")
        del self._seen

    def _walk(self, value: Any, label: str) -> None:
        """Record ``value`` (a tensor, or the containers and tensors it holds) under ``label``."""
        if isinstance(value, torch.Tensor):
            if id(value) not in self._seen:
                self._seen.add(id(value))
                self._states.append(TensorState(label, value))
            return
        if isinstance(value, (list, dict, tuple, Sample)):
            if id(value) in self._seen:  # shared, or a cycle
                return
            self._seen.add(id(value))
        if isinstance(value, Sample) or is_pair(value):
            args: Sequence[Any]
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
            self._states.append(ContainerState(label, value))

    def changed(self) -> str | None:
        """The first input that differs from the snapshot, named, or None."""
        for state in self._states:
            what = state.changed()
            if what is not None:  # a tensor's own text does not say where it sits
                return f"{state.name}: {what}" if isinstance(state, TensorState) else what
        return None

    def restore(self) -> None:
        """Put back every container entry and tensor in place; :class:`InvalidStateError` if not."""
        _restore_all(self._states, "the samples")


def _restore_all(states: Sequence[Any], what: str) -> None:
    """Restore each state; :class:`InvalidStateError` names what could not be put back."""
    failures: list[str] = []
    for state in states:
        state.restore(failures)
    if failures:
        raise InvalidStateError(f"{what} could not be fully restored: " + "; ".join(failures))


_LOCKS: weakref.WeakKeyDictionary[object, threading.RLock] = weakref.WeakKeyDictionary()
_GUARD = threading.Lock()


@contextlib.contextmanager
def exclusive_module(module: object) -> Iterator[None]:
    """Hold ``module`` for one tune (re-entrant, weakly keyed); another thread's tune waits."""
    try:
        with _GUARD:
            lock = _LOCKS.setdefault(module, threading.RLock())
    except TypeError:
        yield
        return
    with lock:
        yield
