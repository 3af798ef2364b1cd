"""The plain-text drawing of a run's parts writes exactly what rich writes (issue 32).

``report`` on a large log draws its tables itself when no colour is written; these tests hold
that drawing to rich's, character for character, on generated tables and on whole runs, and
check that what it cannot draw the same (colour, wrapping, records) still goes to rich.
"""

from __future__ import annotations

import io

import attrs
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console, Group, RenderableType
from rich.text import Text

from aitune_fp.cli import plain
from aitune_fp.cli.plain import Column, Grid, plain_lines, print_parts
from aitune_fp.cli.rendering import render_run
from aitune_fp.core.report import CandidateFailure, TuneReport
from tests.factories import fake_result

#: Letters, spaces, wide and combining characters, an emoji; a grid may also hold a tab and a
#: line separator (rich starts a new line there: such a grid is left to rich).
_PLAIN = [*"ab  Z9.-_[]全⚡", "\u0301"]
_BREAKING = ["\t", "\u2028"]


def _console(width: int, *, colour: bool = False) -> Console:
    """A console like ``make_console``'s on a pipe, ``width`` wide (colour only when asked)."""
    return Console(
        file=io.StringIO(),
        width=width,
        markup=False,
        emoji=False,
        highlight=False,
        soft_wrap=False,
        force_terminal=colour,
        color_system="standard" if colour else None,
    )


def _by_rich(parts: list[RenderableType], width: int) -> str:
    """What ``print_parts`` wrote before: rich draws everything, trailing spaces dropped."""
    console = _console(width)
    with console.capture() as captured:
        console.print(Group(*parts), crop=False)
    return "\n".join(line.rstrip() for line in captured.get().split("\n"))


def _printed(parts: list[RenderableType], width: int, *, colour: bool = False) -> str:
    console = _console(width, colour=colour)
    print_parts(console, parts)
    out = console.file
    assert isinstance(out, io.StringIO)
    return out.getvalue()


@st.composite
def _grids(draw: st.DrawFn) -> Grid:
    n = draw(st.integers(2, 6))
    cell = st.text(st.sampled_from(draw(st.sampled_from([_PLAIN, _PLAIN + _BREAKING]))), max_size=16)  # fmt: skip
    columns = [
        Column(
            draw(cell) or "H",
            justify=draw(st.sampled_from(["left", "right"])),
            no_wrap=draw(st.booleans()),
            min_width=draw(st.sampled_from([None, None, 0, 5, 20])),
            max_width=draw(st.sampled_from([None, None, 1, 8, 30])),
        )
        for _ in range(n)
    ]
    rows = draw(st.lists(st.tuples(*[cell] * n), max_size=4))
    styled = [tuple(Text(c, style="green") if i == 1 else c for i, c in enumerate(r)) for r in rows]
    return Grid(columns, styled, [Text("record")], wrapping=draw(st.integers(0, 20)))


@settings(max_examples=400, deadline=None)
@given(_grids(), st.integers(10, 220))
def test_a_grid_drawn_here_is_what_rich_draws(grid: Grid, width: int) -> None:
    """Whenever the plain drawing answers, it is rich's drawing of the same table, line for line."""
    lines = plain_lines(grid, width)
    if lines is not None:
        assert "\n".join(line.rstrip() for line in lines) + "\n" == _by_rich([grid], width)


@settings(max_examples=300, deadline=None)
@given(st.text(st.sampled_from(_PLAIN + _BREAKING), max_size=60), st.integers(1, 80), st.booleans())
def test_a_line_drawn_here_is_what_rich_draws(text: str, width: int, whole: bool) -> None:
    """A line of text (one that must not wrap, too) is rich's line whenever it is drawn here."""
    part = Text(text, no_wrap=True, overflow="ignore") if whole else Text(text)
    lines = plain_lines(part, width)
    if lines is not None:
        assert "\n".join(line.rstrip() for line in lines) + "\n" == _by_rich([part], width)


def test_a_table_that_fits_is_drawn_here() -> None:
    """Not vacuous: a plain table on a wide console is drawn here, with rich's rule and widths."""
    grid = Grid(
        [Column("Backend", no_wrap=True), Column("Eager/s", justify="right"), Column("Reason")],
        [("A()", "1,000", Text("ok", style="red")), ("LongerName()", "12", "")],
        [],
        wrapping=10,
    )
    lines = plain_lines(grid, 80)
    assert lines == [
        "Backend        Eager/s   Reason",
        "───────────────────────────────",
        "A()              1,000   ok    ",
        "LongerName()        12         ",
    ]
    assert "\n".join(x.rstrip() for x in lines) + "\n" == _by_rich([grid], 80)
    assert plain_lines(grid, 20) is None  # narrower than its whole cells: the records, by rich


def _runs() -> list[TuneReport]:
    long_reason = "the candidate's output differs from eager's at output[0] " * 6
    failure = CandidateFailure(
        backend_description="Z()",
        stage="build",
        error_type="ValueError",
        reason=long_reason,
        traceback_path="/t/x.txt",
    )
    flagged = fake_result("C()", flags=("serial_correlation", "level_shift_after_pair_12"))
    base = TuneReport(module_name="mlp", run_id="r", baseline_throughput=500.0, batch_size=8)
    short = attrs.evolve(failure, reason="no CUDA device", stage="unavailable")
    steady = fake_result("D()", flags=("warmup_not_steady",), reason="")
    return [
        TuneReport(module_name="mlp", run_id="r0"),
        attrs.evolve(
            base,
            results=(steady,),
            failures=(short, attrs.evolve(short, backend_description="E()")),
        ),
        attrs.evolve(base, results=(fake_result("A()"), fake_result("全角B()", verdict="faster"))),
        attrs.evolve(
            base, results=(flagged,), failures=(failure,), selected_backend="TorchEagerBackend()"
        ),
        attrs.evolve(base, results=(fake_result("N" * 90, reason="x" * 120),)),
    ]


def test_whole_runs_print_as_rich_prints_them() -> None:
    """At every width, a run printed through the plain drawing is rich's text, byte for byte."""
    drawn = 0
    for run in _runs():
        parts = [Text("Run r · mlp"), *render_run(run, baseline_at="2025-01-02 12:00:01 UTC")]
        for width in (30, 50, 80, 100, 120, 160, 240):
            assert _printed(parts, width) == _by_rich(parts, width), (run.run_id, width)
            drawn += sum(plain_lines(p, width) is not None for p in parts if isinstance(p, Grid))
    assert drawn > 5  # the plain drawing did draw tables here


def test_rich_draws_what_only_it_can() -> None:
    """Colour, a cell that wraps and a line longer than the console go to rich, not here."""
    run = _runs()[3]
    parts = render_run(run, verbose=True)
    coloured = _printed(parts, 160, colour=True)
    assert "\x1b[" in coloured and "not_faster" in coloured  # the verdict keeps its colour
    results = next(p for p in parts if isinstance(p, Grid))
    assert plain_lines(results, 160) is None  # its flags wrap in the Quality column
    assert plain_lines(Text("x" * 90), 80) is None
    assert plain_lines(Text("/a/long/path" * 9, no_wrap=True, overflow="ignore"), 80) == [
        "/a/long/path" * 9
    ]
    assert plain.plain_lines(Text("a\u2028b"), 80) is None
