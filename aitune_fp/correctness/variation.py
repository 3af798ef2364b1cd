"""Eager's variation across the inputs of one check, and the candidate's error against it."""

from __future__ import annotations

from typing import Any

import attrs
import torch

from aitune_fp.core.accuracy import Spread
from aitune_fp.correctness._leaves import as_tensor_if_array, leaves
from aitune_fp.correctness._values import TF32_DEVICES, capped, tf32_allowed
from aitune_fp.correctness.tolerances import eps_of


@attrs.define
class _Group:
    """The rows of one leaf that share a shape: sums about ``shift``, per position."""

    shift: torch.Tensor
    count: torch.Tensor
    total: torch.Tensor
    squares: torch.Tensor
    rows: int = 0
    diff_sq: float = 0.0
    ref_sq: float = 0.0

    def add(self, a: torch.Tensor, e: torch.Tensor) -> None:
        """Add rows ``e`` of eager and ``a`` of the candidate (2-D: rows by positions)."""
        finite = torch.isfinite(e)
        centred = torch.where(finite, e - self.shift, 0)
        self.count += finite.sum(dim=0)
        self.total += centred.sum(dim=0)
        self.squares += centred.abs().square().sum(dim=0)
        self.rows += e.shape[0]
        self.diff_sq = capped(
            self.diff_sq + float(torch.where(finite, a - e, 0).abs().square().sum())
        )
        self.ref_sq = capped(self.ref_sq + float(torch.where(finite, e, 0).abs().square().sum()))

    def spread_sq(self) -> float:
        """``sum |e - mean|^2`` over the rows, the mean taken per position."""
        mean_sq = self.total.abs().square() / self.count.clamp_min(1)
        return capped(float((self.squares - mean_sq).clamp_min(0).sum()))


@attrs.define
class Spreads:
    """What one check saw of each floating leaf, over its calls (mutable; it stays in the check)."""

    groups: dict[tuple[str, tuple[int, ...]], _Group] = attrs.field(factory=dict)
    eps: dict[str, float] = attrs.field(factory=dict)

    def add(self, actual: Any, expected: Any, batch_size: int) -> None:
        """One call's outputs (already compared: the same structure and shapes)."""
        found = {path: leaf for path, _, leaf in leaves(actual, "output", [])}
        for path, _, leaf in leaves(expected, "output", []):
            e = as_tensor_if_array(leaf)
            a = as_tensor_if_array(found.get(path))
            if not (isinstance(e, torch.Tensor) and isinstance(a, torch.Tensor)):
                continue
            if not (e.is_floating_point() or e.is_complex()) or not e.numel():
                continue
            self.eps[path] = max(self.eps.get(path, 0.0), _rounding(e))
            wide = torch.complex128 if e.is_complex() or a.is_complex() else torch.float64
            e_w, a_w = e.detach().to(wide), a.detach().to(e.device, wide)
            batched = e.ndim >= 1 and e.shape[0] == batch_size
            n = batch_size if batched else 1
            rows_e, rows_a = e_w.reshape(n, -1), a_w.reshape(n, -1)
            key = (path, tuple(e.shape[1:]) if batched else tuple(e.shape))
            group = self.groups.get(key)
            if group is None:
                first = rows_e[0]
                shift = torch.where(torch.isfinite(first), first, 0)
                zeros = torch.zeros_like(shift)
                group = _Group(
                    shift=shift,
                    count=torch.zeros(shift.shape, dtype=torch.int64, device=shift.device),
                    total=zeros.clone(),
                    squares=torch.zeros(shift.shape, dtype=torch.float64, device=shift.device),
                )
                self.groups[key] = group
            group.add(rows_a, rows_e)

    def by_leaf(self) -> dict[str, Spread]:
        """Each leaf's :class:`Spread`, its groups summed, in the order first seen."""
        found: dict[str, Spread] = {}
        for (path, _), group in self.groups.items():
            held = found.get(path)
            found[path] = Spread(
                n_inputs=group.rows + (held.n_inputs if held else 0),
                diff_sq=capped(group.diff_sq + (held.diff_sq if held else 0.0)),
                spread_sq=capped(group.spread_sq() + (held.spread_sq if held else 0.0)),
                ref_sq=capped(group.ref_sq + (held.ref_sq if held else 0.0)),
                eps=self.eps[path],
            )
        return found


def _rounding(e: torch.Tensor) -> float:
    """The rounding unit of eager's values (float32 on CUDA with TF32 allowed: float16's)."""
    if e.dtype == torch.float32 and e.device.type in TF32_DEVICES and tf32_allowed():
        return eps_of(torch.float16)
    return eps_of(e.dtype)
