"""The namespaces eager's forward resolves callables through, fingerprinted by identity.

A replaced ``F.linear`` or ``nn.Linear.forward`` changes eager process-wide; torch's own are not.
"""

from __future__ import annotations

import os
import types
from collections.abc import Iterable, Mapping
from typing import Any, Final

import attrs
import torch

from aitune_fp.errors import InvalidTypeError

NAMESPACES: Final[tuple[str, ...]] = (
    "torch",
    "torch.nn.functional",
    "torch.Tensor",
    "torch.nn.Parameter",
    "torch.nn.Module",
    "torch.nn.init",
    "torch._C._nn",
    "torch.special",
    "torch.linalg",
    "torch.fft",
)
"""Namespaces whose callables are fingerprinted by identity (every module subclass that
``torch.nn`` exports is fingerprinted too: eager's ``Linear.forward`` resolves through it)."""

_TORCH_DIR: Final = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep


MISSING: Final = object()


def _tracked(value: object) -> bool:
    """What eager may resolve through: callables and descriptors, not submodules or data."""
    if value is MISSING or isinstance(value, types.ModuleType):
        return False
    return callable(value) or hasattr(type(value), "__get__")


def _torch_own(value: object) -> bool:
    """A replacement torch makes itself: a function in torch's files, or a torch class."""
    if isinstance(value, type):
        module = getattr(value, "__module__", "") or ""
        return module == "torch" or module.startswith("torch.")
    code = getattr(value, "__code__", None)
    return isinstance(code, types.CodeType) and os.path.abspath(code.co_filename).startswith(
        _TORCH_DIR
    )


@attrs.frozen(eq=False)
class Space:
    """A namespace (module or class) and a shallow copy of its ``__dict__``."""

    label: str
    obj: Any
    entries: Mapping[str, object]

    def recapture(self) -> Space:
        return Space(self.label, self.obj, dict(vars(self.obj)))


@attrs.frozen
class _Edit:
    """One difference in a namespace, and what puts it back."""

    space: Space
    name: str
    kind: str  # "replaced", "added", "removed"
    old: object

    def text(self) -> str:
        return f"{self.space.label}.{self.name} {self.kind}"

    def undo(self) -> None:
        if self.old is MISSING:
            delattr(self.space.obj, self.name)
        else:
            setattr(self.space.obj, self.name, self.old)


def space_edits(then: Space, now: Mapping[str, object]) -> list[_Edit]:
    old = then.entries
    if now.keys() == old.keys() and list(map(id, now.values())) == list(map(id, old.values())):
        return []  # the usual case, answered in C
    edits = []
    for name in old.keys() | now.keys():
        was, new = old.get(name, MISSING), now.get(name, MISSING)
        if was is new or not (_tracked(was) or _tracked(new)) or _torch_own(new):
            continue
        obj = then.obj  # a name a class gains over its base's replaces the inherited one
        inherited = isinstance(obj, type) and any(name in vars(b) for b in obj.__mro__[1:])
        kind = "added" if was is MISSING and not inherited else "replaced"
        edits.append(_Edit(then, name, "removed" if new is MISSING else kind, was))
    return sorted(edits, key=lambda e: e.name)


def resolve(dotted: str) -> Any:
    """The object at dotted ``path`` below ``torch`` (AttributeError: not in this torch)."""
    obj: Any = torch
    for part in dotted.split(".")[1:]:
        obj = getattr(obj, part)
    return obj


def _label(obj: object) -> str:
    if isinstance(obj, types.ModuleType):
        return obj.__name__
    if isinstance(obj, type):
        return f"{obj.__module__}.{obj.__qualname__}"
    raise InvalidTypeError(f"extra namespace must be a module or a class, got {type(obj).__name__}")


def default_spaces(extra: Iterable[object]) -> list[tuple[str, Any]]:
    found = [(name, resolve(name)) for name in NAMESPACES]
    module = torch.nn.Module
    found += [
        (f"torch.nn.{name}", cls)
        for name, cls in vars(torch.nn).items()
        if isinstance(cls, type) and issubclass(cls, module) and cls is not module
    ]
    found += [(_label(obj), obj) for obj in extra]
    unique: dict[int, tuple[str, Any]] = {}
    for label, obj in found:
        unique.setdefault(id(obj), (label, obj))
    return list(unique.values())
