"""A latency-budget check: one candidate's latency quantile bound held against a budget."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import attrs

from aitune_fp.core._checks import finite, of_type
from aitune_fp.core.quantiles import QuantileBound
from aitune_fp.errors import InvalidValueError


def _finite_or_none(value: float | None) -> float | None:
    return None if value is None or not math.isfinite(value) else value


def _float(value: Any, missing: float) -> float:
    return missing if value is None else float(value)


@attrs.frozen(kw_only=True)
class LatencyCheck:
    """One candidate's upper bound on a latency quantile held against a budget."""

    backend_description: str = attrs.field(validator=of_type(str))
    bound: QuantileBound = attrs.field(validator=of_type(QuantileBound))
    budget_s: float = attrs.field(validator=finite(minimum=0.0, strict=True))

    @property
    def within(self) -> bool:
        """Whether the quantile is shown to be within the budget."""
        return self.bound.within(self.budget_s)

    @property
    def reason(self) -> str:
        """One line: the quantile, its bound against the budget, and the verdict."""
        q = f"p{self.bound.q * 100:g}"
        level = f"{self.bound.confidence * 100:g} %"
        budget = f"{self.budget_s * 1e3:.3f} ms"
        if not self.bound.bounded:
            return (
                f"{q} latency cannot be bounded at {level} from {self.bound.n} calls; "
                f"budget {budget} not shown to hold"
            )
        high = f"{self.bound.high * 1e3:.3f} ms"
        estimate = f"{self.bound.estimate * 1e3:.3f} ms"
        verdict = "within" if self.within else "over"
        return (
            f"{q} latency {estimate} (at most {high} at {level}, {self.bound.n} calls): "
            f"{verdict} the budget of {budget}"
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready fields: the bound's, in seconds, plus the budget and the verdict."""
        bound = self.bound
        return {
            "backend_description": self.backend_description,
            "quantile": bound.q,
            "confidence": bound.confidence,
            "n_calls": bound.n,
            "estimate_s": bound.estimate,
            "upper_s": _finite_or_none(bound.high),
            "upper_rank": bound.high_rank,
            "coverage": bound.coverage,
            "budget_s": self.budget_s,
            "within": self.within,
            "reason": self.reason,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LatencyCheck:
        """The check :meth:`to_dict` (or a ``latency_checked`` event) describes."""
        try:
            bound = QuantileBound(
                q=data["quantile"],
                confidence=data["confidence"],
                sided="upper",
                n=data["n_calls"],
                estimate=data["estimate_s"],
                low=-math.inf,
                high=_float(data["upper_s"], math.inf),
                low_rank=None,
                high_rank=data.get("upper_rank"),
                coverage=float(data["coverage"]),
            )
            return cls(
                backend_description=data["backend_description"],
                bound=bound,
                budget_s=data["budget_s"],
            )
        except KeyError as exc:
            raise InvalidValueError(f"a latency check needs the key {exc.args[0]!r}") from None
