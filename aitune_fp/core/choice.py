"""What a tune's choice among passing candidates leaves in its report, as plain values.

A head-to-head selection is recorded as its final :class:`~aitune_fp.core.selection_values.SelectionState`
and a latency-budget check as a :class:`LatencyCheck`. Both go into events as plain dicts and come
back from them unchanged (:func:`selection_to_dict` / :func:`selection_from_dict`), so the report
the session keeps and the one ``ingest`` rebuilds from a log agree. Pure.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import attrs

from aitune_fp.core._checks import finite, of_type
from aitune_fp.core.quantiles import QuantileBound
from aitune_fp.core.selection_values import (
    Contender,
    Elimination,
    Failure,
    PairBound,
    SelectionState,
)
from aitune_fp.errors import InvalidValueError

__all__ = ["LatencyCheck", "selection_from_dict", "selection_to_dict"]


def _finite_or_none(value: float | None) -> float | None:
    return None if value is None or not math.isfinite(value) else value


def _float(value: Any, missing: float) -> float:
    return missing if value is None else float(value)


@attrs.frozen(kw_only=True)
class LatencyCheck:
    """One candidate's latency quantile held against a budget (``latency-budget`` strategy).

    ``bound``: the one-sided upper confidence bound of its ``q``-quantile latency, in seconds,
    from calls timed on their own; ``within``: the bound is at most ``budget_s``.
    """

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


def _pair_dict(pair: PairBound) -> dict[str, Any]:
    return {
        "first": pair.first,
        "second": pair.second,
        "ratio": pair.ratio,
        "low": pair.low,
        "high": _finite_or_none(pair.high),
        "level": pair.level,
        "rounds": pair.rounds,
        "inflation": pair.inflation,
    }


def selection_to_dict(state: SelectionState) -> dict[str, Any]:
    """JSON-ready fields of a selection: who competed, who lost to whom, and the choice."""
    return {
        "contenders": [
            {"name": c.name, "order": c.order, "build_s": c.build_s} for c in state.contenders
        ],
        "remaining": list(state.remaining),
        "eliminated": [
            {
                "name": e.name,
                "lost_to": e.lost_to,
                "ratio": e.ratio,
                "low": e.low,
                "high": _finite_or_none(e.high),
                "at_rounds": e.at_rounds,
            }
            for e in state.eliminated
        ],
        "failed": [
            {"name": f.name, "error": f.error, "at_rounds": f.at_rounds} for f in state.failed
        ],
        "pairs": [_pair_dict(p) for p in state.pairs],
        "rounds": state.rounds,
        "look": state.look,
        "settled": state.settled,
        "chosen": state.chosen,
        "outcome": state.outcome,
        "reason": state.reason,
        "gap_bound": _finite_or_none(state.gap_bound),
        "gap_unbounded": state.gap_bound is not None and math.isinf(state.gap_bound),
        "confidence": state.confidence,
    }


def selection_from_dict(data: Mapping[str, Any]) -> SelectionState:
    """The state :func:`selection_to_dict` (or a ``selection_decided`` event) describes."""
    try:
        gap = data.get("gap_bound")
        return SelectionState(
            contenders=tuple(
                Contender(c["name"], c["order"], c.get("build_s")) for c in data["contenders"]
            ),
            remaining=tuple(data["remaining"]),
            eliminated=tuple(
                Elimination(
                    name=e["name"],
                    lost_to=e["lost_to"],
                    ratio=e["ratio"],
                    low=e["low"],
                    high=_float(e.get("high"), math.inf),
                    at_rounds=e["at_rounds"],
                )
                for e in data.get("eliminated", ())
            ),
            failed=tuple(
                Failure(name=f["name"], error=f["error"], at_rounds=f["at_rounds"])
                for f in data.get("failed", ())
            ),
            pairs=tuple(
                PairBound(
                    first=p["first"],
                    second=p["second"],
                    ratio=p["ratio"],
                    low=p["low"],
                    high=_float(p.get("high"), math.inf),
                    level=p["level"],
                    rounds=p["rounds"],
                    inflation=p.get("inflation", 1.0),
                )
                for p in data.get("pairs", ())
            ),
            rounds=data.get("rounds", 0),
            look=data.get("look", 0),
            settled=data.get("settled", False),
            chosen=data.get("chosen"),
            outcome=data["outcome"],
            reason=data.get("reason", ""),
            gap_bound=(math.inf if data.get("gap_unbounded") else None) if gap is None else gap,
            confidence=data.get("confidence", 0.95),
        )
    except KeyError as exc:
        raise InvalidValueError(f"a selection needs the key {exc.args[0]!r}") from None
