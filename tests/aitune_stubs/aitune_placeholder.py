"""Placeholders for the GPU packages AITune 0.6.0 touches when ``aitune.torch`` is imported.

``import aitune.torch`` imports every backend module, and four of them name ``triton``,
``modelopt``, ``torchao`` and ``tensorrt`` at import time (base classes, default arguments,
config objects made at import) although a CPU run never calls them. Each placeholder package
answers any attribute with a :class:`Placeholder` class: it can be subclassed, called,
instantiated and read further (``trt.Logger.INFO``). Calling into one for real fails loudly.
These packages are on ``sys.path`` only while ``tests/aitune_loader.py`` imports AITune.
"""

from __future__ import annotations

from typing import Any


class _PlaceholderMeta(type):
    """Class-level attribute reads (``Logger.INFO``) give another placeholder class."""

    def __getattr__(cls, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return placeholder(f"{cls.__name__}.{name}")


class Placeholder(metaclass=_PlaceholderMeta):
    """Stands for any class or value of a GPU package; instances accept any arguments."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._args = args
        self._kwargs = kwargs

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(f"{type(self).__name__} is an import-time placeholder (no GPU stack)")


def placeholder(name: str) -> type:
    """A fresh placeholder class called ``name``."""
    return _PlaceholderMeta(name, (Placeholder,), {})


def module_getattr(name: str) -> Any:
    """A placeholder package's module ``__getattr__``: any public name is a placeholder class."""
    if name.startswith("__"):
        raise AttributeError(name)
    return placeholder(name)
