"""Where strategies meet the pipeline: the decorator, its read-outs, and AITune's strategies."""

from __future__ import annotations


def is_aitune_strategy(target: object) -> bool:
    """Whether ``target`` (class or instance) is AITune's, by module names only (AITune not imported)."""
    cls = target if isinstance(target, type) else type(target)
    return any(str(getattr(k, "__module__", "")).startswith("aitune.") for k in cls.__mro__)
