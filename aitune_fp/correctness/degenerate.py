"""Eager outputs the correctness check cannot tell candidates apart by: constant or near zero.

With random weights (or a saturated head) a model's outputs may hardly change with its input,
or all round to zero. The check then passes a candidate that ignores its input or returns
zeros, and its "correct" means little: the tune says so (issue 35).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

from aitune_fp.correctness.tolerances import Tolerances

__all__ = ["degenerate_outputs"]


def _floating_leaves(output: Any) -> list[torch.Tensor]:
    """The floating (or complex) tensors in one output, in pytree order."""
    from torch.utils import _pytree

    return [
        t.detach()
        for t in _pytree.tree_leaves(output)
        if isinstance(t, torch.Tensor) and (t.is_floating_point() or t.is_complex())
    ]


def degenerate_outputs(outputs: Sequence[Any], tolerances: Tolerances | None = None) -> str | None:
    """Why eager's ``outputs`` on different inputs cannot tell candidates apart, or None.

    Near zero: every floating element is within the reduced tier's ``atol`` of zero (a
    candidate returning zeros passes). Constant: across the inputs, every floating leaf varies
    by no more than the reduced tier's relative L2 budget (a candidate that returns one fixed
    output passes under reduced precision). None when fewer than two outputs share a structure.
    """
    tol = tolerances if tolerances is not None else Tolerances()
    leaves = [_floating_leaves(o) for o in outputs]
    if not leaves or not leaves[0] or any(len(x) != len(leaves[0]) for x in leaves):
        return None
    largest = max(float(t.abs().max()) if t.numel() else 0.0 for x in leaves for t in x)
    if largest <= tol.reduced_atol:
        return (
            f"eager's outputs are all within {tol.reduced_atol:g} of zero (largest "
            f"{largest:.3g}): a candidate that returns zeros passes the correctness check"
        )
    if len(leaves) < 2:
        return None
    worst = 0.0
    for column in zip(*leaves, strict=True):
        if any(t.shape != column[0].shape for t in column) or not column[0].numel():
            return None
        stack = torch.stack(
            [t.to("cpu", torch.complex128 if t.is_complex() else torch.float64) for t in column]
        )
        size = float(stack.abs().square().mean())
        if not math.isfinite(size):
            return None
        if size > 0:
            spread = float((stack - stack.mean(dim=0)).abs().square().mean())
            worst = max(worst, math.sqrt(spread / size))
    if worst > tol.reduced_rel_l2:
        return None
    return (
        f"eager's outputs hardly change with the input (by at most {worst:.2%} of their size "
        f"across {len(leaves)} inputs, within the {tol.reduced_rel_l2:g} relative L2 a "
        "reduced-precision candidate is allowed): the correctness check cannot tell a "
        "candidate that ignores its input from eager"
    )
