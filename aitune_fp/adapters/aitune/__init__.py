"""NVIDIA AITune's own strategies, gated through their hooks by aitune_fp's decision (``docs/aitune.md``)."""

from __future__ import annotations

from aitune_fp.adapters import is_aitune_strategy
from aitune_fp.adapters.aitune._names import (
    SUPPORTED_AITUNE,
    AituneVersionError,
    aitune_version,
)
from aitune_fp.adapters.aitune.decorate import gated

__all__ = [
    "SUPPORTED_AITUNE",
    "AituneVersionError",
    "aitune_version",
    "gated",
    "is_aitune_strategy",
]
