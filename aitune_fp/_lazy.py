"""Names a package serves on first use (PEP 562), so importing it stays cheap (no torch)."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Collection, Mapping, MutableMapping, Sequence
from typing import Any


def lazy_names(
    package: str, namespace: MutableMapping[str, Any], names: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package`` serving ``names`` (name -> module).

    A name is imported from its module on first access and then kept in ``namespace``.
    """

    def getattr_(name: str) -> Any:
        module = names.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    def dir_() -> list[str]:
        return sorted(set(namespace) | set(names))

    return getattr_, dir_


def lazy_exports(
    package: str,
    namespace: MutableMapping[str, Any],
    public: Collection[str],
    sources: Sequence[str],
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package`` serving each name of ``public``.

    A name comes from the first module of ``sources`` whose ``__all__`` lists it, imported on
    first access (so list torch-free modules first) and then kept in ``namespace``.
    """

    def getattr_(name: str) -> Any:
        if name in public:
            for source in sources:
                module = importlib.import_module(source)
                if name in getattr(module, "__all__", ()):
                    value = getattr(module, name)
                    namespace[name] = value
                    return value
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def dir_() -> list[str]:
        return sorted(set(namespace) | set(public))

    return getattr_, dir_
