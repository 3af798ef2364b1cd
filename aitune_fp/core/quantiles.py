"""Distribution-free bounds of a latency quantile (order statistics); the latency-budget check."""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from fractions import Fraction
from typing import Any, Final

import attrs

from aitune_fp.core._checks import (
    check_finite,
    check_open_interval,
    finite,
    integer,
    not_nan,
    of_type,
    open_interval,
)
from aitune_fp.core.timings import real_number, sequence_items
from aitune_fp.errors import InvalidValueError

#: The latency quantile a budget is held to by default (p90): ``latency-budget``'s ``quantile``.
DEFAULT_QUANTILE: Final = 0.9
#: Up to this many values the binomial tails are exact; above, floats with a safe-side margin.
EXACT_MAX_N: Final = 2000
_FLOAT_MARGIN: Final = 1e-9


def _ordered(instance: QuantileBound, attribute: attrs.Attribute[float], value: float) -> None:
    """Validator: ``estimate <= high``."""
    if not instance.estimate <= value:
        raise InvalidValueError(f"need estimate <= high, got {instance.estimate!r}, {value!r}")


@attrs.frozen(kw_only=True)
class QuantileBound:
    """A one-sided upper confidence bound for the ``q``-quantile of ``n`` values' distribution."""

    q: float = attrs.field(validator=open_interval(0.0, 1.0))
    confidence: float = attrs.field(validator=open_interval(0.5, 1.0))
    n: int = attrs.field(validator=integer(minimum=1))
    estimate: float = attrs.field(validator=finite())
    high: float = attrs.field(validator=[not_nan(), _ordered])
    high_rank: int | None = attrs.field(validator=attrs.validators.optional(integer(minimum=1)))
    coverage: float = attrs.field(validator=[of_type(float), open_interval(0.0, 1.0 + 1e-12)])

    @property
    def bounded(self) -> bool:
        """Whether the bound is finite."""
        return math.isfinite(self.high)

    def within(self, budget: float) -> bool:
        """Whether the quantile is shown to be at most ``budget`` (``high <= budget``)."""
        return self.high <= budget


def _values(values: object) -> tuple[float, ...]:
    """``values`` as finite floats (at least one), or an error naming the bad item."""
    items = sequence_items("values", values)
    if not items:
        raise InvalidValueError("values must hold at least one value, got none")
    return tuple(
        check_finite(f"values[{i}]", real_number(f"values[{i}]", v)) for i, v in enumerate(items)
    )


def _level(name: str, value: object, low: float = 0.0) -> Fraction:
    """A probability in (low, 1) as the fraction its shortest decimal spells (0.9 -> 9/10)."""
    return Fraction(repr(check_open_interval(name, value, low, 1.0)))


@functools.lru_cache(maxsize=256)
def _cdf_exact(n: int, q: Fraction) -> tuple[tuple[int, ...], int]:
    """``P(B <= k) * scale`` for ``k = 0..n`` and ``scale``, ``B ~ binomial(n, q)``: exact integers."""
    num, den = q.numerator, q.denominator
    rest = den - num
    term = rest**n  # C(n, 0) num^0 rest^n
    total = 0
    cumulative = []
    for k in range(n + 1):
        total += term
        cumulative.append(total)
        if k < n:
            term = term * (n - k) * num // ((k + 1) * rest)
    return tuple(cumulative), den**n


@functools.lru_cache(maxsize=256)
def _cdf_float(n: int, q: float) -> tuple[float, ...]:
    """``P(B <= k)`` for ``k = 0..n`` in floats (log-space terms); off by far less than 1e-9."""
    base = math.lgamma(n + 1)
    log_q, log_rest = math.log(q), math.log1p(-q)
    total = 0.0
    cumulative = []
    for k in range(n + 1):
        log_term = base - math.lgamma(k + 1) - math.lgamma(n - k + 1)
        total += math.exp(log_term + k * log_q + (n - k) * log_rest)
        cumulative.append(min(total, 1.0))
    return tuple(cumulative)


def _upper_rank(n: int, q: Fraction, level: Fraction) -> tuple[int | None, float]:
    """Smallest ``u`` with ``P(B <= u - 1) >= level`` (floats: by a margin) and that chance."""
    if n <= EXACT_MAX_N:
        ints, scale = _cdf_exact(n, q)
        for k, total in enumerate(ints[:n]):
            if total * level.denominator >= level.numerator * scale:
                return k + 1, float(Fraction(total, scale))
        return None, 1.0
    for k, chance in enumerate(_cdf_float(n, float(q))[:n]):
        if chance >= float(level) + _FLOAT_MARGIN:
            return k + 1, chance
    return None, 1.0


def quantile_upper_bound(
    values: Sequence[float], q: float, confidence: float = 0.95
) -> QuantileBound:
    """One-sided upper bound of the ``q``-quantile ("p90 is at most ``high``") at ``confidence``."""
    items = sorted(_values(values))
    level_q = _level("q", q)
    level = _level("confidence", confidence, 0.5)
    n = len(items)
    rank, coverage = _upper_rank(n, level_q, level)
    return QuantileBound(
        q=float(level_q),
        confidence=float(level),
        n=n,
        estimate=items[max(1, math.ceil(n * level_q)) - 1],
        high=items[rank - 1] if rank is not None else math.inf,
        high_rank=rank,
        coverage=coverage,
    )


def _min_n(q: Fraction, alpha: Fraction) -> int:
    """Smallest ``n`` with ``q ** n <= alpha`` (exactly up to :data:`EXACT_MAX_N`)."""
    guess = math.log(float(alpha)) / math.log(float(q))
    if guess > EXACT_MAX_N:
        return math.ceil(guess * (1 + 1e-12))
    n = max(1, math.ceil(guess) - 2)
    while q**n > alpha:
        n += 1
    while n > 1 and q ** (n - 1) <= alpha:
        n -= 1
    return n


def min_samples_for_upper_bound(q: float, confidence: float = 0.95) -> int:
    """Fewest values for a finite one-sided upper bound: smallest ``n`` with ``1 - q**n >= c``."""
    return _min_n(_level("q", q), 1 - _level("confidence", confidence, 0.5))


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
            "upper_s": bound.high if bound.bounded else None,
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
                n=data["n_calls"],
                estimate=data["estimate_s"],
                high=math.inf if data["upper_s"] is None else float(data["upper_s"]),
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
