"""Where users and other tuning libraries meet the pipeline.

``validation`` is the ``with_performance_validation`` decorator, ``reports`` its read-outs, and
``aitune`` gates NVIDIA AITune's own strategies (extra ``aitune``; imported only when one is
wrapped). :func:`is_aitune_strategy` tells them apart without importing AITune.
"""

from __future__ import annotations

__all__ = ["is_aitune_strategy"]


def is_aitune_strategy(target: object) -> bool:
    """Whether ``target`` (a class or instance) is an AITune strategy, judged by module names only.

    Never imports AITune: a class whose MRO has a class from an ``aitune.`` module qualifies.
    """
    cls = target if isinstance(target, type) else type(target)
    return any(str(getattr(k, "__module__", "")).startswith("aitune.") for k in cls.__mro__)
