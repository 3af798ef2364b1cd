"""Import AITune 0.6.0 on a CPU machine for the ``aitune`` tests and the side-by-side benchmark.

``import aitune.torch`` imports every backend module; four of them touch GPU-only packages at
import time (``triton``, ``modelopt``, ``torchao``, ``tensorrt``) that CPU runs never call. The
placeholders for them live in ``tests/aitune_stubs`` and are put on ``sys.path`` only around that
import, then removed with every module they loaded, so ``torch.compile`` and anything else never
sees them. torch's own "is triton installed" probe is evaluated (and cached, False) first.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

STUBS = Path(__file__).resolve().parent / "aitune_stubs"
_PLACEHOLDER_PACKAGES = ("triton", "modelopt", "torchao", "tensorrt", "aitune_placeholder")


def aitune_installed() -> bool:
    """Whether the ``aitune`` distribution is importable at all (no import done)."""
    return importlib.util.find_spec("aitune") is not None


def _is_placeholder(name: str) -> bool:
    return any(name == p or name.startswith(p + ".") for p in _PLACEHOLDER_PACKAGES)


def import_aitune() -> ModuleType:
    """``aitune.torch``, imported with the placeholders visible only during the import.

    Raises ImportError when AITune is not installed (or cannot be imported on this machine).
    """
    if "aitune.torch" in sys.modules:
        return sys.modules["aitune.torch"]
    if not aitune_installed():
        raise ImportError("aitune is not installed")
    import torch
    import torch._dynamo  # loaded before the placeholders exist
    import torch._inductor.config
    from torch.utils._triton import has_triton_package

    has_triton_package()  # cached: stays False once the placeholders are gone
    real = {name for name in _PLACEHOLDER_PACKAGES if name in sys.modules}
    sys.path.insert(0, str(STUBS))
    try:
        return importlib.import_module("aitune.torch")
    finally:
        sys.path.remove(str(STUBS))
        for name in [n for n in sys.modules if _is_placeholder(n) and n.split(".")[0] not in real]:
            del sys.modules[name]
        importlib.invalidate_caches()
        del torch
