"""Norm-based accuracy criteria, pure: each figure a check reduced, held against its budget."""

from __future__ import annotations

import math
import sys
from collections.abc import Iterable, Mapping
from typing import Any, Literal, TypeAlias

import attrs

from aitune_fp.core._checks import check_finite, finite, integer, of_type, one_of, optional, share
from aitune_fp.errors import InvalidTypeError, InvalidValueError

#: The criteria a :class:`Criterion` can name.
CriterionName: TypeAlias = Literal[
    "rel_l2", "outlier_share", "top1_agreement", "variation", "metric"
]
CRITERIA: tuple[CriterionName, ...] = (
    "rel_l2", "outlier_share", "top1_agreement", "variation", "metric"
)  # fmt: skip
#: Eager varying within this many units of its rounding is too flat for the variation criterion.
RESOLUTION_ULPS = 16
#: Which check decides a floating leaf (``auto``: norm for reduced precision and int8).
CriteriaMode: TypeAlias = Literal["auto", "elementwise", "norm"]
CRITERIA_MODES: tuple[CriteriaMode, ...] = ("auto", "elementwise", "norm")
#: The settings that only the norm criteria read.
_NORM_ONLY: tuple[str, ...] = ("rel_l2", "outlier_share", "calibrate")

#: Criteria where a larger value is better (the budget is a floor, not a ceiling).
_FLOORS = frozenset({"top1_agreement"})


def capped(value: float) -> float:
    """A finite figure (a ratio over a zero norm, or next to a denormal one, is infinite)."""
    return value if math.isfinite(value) else sys.float_info.max


def _cap_inf(value: Any) -> Any:
    """Converter: ``+inf`` (a ratio over a zero norm) becomes the largest float; NaN stays, refused."""
    return sys.float_info.max if value == math.inf and not isinstance(value, bool) else value


@attrs.frozen(kw_only=True)
class Criterion:
    """One criterion's measured ``value`` against its ``budget``, at output leaf ``path``."""

    name: CriterionName = attrs.field(validator=one_of(CRITERIA))
    value: float = attrs.field(converter=_cap_inf, validator=finite(minimum=0))
    budget: float = attrs.field(validator=finite(minimum=0))
    path: str | None = optional(of_type(str))

    def __attrs_post_init__(self) -> None:
        """A share (top-1 agreement) lies in [0, 1]."""
        if self.name in _FLOORS:
            field = attrs.fields(Criterion)
            share(self, field.value, self.value)
            share(self, field.budget, self.budget)

    @property
    def higher_is_better(self) -> bool:
        """Whether the budget is a floor (top-1 agreement) rather than a ceiling."""
        return self.name in _FLOORS

    @property
    def passed(self) -> bool:
        """Whether the value is within its budget."""
        return self.value >= self.budget if self.higher_is_better else self.value <= self.budget

    @property
    def used(self) -> float:
        """The share of the budget used (at most 1 when passed): for a floor, of ``1 - budget``."""
        spent, allowed = self.value, self.budget
        if self.higher_is_better:
            spent, allowed = 1.0 - self.value, 1.0 - self.budget
        if allowed <= 0:
            return 0.0 if spent <= 0 else sys.float_info.max
        return capped(spent / allowed)

    def describe(self) -> str:
        """``rel L2 3.1e-02 > budget 1e-02 (3.1x over)``: the value, the budget and the margin."""
        label = _LABELS[self.name]
        if self.passed:
            sign = ">=" if self.higher_is_better else "<="
            return f"{label} {self.value:.3g} {sign} budget {self.budget:.3g}"
        sign = "<" if self.higher_is_better else ">"
        over = self.used
        factor = "inf" if over >= sys.float_info.max else f"{over:.3g}"
        return f"{label} {self.value:.3g} {sign} budget {self.budget:.3g} ({factor}x over)"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: name, value, budget, path, passed and the share of the budget used."""
        return {**attrs.asdict(self), "passed": self.passed, "used": self.used}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Criterion:
        """The criterion :meth:`to_dict` wrote (``passed`` and ``used`` are derived, not read)."""
        return cls(
            name=data["name"], value=data["value"], budget=data["budget"], path=data.get("path")
        )


_LABELS: dict[str, str] = {
    "rel_l2": "rel L2",
    "outlier_share": "outlier share",
    "top1_agreement": "top-1 agreement",
    "variation": "error / eager's variation",
    "metric": "metric degradation",
}


@attrs.frozen(kw_only=True)
class NormBudgets:
    """The budgets one output leaf is held to when the norm criteria decide."""

    rel_l2: float = attrs.field(validator=finite(minimum=0))
    outlier_share: float = attrs.field(validator=share)
    top1_agreement: float | None = optional(share)


@attrs.frozen(kw_only=True)
class LeafStats:
    """What the shell reduced one output leaf to: squared norms, counts, agreeing rows."""

    n_elements: int = attrs.field(validator=integer(minimum=0))
    diff_sq: float = attrs.field(validator=finite(minimum=0))
    ref_sq: float = attrs.field(validator=finite(minimum=0))
    outliers: int = attrs.field(validator=integer(minimum=0))
    rows: int = attrs.field(default=0, validator=integer(minimum=0))
    rows_agreeing: int = attrs.field(default=0, validator=integer(minimum=0))

    def __attrs_post_init__(self) -> None:
        """Counts cannot exceed what they count."""
        if self.outliers > self.n_elements or self.rows_agreeing > self.rows:
            raise InvalidValueError(
                f"outliers ({self.outliers}) and rows_agreeing ({self.rows_agreeing}) cannot "
                f"exceed n_elements ({self.n_elements}) and rows ({self.rows})"
            )


@attrs.frozen(kw_only=True)
class Spread:
    """One output leaf over the inputs of a check: the candidate's error and eager's variation."""

    n_inputs: int = attrs.field(validator=integer(minimum=0))
    diff_sq: float = attrs.field(validator=finite(minimum=0))
    spread_sq: float = attrs.field(validator=finite(minimum=0))
    ref_sq: float = attrs.field(validator=finite(minimum=0))
    eps: float = attrs.field(validator=finite(minimum=0))


def judge_variation(
    spread: Spread, budget: float, path: str | None, *, recorded: Spread | None = None
) -> Criterion | str:
    """``||candidate - eager|| / ||eager - mean||`` against ``budget``, or why it is not judged."""
    for part in (spread, recorded):
        if part is not None and not isinstance(part, Spread):
            raise InvalidTypeError(f"need a Spread, got {part!r}")
    where = path or "output"
    for part, what in ((spread, "inputs"), (recorded, "recorded inputs")):
        if part is not None and _flat(part):
            detail = (
                "one row"
                if part.n_inputs < 2
                else f"{part.n_inputs} rows, within {RESOLUTION_ULPS} units of its rounding"
            )
            return (
                f"{where}: eager's output does not vary across the {what} ({detail}): the "
                "variation criterion is not judged"
            )
    return Criterion(
        name="variation", value=rel_l2(spread.diff_sq, spread.spread_sq), budget=budget, path=path
    )


def _flat(spread: Spread) -> bool:
    """Whether eager varies over fewer than two rows, or within its rounding."""
    resolution = RESOLUTION_ULPS * spread.eps
    return (
        spread.n_inputs < 2
        or spread.spread_sq < sys.float_info.min
        or spread.spread_sq <= resolution * resolution * spread.ref_sq
    )


def rel_l2(diff_sq: float, ref_sq: float) -> float:
    """``sqrt(diff_sq / ref_sq)``: 0 when both are 0, capped when only the reference is 0."""
    check_finite("diff_sq", diff_sq, minimum=0)
    check_finite("ref_sq", ref_sq, minimum=0)
    if diff_sq == 0:
        return 0.0
    if ref_sq == 0:
        return sys.float_info.max
    return capped(math.sqrt(diff_sq) / math.sqrt(ref_sq))


def rel_l2_budget(floor: float, noise: float | None = None, factor: float = 0.0) -> float:
    """The larger of the dtype ``floor`` and ``factor`` times eager's own error ``noise``."""
    check_finite("floor", floor, minimum=0)
    check_finite("factor", factor, minimum=0)
    if noise is None:
        return floor
    check_finite("noise", noise, minimum=0)
    return max(floor, capped(factor * noise))


def judge_leaf(stats: LeafStats, budgets: NormBudgets, path: str | None) -> tuple[Criterion, ...]:
    """Each norm criterion of one leaf against its budget (top-1 only for classifier rows)."""
    if not isinstance(stats, LeafStats) or not isinstance(budgets, NormBudgets):
        raise InvalidTypeError(f"need LeafStats and NormBudgets, got {stats!r}, {budgets!r}")
    share = stats.outliers / stats.n_elements if stats.n_elements else 0.0
    figures: list[tuple[CriterionName, float, float]] = [
        ("rel_l2", rel_l2(stats.diff_sq, stats.ref_sq), budgets.rel_l2),
        ("outlier_share", share, budgets.outlier_share),
    ]
    if budgets.top1_agreement is not None and stats.rows:
        figures.append(("top1_agreement", stats.rows_agreeing / stats.rows, budgets.top1_agreement))
    return tuple(Criterion(name=n, value=v, budget=b, path=path) for n, v, b in figures)


def degradation(baseline: float, score: float) -> float:
    """How much a metric dropped from eager's ``baseline`` to the candidate's ``score`` (>= 0)."""
    base = check_finite("baseline", baseline)
    got = check_finite("score", score)
    return max(0.0, base - got)


def metric_criterion(
    baselines: Iterable[float], scores: Iterable[float], max_degradation: float
) -> Criterion:
    """A user metric over calls: the mean degradation from eager's score against the budget."""
    pairs = list(zip(baselines, scores, strict=True))
    if not pairs:
        raise InvalidValueError("a metric criterion needs at least one call's scores, got none")
    drops = [degradation(base, score) for base, score in pairs]
    return Criterion(name="metric", value=sum(drops) / len(drops), budget=max_degradation)


def worst_per_criterion(criteria: Iterable[Criterion]) -> tuple[Criterion, ...]:
    """The worst (most budget used) of each criterion name, in :data:`CRITERIA` order."""
    best: dict[str, Criterion] = {}
    for item in criteria:
        if not isinstance(item, Criterion):
            raise InvalidTypeError(f"expected a Criterion, got {item!r}")
        held = best.get(item.name)
        if held is None or _rank(item) > _rank(held):
            best[item.name] = item
    return tuple(best[name] for name in CRITERIA if name in best)


def _rank(c: Criterion) -> tuple[float, float, float, str]:
    """Order by budget use, then value, budget and path (for an order-free merge)."""
    return (c.used, c.value, -c.budget, c.path or "")


def _pairs(value: object) -> tuple[tuple[str, float], ...]:
    """A mapping (or pairs) of output path to figure, as sorted pairs (hashable, order-free)."""
    items = value.items() if isinstance(value, Mapping) else value
    if not isinstance(items, Iterable) or isinstance(items, (str, bytes)):
        raise InvalidTypeError(f"rel_l2 must map output paths to figures, got {value!r}")
    pairs = []
    for item in items:
        if not (isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], str)):
            raise InvalidTypeError(f"rel_l2 must map output paths (str) to figures, got {item!r}")
        pairs.append((item[0], check_finite(f"rel_l2[{item[0]!r}]", item[1], minimum=0)))
    return tuple(sorted(pairs))


@attrs.frozen(kw_only=True)
class NoiseFloor:
    """Eager's own error: float32 eager against a float64 copy, relative L2 per output leaf."""

    rel_l2: tuple[tuple[str, float], ...] = attrs.field(converter=_pairs)
    n_calls: int = attrs.field(default=0, validator=integer(minimum=0))

    def of(self, path: str) -> float | None:
        """Eager's own relative L2 error at ``path`` (None: not measured there)."""
        return dict(self.rel_l2).get(path)

    def merge(self, other: NoiseFloor) -> NoiseFloor:
        """The larger floor of each leaf over both measurements."""
        if not isinstance(other, NoiseFloor):
            raise InvalidTypeError(f"can only merge a NoiseFloor, got {other!r}")
        merged = dict(self.rel_l2)
        for path, figure in other.rel_l2:
            merged[path] = max(figure, merged.get(path, 0.0))
        return NoiseFloor(rel_l2=merged, n_calls=self.n_calls + other.n_calls)

    @property
    def worst(self) -> float | None:
        """The largest figure over the leaves (None when no leaf was measured)."""
        return max((figure for _, figure in self.rel_l2), default=None)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: ``{"rel_l2": {path: figure}, "n_calls": n}``."""
        return {"rel_l2": dict(self.rel_l2), "n_calls": self.n_calls}


def accuracy_conflict(
    criteria: str, given: Iterable[str], name: Mapping[str, str] | None = None
) -> str | None:
    """Why a combination of accuracy settings would do nothing (None: it is coherent)."""
    spell = dict(name or {})
    keys = set(given)

    def say(key: str) -> str:
        return spell.get(key, key)

    if criteria == "elementwise":
        idle = [say(k) for k in _NORM_ONLY if k in keys]
        if idle:
            return (
                f"{', '.join(idle)} applies to the norm criteria, not to "
                f"{say('criteria')} elementwise"
            )
    if "noise_factor" in keys and not keys & {"calibrate", "noise_floor"}:
        return (
            f"{say('noise_factor')} scales eager's measured noise floor: give it with "
            f"{say('calibrate')}"
        )
    return None


def fmt_noise_floor(worst: float | None) -> str:
    """The header's note on eager's measured noise floor (empty when none was measured)."""
    if worst is None:
        return ""
    return f"; eager's noise floor (float32 vs float64) rel L2 {worst:.2g}"
