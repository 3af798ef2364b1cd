"""The accuracy budget: element-wise tolerances and norm criteria per precision tier."""

from __future__ import annotations

from typing import Any, Literal, TypeAlias

import attrs
import torch

from aitune_fp.core._checks import as_tuple, finite, one_of, share, tuple_of
from aitune_fp.core.accuracy import NormBudgets, rel_l2_budget

__all__ = ["TIERS", "Tier", "Tolerances", "eps_of", "least_precise"]

#: The precision tiers: float64, float32 (and TF32), and reduced (float16, bfloat16, float8).
Tier: TypeAlias = Literal["float64", "float32", "reduced"]
TIERS: tuple[Tier, ...] = ("float64", "float32", "reduced")
_optional: Any = attrs.validators.optional  # None: the criterion is off


@attrs.frozen(kw_only=True)
class Tolerances:
    """The accuracy budget per precision tier (float64, float32, reduced)."""

    float64_atol: float = attrs.field(default=1e-6, validator=finite(minimum=0))
    float64_rtol: float = attrs.field(default=1e-6, validator=finite(minimum=0))
    float32_atol: float = attrs.field(default=1e-3, validator=finite(minimum=0))
    float32_rtol: float = attrs.field(default=1e-3, validator=finite(minimum=0))
    reduced_atol: float = attrs.field(default=1e-2, validator=finite(minimum=0))
    reduced_rtol: float = attrs.field(default=1e-2, validator=finite(minimum=0))
    scale_atol: float = attrs.field(default=0.0, validator=finite(minimum=0))
    float64_rel_l2: float = attrs.field(default=1e-6, validator=finite(minimum=0))
    float32_rel_l2: float = attrs.field(default=1e-3, validator=finite(minimum=0))
    reduced_rel_l2: float = attrs.field(default=2e-2, validator=finite(minimum=0))
    outlier_share: float = attrs.field(default=1e-3, validator=share)
    top1_agreement: float | None = attrs.field(default=0.99, validator=_optional(share))
    variation: float | None = attrs.field(default=0.7, validator=_optional(finite(minimum=0)))
    noise_factor: float = attrs.field(default=10.0, validator=finite(minimum=0))
    norm_tiers: tuple[Tier, ...] = attrs.field(
        default=("reduced",), converter=as_tuple, validator=tuple_of(one_of(TIERS))
    )

    def tier(self, dtype: torch.dtype) -> Tier:
        """The precision tier of values of a floating or complex ``dtype``."""
        eps = eps_of(dtype)
        if eps >= torch.finfo(torch.float16).eps:
            return "reduced"
        if eps >= torch.finfo(torch.float32).eps:
            return "float32"
        return "float64"

    def for_dtype(self, dtype: torch.dtype) -> tuple[float, float]:
        """Return ``(atol, rtol)`` for values of ``dtype`` (exact for integers and bools)."""
        if not (dtype.is_floating_point or dtype.is_complex):
            return 0.0, 0.0
        tier = self.tier(dtype)
        return getattr(self, f"{tier}_atol"), getattr(self, f"{tier}_rtol")

    def norm_decides(self, dtype: torch.dtype) -> bool:
        """Whether the norm criteria (not the element-wise check) decide for ``dtype`` values."""
        floating = dtype.is_floating_point or dtype.is_complex
        return floating and self.tier(dtype) in self.norm_tiers

    def norm_budgets(self, dtype: torch.dtype, noise: float | None = None) -> NormBudgets:
        """The norm budgets for ``dtype`` values; ``noise``: eager's own rel L2 at that leaf."""
        floor: float = getattr(self, f"{self.tier(dtype)}_rel_l2")
        return NormBudgets(
            rel_l2=rel_l2_budget(floor, noise, self.noise_factor),
            outlier_share=self.outlier_share,
            top1_agreement=self.top1_agreement,
        )


def eps_of(dtype: torch.dtype) -> float:
    """Machine epsilon of a floating or complex dtype (a complex's is its real part's)."""
    if dtype.is_complex:
        dtype = dtype.to_real()
    return float(torch.finfo(dtype).eps)


def least_precise(*dtypes: torch.dtype | None) -> torch.dtype:
    """Among floating/complex dtypes, the one with the largest epsilon (float32 if none)."""
    floating = [d for d in dtypes if d is not None and (d.is_floating_point or d.is_complex)]
    if not floating:
        return torch.float32
    return max(floating, key=eps_of)
