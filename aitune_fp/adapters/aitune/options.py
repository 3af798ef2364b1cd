"""A gated AITune strategy's session options: the decorator's, AITune's threshold and mode."""

from __future__ import annotations

from typing import Any

import attrs

from aitune_fp.adapters.aitune._names import mode
from aitune_fp.adapters.reports import DecoratorOptions
from aitune_fp.pipeline.values import ValidationOptions

__all__ = ["OPTIONS_ATTRIBUTE", "distributed", "options_of", "validation_options"]

#: Where a gated AITune class (and an instance, when re-configured) holds its DecoratorOptions.
OPTIONS_ATTRIBUTE = "_aitune_fp_options"


def options_of(strategy: Any) -> DecoratorOptions:
    """The decorator's options a gated AITune strategy holds."""
    options: DecoratorOptions = getattr(strategy, OPTIONS_ATTRIBUTE)
    return options


def validation_options(strategy: Any) -> ValidationOptions:
    """The session's options now: AITune's own threshold and mode fill what was not given."""
    options = options_of(strategy)
    session = options.session_options(
        own_threshold=getattr(strategy, "min_speedup_threshold_percent", None),
        enabled=mode(strategy) != "disabled",
    )
    if options.isolation is None and distributed() is not None:
        return attrs.evolve(session, isolation="in_process")
    return session


def distributed() -> str | None:
    """Why a worker cannot build here (one rank of several: it could not join the collectives)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        return f"a distributed run of {dist.get_world_size()} ranks (a worker cannot join them)"
    return None
