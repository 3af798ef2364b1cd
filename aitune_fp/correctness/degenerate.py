"""Eager outputs the correctness check cannot tell candidates apart by: constant or near zero."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

from aitune_fp.correctness._leaves import as_tensor_if_array, leaves
from aitune_fp.correctness.tolerances import Tolerances

#: How many near-zero leaves a reason names before it counts the rest.
_NAMED = 3


def _floating_leaves(output: Any) -> list[tuple[str, torch.Tensor]]:
    """The floating (or complex) tensors in one output, with their paths, as the check walks it."""
    found = []
    for path, _, leaf in leaves(output, "output", []):
        leaf = as_tensor_if_array(leaf)
        if isinstance(leaf, torch.Tensor) and (leaf.is_floating_point() or leaf.is_complex()):
            found.append((path, leaf.detach()))
    return found


def _largest(column: Sequence[torch.Tensor]) -> float:
    """The largest magnitude in one leaf over the inputs: 0 when empty, NaN if any is NaN."""
    sizes = [float(t.abs().max()) for t in column if t.numel()]
    return math.nan if any(math.isnan(x) for x in sizes) else max(sizes, default=0.0)


def _near_zero(
    paths: list[str], columns: list[tuple[torch.Tensor, ...]], atol: float
) -> str | None:
    """Name the non-empty leaves within ``atol`` of zero on every input, or None."""
    sizes = [
        (path, _largest(column))
        for path, column in zip(paths, columns, strict=True)
        if any(t.numel() for t in column)
    ]
    tiny = [(path, size) for path, size in sizes if size <= atol]
    if not tiny:
        return None
    largest = max(size for _, size in tiny)
    if len(tiny) == len(sizes):
        return (
            f"eager's outputs are all within {atol:g} of zero (largest {largest:.3g}): a "
            "candidate that returns zeros passes the correctness check"
        )
    names = ", ".join(path for path, _ in tiny[:_NAMED])
    if len(tiny) > _NAMED:
        names += f" and {len(tiny) - _NAMED} more"
    verb = "is" if len(tiny) == 1 else "are"
    return (
        f"eager's {names} {verb} within {atol:g} of zero on every input (largest "
        f"{largest:.3g}): a candidate that returns zeros there passes the correctness check"
    )


def degenerate_outputs(outputs: Sequence[Any], tolerances: Tolerances | None = None) -> str | None:
    """Why eager's ``outputs`` on different inputs cannot tell candidates apart, or None."""
    tol = tolerances if tolerances is not None else Tolerances()
    found = [_floating_leaves(o) for o in outputs]
    if not found or not found[0]:
        return None
    paths = [path for path, _ in found[0]]
    if any([path for path, _ in x] != paths for x in found):
        return None
    columns = list(zip(*([t for _, t in x] for x in found), strict=True))
    near_zero = _near_zero(paths, columns, tol.reduced_atol)
    if near_zero is not None or len(found) < 2:
        return near_zero
    worst = 0.0
    for column in columns:
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
        f"across {len(found)} inputs, within the {tol.reduced_rel_l2:g} relative L2 a "
        "reduced-precision candidate is allowed): the correctness check cannot tell a "
        "candidate that ignores its input from eager"
    )
