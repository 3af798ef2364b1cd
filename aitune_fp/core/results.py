"""Result values of a validation: one frozen record per measured candidate, JSON round-trippable."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

import attrs

from aitune_fp.core._checks import check_int, check_nonnegative

__all__ = [
    "RESULT_VERDICTS",
    "PerformanceValidationMixinResult",
    "PerformanceValidationResult",
    "ResultVerdict",
]

ResultVerdict = Literal["faster", "not_faster", "inconclusive"]
RESULT_VERDICTS: tuple[ResultVerdict, ...] = ("faster", "not_faster", "inconclusive")


def _nonneg(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    check_nonnegative(attribute.name, value)


def _positive(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if check_nonnegative(attribute.name, value) == 0:
        raise ValueError(f"{attribute.name} must be > 0, got {value!r}")


def _opt_nonneg(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is not None:
        check_nonnegative(attribute.name, value)


def _opt_count(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is not None:
        check_int(attribute.name, value, minimum=0)


def _opt_batch(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is not None:
        check_int(attribute.name, value, minimum=1)


def _opt_str(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is not None and not isinstance(value, str):
        raise TypeError(f"{attribute.name} must be a str or None, got {value!r}")


def _str(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, str):
        raise TypeError(f"{attribute.name} must be a str, got {value!r}")


def _bool(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, bool):
        raise TypeError(f"{attribute.name} must be a bool, got {value!r}")


def _str_tuple(value: object) -> tuple[str, ...]:
    if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
        raise TypeError(f"flags must be a list or tuple of str, got {value!r}")
    return tuple(value)


def _flags(instance: object, attribute: attrs.Attribute[Any], value: tuple[str, ...]) -> None:
    if not all(isinstance(flag, str) for flag in value):
        raise TypeError(f"{attribute.name} must hold only str, got {value!r}")


def _verdict(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is not None and value not in RESULT_VERDICTS:
        raise ValueError(
            f"{attribute.name} must be one of {RESULT_VERDICTS} or None, got {value!r}"
        )


def _confidence(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < 1:
        raise ValueError(f"{attribute.name} must lie strictly between 0 and 1, got {value!r}")


@attrs.frozen(kw_only=False)
class PerformanceValidationResult:
    """One measured candidate: AITune's five fields first, then what the verdict was based on.

    ``speedup`` is ``throughput / baseline_throughput`` with both throughputs from mean latency
    (AITune's figure). ``estimate``, ``ci_low`` and ``ci_high`` are the speedup the statistical
    verdict was based on (robust pseudo-median of paired ratios) and its confidence bounds.
    """

    backend_description: str = attrs.field(validator=_str)
    throughput: float = attrs.field(validator=_nonneg)
    baseline_throughput: float = attrs.field(validator=_positive)
    speedup: float = attrs.field(validator=_nonneg)
    passed: bool = attrs.field(validator=_bool)
    estimate: float | None = attrs.field(default=None, kw_only=True, validator=_opt_nonneg)
    ci_low: float | None = attrs.field(default=None, kw_only=True, validator=_opt_nonneg)
    ci_high: float | None = attrs.field(default=None, kw_only=True, validator=_opt_nonneg)
    confidence: float | None = attrs.field(default=None, kw_only=True, validator=_confidence)
    n_baseline: int | None = attrs.field(default=None, kw_only=True, validator=_opt_count)
    n_candidate: int | None = attrs.field(default=None, kw_only=True, validator=_opt_count)
    batch_size: int | None = attrs.field(default=None, kw_only=True, validator=_opt_batch)
    required_speedup: float | None = attrs.field(default=None, kw_only=True, validator=_opt_nonneg)
    verdict: ResultVerdict | None = attrs.field(default=None, kw_only=True, validator=_verdict)
    decision: str | None = attrs.field(default=None, kw_only=True, validator=_opt_str)
    reason: str | None = attrs.field(default=None, kw_only=True, validator=_opt_str)
    #: What the measurement noticed that may weaken it (``warmup_not_steady``, ``recompiled``,
    #: ``level_shift_after_pair_<k>``, ``budget_spent``).
    flags: tuple[str, ...] = attrs.field(
        default=(), kw_only=True, converter=_str_tuple, validator=_flags
    )

    def __attrs_post_init__(self) -> None:
        """Cross-field checks: bounds in order and a verdict consistent with ``passed``."""
        if self.ci_low is not None and self.ci_high is not None and self.ci_low > self.ci_high:
            raise ValueError(f"ci_low ({self.ci_low!r}) must be <= ci_high ({self.ci_high!r})")
        if self.verdict is not None and self.passed != (self.verdict == "faster"):
            raise ValueError(
                f"passed={self.passed!r} contradicts verdict={self.verdict!r} "
                "(passed means verdict == 'faster')"
            )

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-ready dict (finite numbers, str, bool, None, lists) in field order."""
        data = attrs.asdict(self, recurse=False)
        data["flags"] = list(self.flags)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PerformanceValidationResult:
        """Rebuild a result from :meth:`to_dict` output; unknown keys are an error."""
        if not isinstance(data, Mapping):
            raise TypeError(f"data must be a mapping, got {data!r}")
        names = {a.name for a in attrs.fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            raise ValueError(f"unknown PerformanceValidationResult keys: {unknown}")
        required = [a.name for a in attrs.fields(cls) if a.default is attrs.NOTHING]
        missing = [key for key in required if key not in data]
        if missing:
            raise ValueError(f"missing PerformanceValidationResult keys: {missing}")
        return cls(**data)


#: AITune's name for the same record, kept so existing code keeps importing it.
PerformanceValidationMixinResult = PerformanceValidationResult
