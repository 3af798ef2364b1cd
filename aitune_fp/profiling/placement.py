"""Eager's weights moved to fresh memory now and then, between timed samples.

Two copies of one model time up to 1.4 % apart by where their weights sit (``RESULTS.md``); a
copy that keeps one place all run lends that offset to every pair. Moved every few samples,
eager's place varies within the run, so the interval carries it as noise, not as a bias.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

#: Timed samples (calls or blocks) of eager between two moves of its weights.
MOVE_EVERY = 20
#: Weights above this size stay where they are: a move would cost more than a few calls, and
#: so many pages average their placement out.
MOVE_BYTES_MAX = 64 << 20

_PADS = random.Random()


def move_weights(module: torch.nn.Module) -> None:
    """Give each parameter and buffer of ``module`` a fresh copy of its data (values kept).

    A pad of random size held meanwhile shifts each copy, so moves do not take turns between two
    places.
    """
    import torch

    pads = []
    with torch.no_grad():
        for tensor in (*module.parameters(), *module.buffers()):
            pads.append(torch.empty(_PADS.randrange(64, 65536), dtype=torch.uint8))
            tensor.data = tensor.data.clone()


class Moving:
    """``fn`` (eager's call) whose ``module``'s weights move every :data:`MOVE_EVERY` samples."""

    def __init__(self, fn: Callable[..., Any], module: torch.nn.Module) -> None:
        """Count from zero: the first move comes after the first ``MOVE_EVERY`` samples."""
        self.fn, self.module, self.samples = fn, module, 0

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Eager's call itself."""
        return self.fn(*args, **kwargs)

    def before_sample(self) -> bool:
        """Count a timed sample about to be prepared; move the weights when due (whether moved)."""
        self.samples += 1
        if self.samples % MOVE_EVERY:
            return False
        move_weights(self.module)
        return True


def moving(fn: Callable[..., Any], backend: Any) -> Callable[..., Any]:
    """``fn`` as :class:`Moving` over ``backend``'s module (itself, or its ``module``); else ``fn``.

    Also ``fn`` when the module's weights are none or above :data:`MOVE_BYTES_MAX`.
    """
    import torch  # here: importing this module leaves torch unloaded (``check``, ``--help``)

    module = backend if isinstance(backend, torch.nn.Module) else getattr(backend, "module", None)
    if not isinstance(module, torch.nn.Module):
        return fn
    size = sum(t.nbytes for t in (*module.parameters(), *module.buffers()))
    return Moving(fn, module) if 0 < size <= MOVE_BYTES_MAX else fn


def before_sample(fn: Callable[..., Any], warm: Callable[[], object]) -> None:
    """Before a timed sample of ``fn``'s arm: move its weights when due, then ``warm`` (untimed).

    The first call after a move touches memory no call has touched yet: it runs untimed.
    """
    hook = getattr(fn, "before_sample", None)
    if hook is not None and hook():
        warm()
