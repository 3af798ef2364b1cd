"""Argument checks and validators: wrong kind InvalidTypeError, bad value InvalidValueError."""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Callable, Iterable
from typing import Any, TypeAlias, TypeVar

import attrs

from aitune_fp.errors import InvalidTypeError, InvalidValueError

#: An attrs field validator: called with the instance, the field and the value; raises if bad.
Validator: TypeAlias = Callable[[Any, "attrs.Attribute[Any]", Any], None]

_T = TypeVar("_T")


def got(value: object) -> str:
    """``value``'s repr and type name, for a type error's message."""
    return f"{value!r} ({type(value).__name__})"


def _check_real(name: str, value: object) -> float:
    """Return ``value`` as a float if it is a real number (int or float, not a bool), else raise."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidTypeError(f"{name} must be a real number, got {got(value)}")
    return float(value)


def check_finite(
    name: str,
    value: object,
    *,
    minimum: float | None = None,
    strict: bool = False,
    maximum: float | None = None,
) -> float:
    """Return ``value`` as a float, or raise if it is not a finite real number (bools refused)."""
    try:
        result = _check_real(name, value)
    except OverflowError:  # an int too large for a float
        raise InvalidValueError(
            f"{name} must be finite, got an integer beyond float range"
        ) from None
    if not math.isfinite(result):
        raise InvalidValueError(f"{name} must be finite, got {value!r}")
    if minimum is not None and (result <= minimum if strict else result < minimum):
        raise InvalidValueError(
            f"{name} must be {'>' if strict else '>='} {minimum:g}, got {value!r}"
        )
    if maximum is not None and result > maximum:
        raise InvalidValueError(f"{name} must be <= {maximum:g}, got {value!r}")
    return result


def check_nonnegative(name: str, value: object) -> float:
    """Return ``value`` as a float, or raise if it is not finite and >= 0."""
    return check_finite(name, value, minimum=0)


def check_positive(name: str, value: object) -> float:
    """Return ``value`` as a float, or raise if it is not finite and > 0."""
    return check_finite(name, value, minimum=0, strict=True)


def check_open_interval(name: str, value: object, low: float, high: float) -> float:
    """Return ``value`` as a float, or raise if it is not strictly between ``low`` and ``high``."""
    result = _check_real(name, value)
    if not low < result < high:  # NaN fails too
        raise InvalidValueError(
            f"{name} must lie strictly between {low:g} and {high:g}, got {value!r}"
        )
    return result


def check_int(name: str, value: object, *, minimum: int = 1, maximum: int | None = None) -> int:
    """Return ``value`` if it is an int (not a bool) >= ``minimum`` (and <= ``maximum``), else raise."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidTypeError(f"{name} must be an integer, got {got(value)}")
    if value < minimum:
        raise InvalidValueError(f"{name} must be >= {minimum}, got {value!r}")
    if maximum is not None and value > maximum:
        shown = (
            repr(value) if value.bit_length() < 128 else f"an integer of {len(str(value))} digits"
        )
        raise InvalidValueError(f"{name} must be <= {maximum}, got {shown}")
    return value


def comma_items(text: str, seps: str = ",") -> list[str]:
    """``text``'s items split at ``seps``, stripped; an empty one (``a,,b``, ``a,``) is refused.

    Never dropped: a list that lost an item would run something other than what was asked.
    """
    items = [item.strip() for item in re.split(f"[{re.escape(seps)}]", text)]
    if "" in items:
        at = f"item {items.index('') + 1} of {text!r}" if len(items) > 1 else repr(text)
        raise InvalidValueError(f"{at} is empty")
    return items


def check_threshold(name: str, value: object) -> float:
    """Return a threshold percent as a float, or raise if it is not finite or is <= -100."""
    result = check_finite(name, value)
    if result <= -100.0:
        raise InvalidValueError(f"{name} must be > -100 (percent), got {value!r}")
    return result


def check_type(name: str, value: _T, *types: type) -> _T:
    """Return ``value`` if it is an instance of one of ``types``, else raise naming them."""
    refused_bool = isinstance(value, bool) and bool not in types
    if refused_bool or not isinstance(value, types):
        wanted = " or ".join(t.__name__ for t in types)
        raise InvalidTypeError(f"{name} must be a {wanted}, got {got(value)}")
    return value


def check_choice(name: str, value: _T, choices: tuple[Any, ...]) -> _T:
    """Return ``value`` if it is one of ``choices``; the wrong type or an unknown value raises."""
    kinds = tuple({type(choice) for choice in choices})
    if (isinstance(value, bool) and bool not in kinds) or not isinstance(value, kinds):
        raise InvalidTypeError(f"{name} must be one of {choices}, got {got(value)}")
    if value not in choices:
        raise InvalidValueError(f"{name} must be one of {choices}, got {value!r}")
    return value


def _saying(validate: Validator, **keywords: Any) -> Validator:
    """``validate``, carrying the JSON Schema keywords it enforces (see :func:`schema_keywords`)."""
    validate.__dict__["json_schema"] = keywords
    return validate


def schema_keywords(validator: object) -> dict[str, Any]:
    """The JSON Schema keywords a validator of this module enforces ({} for any other)."""
    inner = getattr(validator, "validator", None)
    if inner is not None:
        return schema_keywords(inner)
    return dict(getattr(validator, "json_schema", {}))


def finite(
    *, minimum: float | None = None, strict: bool = False, maximum: float | None = None
) -> Validator:
    """Validator: a finite real number (bools refused) from ``minimum`` (``>`` if strict) to ``maximum``."""

    def validate(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
        check_finite(attribute.name, value, minimum=minimum, strict=strict, maximum=maximum)

    keywords: dict[str, float] = {} if maximum is None else {"maximum": maximum}
    if minimum is not None:
        keywords["exclusiveMinimum" if strict else "minimum"] = minimum
    return _saying(validate, **keywords) if keywords else validate


def not_nan() -> Validator:
    """Validator: a real number that may be infinite but not NaN (an unbounded interval end)."""

    def validate(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
        if math.isnan(_check_real(attribute.name, value)):
            raise InvalidValueError(f"{attribute.name} must not be NaN, got {value!r}")

    return _saying(validate, type=["number", "null"], description="null: unbounded (infinite)")


def open_interval(low: float, high: float) -> Validator:
    """Validator: a real number strictly between ``low`` and ``high`` (a confidence level)."""

    def validate(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
        check_open_interval(attribute.name, value, low, high)

    return _saying(validate, exclusiveMinimum=low, exclusiveMaximum=high)


def integer(*, minimum: int = 1, maximum: int | None = None) -> Validator:
    """Validator: an int, not a bool, ``>= minimum`` (and ``<= maximum``)."""

    def validate(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
        check_int(attribute.name, value, minimum=minimum, maximum=maximum)

    if maximum is None:
        return _saying(validate, minimum=minimum)
    return _saying(validate, minimum=minimum, maximum=maximum)


def of_type(*types: type) -> Validator:
    """Validator: an instance of one of ``types`` (like ``attrs.validators.instance_of``)."""

    def validate(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
        check_type(attribute.name, value, *types)

    return validate


def one_of(choices: tuple[Any, ...]) -> Validator:
    """Validator: one of ``choices`` (like ``attrs.validators.in_``, with this module's errors)."""

    def validate(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
        check_choice(attribute.name, value, choices)

    return _saying(validate, enum=list(choices))


def share(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    """Validator: a finite number in ``[0, 1]``."""
    if check_finite(attribute.name, value, minimum=0) > 1:
        raise InvalidValueError(f"{attribute.name} must be at most 1, got {value!r}")


def increasing(instance: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    """Validator: looks, at least one, in strictly increasing order."""
    if not isinstance(value, tuple) or not value:
        raise InvalidValueError(f"{attribute.name} must hold at least one look, got {value!r}")
    if any(b <= a for a, b in itertools.pairwise(value)):
        raise InvalidValueError(f"{attribute.name} must be strictly increasing, got {value!r}")


def optional(member: Validator) -> Any:
    """A field that is None by default, else passes ``member``."""
    return attrs.field(default=None, validator=attrs.validators.optional(member))


def tuple_of(member: Validator) -> Validator:
    """Validator: a tuple whose every item passes ``member`` (see :func:`as_tuple` to convert)."""
    return attrs.validators.deep_iterable(
        member_validator=member, iterable_validator=of_type(tuple)
    )


def as_tuple(value: object) -> Any:
    """Converter: a list or other iterable (not a str or bytes) becomes a tuple; else unchanged."""
    if isinstance(value, Iterable) and not isinstance(value, (str, bytes)):
        return tuple(value)
    return value
