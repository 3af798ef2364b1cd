"""One JSON-lines writer: the CLI's ``--json-log`` and a sweep's log write records alike.

Spec: :func:`aitune_fp.events.write_records` is the only place a log line is made. A record is
:func:`~aitune_fp.events.to_record`'s (``event``, ``level``, ``timestamp``, then the payload),
non-finite numbers anywhere in it are written as ``null`` (strict JSON: a NaN never ends a
log), each record is one line, and the handle is flushed after each batch.
"""

from __future__ import annotations

import ast
import io
import json
import math
from pathlib import Path
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from aitune_fp.cli.progress import JsonLines
from aitune_fp.events.kinds import Event
from aitune_fp.events.sending import to_record, write_records

_PACKAGE = Path(__file__).resolve().parent.parent / "aitune_fp"

_leaf = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**53), 2**53),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8),
)
_value = st.recursive(
    _leaf,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=10,
)


def _no_constants(name: str) -> Any:
    raise AssertionError(f"not strict JSON: {name}")


def _all_finite(value: Any) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, dict):
        return all(_all_finite(v) for v in value.values())
    if isinstance(value, list):
        return all(_all_finite(v) for v in value)
    return True


@given(st.lists(st.dictionaries(st.text(min_size=1, max_size=6), _value, max_size=4), max_size=4))
def test_records_are_one_strict_json_line_each_and_finite_ones_read_back_equal(
    records: list[dict[str, Any]],
) -> None:
    handle = io.StringIO()
    write_records(handle, records)
    lines = handle.getvalue().splitlines()  # every reader's line breaks, Unicode ones too
    assert len(lines) == len(records)
    for line, record in zip(lines, records, strict=True):
        read = json.loads(line, parse_constant=_no_constants)
        assert _all_finite(read)
        if _all_finite(record):
            assert read == record


def test_a_non_finite_number_at_any_depth_is_written_as_null() -> None:
    handle = io.StringIO()
    write_records(handle, [{"a": math.inf, "b": [1.0, math.nan], "c": {"d": -math.inf}}])
    assert json.loads(handle.getvalue()) == {"a": None, "b": [1.0, None], "c": {"d": None}}


def test_the_cli_log_writes_the_records_a_sweep_writes() -> None:
    """Same keys in the same order: ``event``, ``level``, ``timestamp``, then the payload."""
    event = Event("aitune_fp.validation.x", "info", {"a": 1, "speedup": math.nan})
    handle = io.StringIO()
    JsonLines(handle)(event)
    line = json.loads(handle.getvalue())
    record = to_record(event)
    assert list(line) == list(record) == ["event", "level", "timestamp", "a", "speedup"]
    assert line["speedup"] is None and line["a"] == 1


def test_no_other_module_makes_a_log_line() -> None:
    """``json.dumps`` of a record appears in the writer only (the schema and keys aside)."""
    callers = set()
    for path in _PACKAGE.rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "dumps"
                and any(k.arg == "allow_nan" for k in node.keywords)
            ):
                callers.add(str(path.relative_to(_PACKAGE)))
    assert callers <= {"events/sending.py", "cli/_shared.py"}, callers
