"""What one call of the correctness check must also not do: change inputs, reuse outputs."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch.utils import _pytree

from aitune_fp._tree import flatten_tensors
from aitune_fp.correctness.failures import CorrectnessError
from aitune_fp.inputs import Sample


def changed_inputs(batch: Sample, args: Sequence[Any], kwargs: Mapping[str, Any]) -> set[str]:
    """The inputs (``args[i]``, ``kwargs['k']``) whose tensors a call changed in place."""
    given = Sample(tuple(args), kwargs)
    return {
        f"args[{key}]" if isinstance(key, int) else f"kwargs[{key!r}]"
        for (key, before), (_, after) in zip(batch.items(), given.items(), strict=True)
        if any(
            a.shape != b.shape or not torch.equal(a.detach(), b.detach())
            for a, b in zip(flatten_tensors(after), flatten_tensors(before), strict=False)
        )
    }


def same_changes(candidate: set[str], eager: set[str]) -> None:
    """Raise when the candidate changed an input in place that eager leaves alone."""
    extra = sorted(candidate - eager)
    if extra:
        raise CorrectnessError(
            f"input {extra[0]}: the candidate changes it in place where eager does not (a "
            "caller's tensor would change under it)",
            path=f"input {extra[0]}",
            check="inputs",
        )


def tensor_copies(value: Any) -> list[torch.Tensor]:
    """A copy of every tensor in an output, to tell later whether the output still holds."""
    return [t.detach().clone() for t in _pytree.tree_leaves(value) if isinstance(t, torch.Tensor)]


def still_held(kept: tuple[Any, list[torch.Tensor], str] | None, prefix: str) -> None:
    """Raise when an output the caller kept changed under the next call (a static buffer)."""
    if kept is None:
        return
    output, copies, where = kept
    now = [t for t in _pytree.tree_leaves(output) if isinstance(t, torch.Tensor)]
    if len(now) != len(copies) or any(
        a.shape != b.shape or not torch.equal(a.detach(), b)
        for a, b in zip(now, copies, strict=True)
    ):
        raise CorrectnessError(
            f"{prefix}output: the output of {where} changed when the candidate was called again "
            "(it returns a buffer that the next call overwrites: a caller keeping an output "
            "would see it change)",
            path="output",
            check="aliasing",
        )


def detached(value: Any) -> Any:
    """``value`` with every tensor in it detached (an output computed with grad enabled)."""
    return _pytree.tree_map(lambda x: x.detach() if isinstance(x, torch.Tensor) else x, value)
