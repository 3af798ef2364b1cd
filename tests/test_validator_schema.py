"""Specs of the validators' JSON Schema keywords: a validator and its keywords accept alike."""

from __future__ import annotations

import types
from typing import Any

import attrs
import jsonschema
import pytest
from hypothesis import given
from hypothesis import strategies as st

from aitune_fp.core._checks import (
    finite,
    integer,
    of_type,
    one_of,
    open_interval,
    schema_keywords,
)
from aitune_fp.errors import AitunefpError

_ATTRIBUTE: Any = types.SimpleNamespace(name="x")  # all a validator reads of it
_reals = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False)


def _accepts(validator: Any, value: object) -> bool:
    try:
        validator(None, _ATTRIBUTE, value)
    except AitunefpError:
        return False
    return True


def _schema_accepts(schema: dict[str, Any], value: object) -> bool:
    return jsonschema.Draft202012Validator(schema).is_valid(value)


@given(minimum=_reals, strict=st.booleans(), value=_reals)
def test_finite_and_its_keywords_agree(minimum: float, strict: bool, value: float) -> None:
    """``finite(minimum, strict)`` accepts a number exactly when its keywords do."""
    validator = finite(minimum=minimum, strict=strict)
    schema = {"type": "number", **schema_keywords(validator)}
    assert _accepts(validator, value) == _schema_accepts(schema, value)


@given(minimum=st.integers(-100, 100), value=st.integers(-200, 200))
def test_integer_and_its_keywords_agree(minimum: int, value: int) -> None:
    """``integer(minimum)`` accepts an int exactly when its keywords do."""
    validator = integer(minimum=minimum)
    schema = {"type": "integer", **schema_keywords(validator)}
    assert _accepts(validator, value) == _schema_accepts(schema, value)


@given(value=st.floats(min_value=-2, max_value=2, allow_nan=False))
def test_open_interval_and_its_keywords_agree(value: float) -> None:
    """``open_interval(0, 1)``: both ends excluded, by the validator and by its keywords."""
    validator = open_interval(0.0, 1.0)
    schema = {"type": "number", **schema_keywords(validator)}
    assert _accepts(validator, value) == _schema_accepts(schema, value)


@given(value=st.sampled_from(["a", "b", "c", "d"]))
def test_one_of_and_its_enum_agree(value: str) -> None:
    """``one_of`` says its choices as an enum."""
    validator = one_of(("a", "b"))
    assert _accepts(validator, value) == _schema_accepts(schema_keywords(validator), value)


def test_optional_is_looked_through_and_others_say_nothing() -> None:
    """``attrs.validators.optional`` carries the inner keywords; a type check has none."""
    assert schema_keywords(attrs.validators.optional(integer(minimum=2))) == {"minimum": 2}
    assert schema_keywords(finite()) == {}
    assert schema_keywords(of_type(str)) == {}
    assert schema_keywords(None) == {}


@pytest.mark.parametrize("strict", [False, True])
def test_the_bound_keyword_names_strictness(strict: bool) -> None:
    """A strict minimum is ``exclusiveMinimum``, else ``minimum``."""
    key = "exclusiveMinimum" if strict else "minimum"
    assert schema_keywords(finite(minimum=0.5, strict=strict)) == {key: 0.5}
