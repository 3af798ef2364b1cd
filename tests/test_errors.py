"""Specs of the error rule: one base, and the same bad value gets the same error type everywhere.

Rule: the wrong kind of value (a str for a number, a bool for an int, None where a value is
required) is an InvalidTypeError; the right kind with a bad value (NaN, infinity, negative, out of
range, not a choice) is an InvalidValueError. Both are AitunefpErrors and keep the builtin bases.
"""

from __future__ import annotations

import ast
import builtins
import math
import subprocess
import sys
import types
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

import aitune_fp
from aitune_fp import AitunefpError, PerformanceValidationResult, ProfilingConfig
from aitune_fp.core.config import for_batch_size
from aitune_fp.core.results import PARTS
from aitune_fp.core.timings import throughput_from_latencies
from aitune_fp.core.verdict import SpeedupDecision
from aitune_fp.errors import InvalidStateError, InvalidTypeError, InvalidValueError
from aitune_fp.events.kinds import structure
from aitune_fp.inputs import GraphSpec, as_sample
from tests.factories import flat_result

# --------------------------------------------------------------------------------------------
# The records under test: a valid set of arguments for each
# --------------------------------------------------------------------------------------------


def _tolerances() -> type[Any]:
    from aitune_fp.correctness.tolerances import Tolerances

    return Tolerances


#: record class (or a loader, for one that imports torch) -> valid keyword arguments.
RECORDS: dict[str, tuple[Callable[[], type[Any]], dict[str, Any]]] = {
    "PerformanceValidationResult": (
        lambda: PerformanceValidationResult,
        {
            "backend_description": "x",
            "throughput": 2.0,
            "baseline_throughput": 1.0,
            "speedup": 2.0,
            "passed": True,
        },
    ),
    **{cls.__name__: (lambda cls=cls: cls, {}) for cls in PARTS.values()},
    "ProfilingConfig": (lambda: ProfilingConfig, {}),
    "SpeedupDecision": (
        lambda: SpeedupDecision,
        {
            "verdict": "faster",
            "speedup": 1.5,
            "ci_low": 1.2,
            "ci_high": 1.8,
            "n_baseline": 10,
            "n_candidate": 10,
            "confidence": 0.95,
            "required_speedup": 1.01,
            "method": "wilcoxon_signed_rank_hl",
            "cv_baseline": 0.1,
            "cv_candidate": 0.1,
        },
    ),
    "GraphSpec": (lambda: GraphSpec, {"max_batch_size": 8}),
    "Tolerances": (_tolerances, {}),
}

#: Fields where an infinite value is meaningful (an unbounded interval end).
ALLOWS_INF = {("SpeedupDecision", "ci_high"), ("SpeedupDecision", "futility_high")}


@attrs.frozen
class NumericField:
    """One numeric field of a record: its kind (int or float) and whether None is allowed."""

    record: str
    name: str
    kind: type
    optional: bool

    def build(self, value: object) -> object:
        """Construct the record with this field set to ``value`` and the others valid."""
        load, kwargs = RECORDS[self.record]
        return load()(**{**kwargs, self.name: value})


def _numeric_fields() -> list[NumericField]:
    """Every int or float field (optional ones included) of every record, from the type hints."""
    found = []
    for record, (load, _) in RECORDS.items():
        cls = load()
        hints = typing.get_type_hints(cls)
        for field in attrs.fields(cls):
            hint = hints[field.name]
            args = typing.get_args(hint) if isinstance(hint, types.UnionType) else (hint,)
            kinds = [a for a in args if a is not type(None)]
            if len(kinds) == 1 and kinds[0] in (int, float):
                found.append(NumericField(record, field.name, kinds[0], type(None) in args))
    return found


NUMERIC_FIELDS = _numeric_fields()
_IDS = [f"{f.record}.{f.name}" for f in NUMERIC_FIELDS]


def expected_error(field: NumericField, value: object) -> type[Exception] | None:
    """The rule: which error ``value`` gets in ``field`` (None: accepted).

    Only for values no numeric field accepts as a number: NaN, infinities and numbers <= -1.
    """
    if value is None:
        return None if field.optional else InvalidTypeError
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return InvalidTypeError
    if field.kind is int and not isinstance(value, int):
        return InvalidTypeError
    if value == math.inf and (field.record, field.name) in ALLOWS_INF:
        return None
    return InvalidValueError


def test_the_numeric_fields_are_found() -> None:
    """The spec sees the fields it should (so an empty table cannot pass vacuously)."""
    names = {(f.record, f.name) for f in NUMERIC_FIELDS}
    assert ("PerformanceValidationResult", "throughput") in names
    assert ("Decision", "n_baseline") in names and ("Environment", "threads") in names
    assert ("ProfilingConfig", "confidence") in names
    assert ("ProfilingConfig", "threads") in names
    assert ("SpeedupDecision", "ci_high") in names
    assert ("GraphSpec", "max_batch_size") in names
    assert ("Tolerances", "reduced_rtol") in names
    assert len(NUMERIC_FIELDS) >= 35


BAD_VALUES = [math.nan, math.inf, -math.inf, -1, -1.0, "x", True, False, None, [1.0]]


class TestSameValueSameError:
    @pytest.mark.parametrize("field", NUMERIC_FIELDS, ids=_IDS)
    @pytest.mark.parametrize("bad", BAD_VALUES, ids=repr)
    def test_rule(self, field: NumericField, bad: object) -> None:
        """NaN/inf/-1 are InvalidValueError; "x", True and None (when required) InvalidTypeError."""
        error = expected_error(field, bad)
        if error is None:
            field.build(bad)
            return
        with pytest.raises(error, match=field.name) as info:
            field.build(bad)
        assert isinstance(info.value, AitunefpError)
        assert repr(bad) in str(info.value)

    @pytest.mark.parametrize("field", [f for f in NUMERIC_FIELDS if f.kind is int], ids=repr)
    def test_float_for_int_is_a_type_error(self, field: NumericField) -> None:
        """A float where an int is wanted is the wrong type, even when it is integral."""
        with pytest.raises(InvalidTypeError, match=field.name):
            field.build(2.0)

    @given(
        st.one_of(
            st.sampled_from([math.nan, math.inf, -math.inf, None, True, False]),
            st.floats(max_value=-1.0),
            st.integers(max_value=-1),
            st.text(max_size=5),
            st.lists(st.integers(), max_size=2),
        )
    )
    def test_one_type_per_value_and_kind(self, bad: object) -> None:
        """For one bad value, every field of the same kind raises the same error type."""
        seen: dict[type, set[type[Exception] | None]] = {int: set(), float: set()}
        for field in NUMERIC_FIELDS:
            expected = expected_error(field, bad)
            if expected is None:
                continue
            with pytest.raises(AitunefpError) as info:
                field.build(bad)
            assert type(info.value) is expected, (field, bad, info.value)
            seen[field.kind].add(type(info.value))
        assert all(len(kinds) <= 1 for kinds in seen.values()), seen


class TestOtherFields:
    @pytest.mark.parametrize(
        ("record", "field", "bad", "error"),
        [
            ("ProfilingConfig", "decision", "two words", InvalidValueError),
            ("ProfilingConfig", "decision", None, InvalidTypeError),
            ("ProfilingConfig", "decision", 1, InvalidTypeError),
            ("ProfilingConfig", "batching", 1, InvalidTypeError),
            ("ProfilingConfig", "batching", None, InvalidTypeError),
            ("ProfilingConfig", "batch_sizes", (0,), InvalidValueError),
            ("ProfilingConfig", "batch_sizes", (math.nan,), InvalidTypeError),
            ("ProfilingConfig", "batch_sizes", ("x",), InvalidTypeError),
            ("ProfilingConfig", "batch_sizes", (True,), InvalidTypeError),
            ("ProfilingConfig", "batch_sizes", 4, InvalidTypeError),
            ("ProfilingConfig", "batch_sizes", None, InvalidTypeError),
            ("ProfilingConfig", "looks", (), InvalidValueError),
            ("ProfilingConfig", "looks", (10, 10), InvalidValueError),
            ("ProfilingConfig", "looks", (-1,), InvalidValueError),
            ("ProfilingConfig", "looks", ("x",), InvalidTypeError),
            ("ProfilingConfig", "looks", "abc", InvalidTypeError),
            ("PerformanceValidationResult", "backend_description", None, InvalidTypeError),
            ("PerformanceValidationResult", "passed", 1, InvalidTypeError),
            ("PerformanceValidationResult", "passed", None, InvalidTypeError),
            ("PerformanceValidationResult", "decided", None, InvalidTypeError),
            ("Decision", "verdict", "maybe", InvalidValueError),
            ("Decision", "verdict", 1, InvalidTypeError),
            ("Decision", "rule", 1, InvalidTypeError),
            ("Decision", "flags", "recompiled", InvalidTypeError),
            ("Decision", "flags", [1], InvalidTypeError),
            ("Decision", "flags", None, InvalidTypeError),
            ("SpeedupDecision", "verdict", "maybe", InvalidValueError),
            ("SpeedupDecision", "verdict", None, InvalidTypeError),
            ("SpeedupDecision", "method", "t_test", InvalidValueError),
            ("GraphSpec", "name", None, InvalidTypeError),
        ],
    )
    def test_rule(self, record: str, field: str, bad: object, error: type[Exception]) -> None:
        """Choices, flags, tuples and strings follow the same rule, naming the field."""
        load, kwargs = RECORDS[record]
        with pytest.raises(error, match=field):
            load()(**{**kwargs, field: bad})

    def test_cross_field_checks_are_value_errors(self) -> None:
        """Checks across fields are about values: InvalidValueError."""
        with pytest.raises(InvalidValueError, match="warmup_window"):
            ProfilingConfig(warmup_window=10, warmup_max_calls=5)
        with pytest.raises(InvalidValueError, match="ci_low"):
            flat_result("x", 2.0, 1.0, 2.0, True, ci_low=2.0, ci_high=1.0)
        with pytest.raises(InvalidValueError, match="min_batch_size"):
            GraphSpec(max_batch_size=2, min_batch_size=4)


def _any(value: object) -> Any:
    """``value`` typed as Any: a deliberately wrong argument for a typed function."""
    return value


class TestArguments:
    @pytest.mark.parametrize(
        ("call", "error"),
        [
            (lambda: aitune_fp.compute_speedup(1.0, math.nan), InvalidValueError),
            (lambda: aitune_fp.compute_speedup(1.0, _any("x")), InvalidTypeError),
            (lambda: aitune_fp.compute_speedup(1.0, _any(None)), InvalidTypeError),
            (lambda: aitune_fp.compute_speedup(-1.0, 1.0), InvalidValueError),
            (lambda: aitune_fp.meets_threshold(True), InvalidTypeError),
            (lambda: aitune_fp.required_speedup(-100.0), InvalidValueError),
            (lambda: for_batch_size(ProfilingConfig(), True), InvalidTypeError),
            (lambda: for_batch_size(ProfilingConfig(), -1), InvalidValueError),
            (
                lambda: aitune_fp.decide_speedup([1.0, 1.0], [1.0, 1.0], paired=_any(1)),
                InvalidTypeError,
            ),
            (
                lambda: aitune_fp.decide_speedup([1.0, 1.0], [1.0, 1.0], confidence=math.nan),
                InvalidValueError,
            ),
            (
                lambda: aitune_fp.decide_speedup([1.0, 1.0], [1.0, 1.0], confidence=_any("x")),
                InvalidTypeError,
            ),
            (lambda: throughput_from_latencies([math.nan], 1), InvalidValueError),
            (lambda: throughput_from_latencies(_any("x"), 1), InvalidTypeError),
            (lambda: as_sample(None), InvalidTypeError),
            (lambda: structure(PerformanceValidationResult, _any(None), "r"), InvalidTypeError),
            (lambda: structure(PerformanceValidationResult, {"x": 1}, "r"), InvalidValueError),
        ],
    )
    def test_functions_follow_the_rule(self, call: Callable[[], object], error: type) -> None:
        """Plain functions apply the same rule to their arguments as the records to fields."""
        with pytest.raises(error):
            call()


# --------------------------------------------------------------------------------------------
# One base: the hierarchy, and no stray builtin raise in the converted modules
# --------------------------------------------------------------------------------------------


def _library_errors() -> list[tuple[type[Exception], type[Exception]]]:
    """(error, the builtin it also is) for every error class the library defines."""
    from aitune_fp.cli._shared import UsageError
    from aitune_fp.correctness.failures import CorrectnessError, ReferenceFailedError
    from aitune_fp.models import UserModelError
    from aitune_fp.profiling.calls import ProfilingError

    return [
        (InvalidValueError, ValueError),
        (InvalidTypeError, TypeError),
        (InvalidStateError, RuntimeError),
        (CorrectnessError, RuntimeError),
        (ReferenceFailedError, RuntimeError),
        (ProfilingError, RuntimeError),
        (UserModelError, ValueError),
        (UsageError, Exception),
    ]


class TestHierarchy:
    def test_every_error_is_an_aitunefp_error_and_its_builtin(self) -> None:
        """One ``except AitunefpError`` catches them all; ``except ValueError`` code still works."""
        for error, builtin in _library_errors():
            assert issubclass(error, AitunefpError), error
            assert issubclass(error, builtin), error

    def test_base_is_exported_and_torch_free(self) -> None:
        """The base imports from the package, the rest from aitune_fp.errors, without torch."""
        code = (
            "import sys\n"
            "from aitune_fp import AitunefpError\n"
            "from aitune_fp.errors import InvalidTypeError, InvalidValueError\n"
            "assert issubclass(InvalidValueError, AitunefpError)\n"
            "assert 'torch' not in sys.modules, 'torch was imported'\n"
        )
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=False
        )
        assert out.returncode == 0, out.stderr
        assert "AitunefpError" in aitune_fp.__all__
        assert {"InvalidTypeError", "InvalidValueError"} <= set(aitune_fp.errors.__all__)


_PACKAGE = Path(aitune_fp.__file__).parent

#: Every module of the package: deliberate raises are all AitunefpErrors.
ALL_MODULES = sorted(str(p.relative_to(_PACKAGE)) for p in _PACKAGE.rglob("*.py"))

#: Builtin raises that are part of a protocol, or never leave their module:
#: (module, function, exception).
INTERNAL_RAISES = {
    ("__init__.py", "__getattr__", "AttributeError"),  # a module __getattr__ must raise it
    ("cli/_shared.py", "on_broken_pipe", "BrokenPipeError"),  # re-raised to the interpreter
    # a Ctrl-C passed on to the parent
    ("sweep/task.py", "_in_child", "KeyboardInterrupt"),
    # abstract methods: a subclass that forgets one is a programming error, not a user's
    ("backends/base.py", "_build", "NotImplementedError"),
    ("backends/base.py", "_infer", "NotImplementedError"),
    ("pipeline/strategies.py", "tune_session", "NotImplementedError"),
}

_BUILTIN_ERRORS = {
    name
    for name, value in vars(builtins).items()
    if isinstance(value, type) and issubclass(value, BaseException)
}


def _builtin_raises(module: str) -> list[tuple[str, str, int]]:
    """(function, exception name, line) of each ``raise <builtin>(...)`` in ``module``."""
    tree = ast.parse((_PACKAGE / module).read_text(encoding="utf-8"))
    found = []
    for func in ast.walk(tree):
        if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for node in ast.walk(func):
            if not isinstance(node, ast.Raise) or node.exc is None:
                continue
            target = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
            if isinstance(target, ast.Name) and target.id in _BUILTIN_ERRORS:
                found.append((func.name, target.id, node.lineno))
    return found


@pytest.mark.parametrize("module", ALL_MODULES)
def test_no_builtin_error_raised_on_purpose(module: str) -> None:
    """Deliberate raises use the library's errors (which also are the builtins)."""
    stray = [
        f"{module}:{line} {func}() raises {name}"
        for func, name, line in _builtin_raises(module)
        if (module, func, name) not in INTERNAL_RAISES
    ]
    assert not stray, stray


def test_every_allowed_builtin_raise_still_exists() -> None:
    """The allow-list above names raises the package still has: a stale entry would let a new
    raise of the same name in a module that reuses the path slip through unseen."""
    stale = [
        entry
        for entry in sorted(INTERNAL_RAISES)
        if entry[0] not in ALL_MODULES
        or entry[1:] not in {(f, n) for f, n, _ in _builtin_raises(entry[0])}
    ]
    assert not stale, stale
