"""How far a candidate's outputs are from eager's, measured against its accuracy budget."""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from aitune_fp.core._checks import as_tuple, finite, integer, of_type, optional, tuple_of
from aitune_fp.core.accuracy import Criterion, worst_per_criterion
from aitune_fp.core.results import Accuracy
from aitune_fp.errors import InvalidTypeError

__all__ = ["Mismatch"]


def _sorted_notes(value: object) -> Any:
    """Converter: notes as a sorted tuple without repeats (anything else is left to validate)."""
    found = as_tuple(value)
    if isinstance(found, tuple) and all(isinstance(note, str) for note in found):
        return tuple(sorted(set(found)))
    return found


@attrs.frozen(kw_only=True)
class Mismatch:
    """The worst disagreement of a candidate with eager, and how much of its budget it used."""

    max_abs_error: float = attrs.field(default=0.0, validator=finite(minimum=0))
    max_rel_error: float = attrs.field(default=0.0, validator=finite(minimum=0))
    budget_used: float = attrs.field(default=0.0, validator=finite(minimum=0))
    atol: float | None = optional(finite(minimum=0))
    rtol: float | None = optional(finite(minimum=0))
    path: str | None = optional(of_type(str))
    n_elements: int = attrs.field(default=0, validator=integer(minimum=0))
    criteria: tuple[Criterion, ...] = attrs.field(
        default=(), converter=as_tuple, validator=tuple_of(of_type(Criterion))
    )
    notes: tuple[str, ...] = attrs.field(
        default=(), converter=_sorted_notes, validator=tuple_of(of_type(str))
    )

    @property
    def within_budget(self) -> bool:
        """True when no element used more than its whole allowance."""
        return self.budget_used <= 1.0

    def merge(self, other: Mismatch) -> Mismatch:
        """The mismatch of both checks together: worst errors, the tolerances of the worst use."""
        if not isinstance(other, Mismatch):
            raise InvalidTypeError(f"can only merge a Mismatch, got {other!r}")
        worst = other if _rank(other) > _rank(self) else self
        return attrs.evolve(
            worst,  # its budget used, tolerances and path
            max_abs_error=max(self.max_abs_error, other.max_abs_error),
            max_rel_error=max(self.max_rel_error, other.max_rel_error),
            n_elements=self.n_elements + other.n_elements,
            criteria=worst_per_criterion((*self.criteria, *other.criteria)),
            notes=(*self.notes, *other.notes),
        )

    @classmethod
    def combine(cls, parts: Iterable[Mismatch]) -> Mismatch:
        """Merge any number of mismatches (an empty one when there are none)."""
        return functools.reduce(cls.merge, parts, cls())

    @property
    def failed_criteria(self) -> tuple[Criterion, ...]:
        """The criteria over their budget (empty for a pass)."""
        return tuple(c for c in self.criteria if not c.passed)

    def describe_criteria(self) -> str:
        """Each criterion against its budget, ``; ``-separated (empty when none decided)."""
        return "; ".join(c.describe() for c in self.criteria)

    def accuracy(self) -> Accuracy:
        """The part of a measured candidate's result this mismatch gives (its worst figures)."""
        return Accuracy(
            **{field.name: getattr(self, field.name) for field in attrs.fields(Accuracy)}
        )

    @classmethod
    def from_fields(cls, fields: Mapping[str, Any]) -> Mismatch:
        """The mismatch a ``correctness_checked`` event carries (its ``output_path`` is ``path``)."""
        return cls(
            max_abs_error=fields["max_abs_error"],
            max_rel_error=fields["max_rel_error"],
            budget_used=fields["budget_used"],
            atol=fields.get("atol"),
            rtol=fields.get("rtol"),
            path=fields.get("output_path"),
            n_elements=fields.get("n_elements", 0),
            criteria=[Criterion.from_dict(c) for c in fields.get("criteria") or ()],
            notes=fields.get("notes") or (),
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict of every field (each criterion with ``passed`` and ``used``)."""
        return {
            **attrs.asdict(self, filter=lambda a, _: a.name not in ("criteria", "notes")),
            "criteria": [c.to_dict() for c in self.criteria],
            "notes": list(self.notes),
        }


def _rank(m: Mismatch) -> tuple[float, bool, float, bool, float, bool, str]:
    """Order by budget use; ties broken on every other field, so merging is order-free."""
    return (
        m.budget_used,
        m.atol is not None,
        m.atol or 0.0,
        m.rtol is not None,
        m.rtol or 0.0,
        m.path is not None,
        m.path or "",
    )
