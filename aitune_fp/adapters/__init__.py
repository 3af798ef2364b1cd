"""Integrations with other tuning libraries; each is optional and imported only when used.

``aitune_fp.adapters.aitune`` gates NVIDIA AITune's own strategies (extra ``aitune``).
Nothing here is imported by the rest of the package at module level.
"""

from __future__ import annotations

__all__ = ["is_aitune_strategy"]


def is_aitune_strategy(target: object) -> bool:
    """Whether ``target`` (a class or instance) is an AITune strategy, judged by module names only.

    Never imports AITune: a class whose MRO has a class from an ``aitune.`` module qualifies.
    """
    cls = target if isinstance(target, type) else type(target)
    return any(str(getattr(k, "__module__", "")).startswith("aitune.") for k in cls.__mro__)
