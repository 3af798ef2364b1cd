"""A callable's recipe pickled to bytes for a fork-server worker (docs/architecture.md)."""

from __future__ import annotations

import importlib.util
import io
import pickle
import sys
import types
from collections.abc import Mapping
from typing import Any

import attrs

from aitune_fp.errors import AitunefpError


class UnpicklableError(AitunefpError, ValueError):
    """A recipe cannot be sent to a worker: something in it does not pickle."""


@attrs.frozen
class Packed:
    """A pickled recipe and the source file of each module it names (by module name)."""

    data: bytes = attrs.field(repr=lambda data: f"<{len(data)} bytes>")
    files: Mapping[str, str] = attrs.field(factory=dict)
    #: Whether it names something of the main script, which the worker must then import.
    needs_main: bool = False


class _Noting(pickle.Pickler):
    """The plain pickler, noting the module of every class and function it writes."""

    def __init__(self, file: io.BytesIO) -> None:
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self.modules: set[str] = set()

    def reducer_override(self, obj: Any) -> Any:
        """Note where ``obj`` (or its class) is defined; a read-only mapping goes as a copy."""
        if type(obj) is types.MappingProxyType:
            return _read_only, (dict(obj),)
        named = obj if isinstance(obj, type) or callable(obj) else type(obj)
        module = getattr(named, "__module__", None)
        if isinstance(module, str):
            self.modules.add(module)
        return NotImplemented


def _read_only(mapping: dict[Any, Any]) -> Mapping[Any, Any]:
    return types.MappingProxyType(mapping)


def pack(recipe: Any, what: str) -> Packed:
    """``recipe`` pickled for a worker; :class:`UnpicklableError` naming ``what`` if it cannot be."""
    buffer = io.BytesIO()
    pickler = _Noting(buffer)
    try:
        pickler.dump(recipe)
    except Exception as exc:
        raise UnpicklableError(
            f"{what} cannot be sent to a worker process: it does not pickle "
            f"({type(exc).__name__}: {exc})"
        ) from exc
    files = {
        name: str(file)
        for name in pickler.modules
        if name != "__main__"  # the worker imports the main script itself (multiprocessing)
        and isinstance(file := getattr(sys.modules.get(name), "__file__", None), str)
        and file.endswith(".py")
    }
    return Packed(buffer.getvalue(), files, "__main__" in pickler.modules)


class _Finding(pickle.Unpickler):
    """The plain unpickler; a module it cannot import by name is imported from its source file."""

    def __init__(self, data: bytes, files: Mapping[str, str]) -> None:
        super().__init__(io.BytesIO(data))
        self.files = files

    def find_class(self, module: str, name: str) -> Any:
        """The named global, importing its module from the recorded file when needed."""
        if module in self.files and module not in sys.modules:
            try:
                importlib.import_module(module)
            except ImportError:
                if import_file(module, self.files[module]) is None:
                    raise UnpicklableError(
                        f"cannot import module {module!r} from {self.files[module]!r} in the worker"
                    ) from None
        return super().find_class(module, name)


def import_file(name: str, path: str) -> types.ModuleType | None:
    """Import the Python file ``path`` as module ``name``; None when it is not a Python file."""
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        return None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module


def unpack(packed: Packed) -> Any:
    """The recipe :func:`pack` pickled (in the worker)."""
    return _Finding(packed.data, packed.files).load()
