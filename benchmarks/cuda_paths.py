"""Which CUDA code paths the CPU test suite reaches (issue 24): find them by AST, run under coverage.

Run from the repository root::

    python benchmarks/cuda_paths.py              # scan, run the tests under coverage, print the table
    python benchmarks/cuda_paths.py --list       # only the scan: every CUDA path as file:line
    python benchmarks/cuda_paths.py --out T.md   # also write the markdown table to T.md

**The scan** walks the AST of ``aitune_fp/profiling/``, ``aitune_fp/backends/``,
``aitune_fp/measure/`` (telemetry and the head-to-head included) and ``aitune_fp/pipeline/``
(not grep: a comment or docstring saying "CUDA" is no code path)
and lists three kinds of CUDA path:

- ``if``: an ``if``/``elif``/``while`` whose *condition* mentions the GPU: ``cuda`` in any
  spelling (``device.type == "cuda"``, ``torch.cuda.is_available()``), device time
  (``device_span``/``span``, ``has_device_clock``, ``*_device_s``, ``clock == "device"``),
  cold cache (``cache == "cold"``, ``flush``, ``l2``), NVML (``nvml``) or device memory
  (``mem_get_info``). Coverage records which of its two sides ran.
- ``expr``: the same, as a conditional expression (``a if cond else b``) or a short-circuit
  ``and``/``or`` outside an ``if``. Coverage traces lines, not expressions: only whether the
  line ran is known, not which side was taken.
- ``call``: a statement that calls into CUDA or NVML (``torch.cuda.*``, ``CudaTimer(...)``,
  ``synchronize``, ``Event(enable_timing=...)``, ``l2_flusher(...)``, ``pynvml.*``, a
  ``torch.device("cuda", ...)``): reached or not.

**The run**: the CPU test files that touch these modules (``TEST_FILES``; ``-m "not compile"``,
so no compile; ``gpu`` tests skip without a device and count here only when run on one) under
``coverage run --branch`` with ``dynamic_context = test_function``, so each executed arc is
tagged with the test that ran it. A path is *reached* when its line ran in some test; an ``if``
is *fully* reached when both its sides ran (then its GPU side ran, whichever that is). The table
names up to three tests per path (``+N`` more).

``coverage`` is a benchmark-only tool here (``pip install coverage``): no test imports it, so
it is in no extra of pyproject.toml.
"""

from __future__ import annotations

import argparse
import ast
import os
import re
import sqlite3
import subprocess
import sys
import tempfile
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: The code scanned: the issue's profiling, backends and measure, plus where else CUDA is touched.
TARGETS = (
    "aitune_fp/profiling",
    "aitune_fp/backends",
    "aitune_fp/measure",
    "aitune_fp/pipeline",
)

#: The CPU test files that touch these modules (never the whole suite: it is long).
TEST_FILES = (
    "tests/test_profiling.py",
    "tests/test_two_clocks.py",
    "tests/test_telemetry.py",
    "tests/test_cold_cache.py",
    "tests/test_backends.py",
    "tests/test_converted_backends.py",
    "tests/test_measure.py",
    "tests/test_timing_batches.py",
    "tests/test_headtohead.py",
    "tests/test_heldout.py",
    "tests/test_session.py",
    "tests/test_threads_load.py",
    "tests/test_cuda_paths.py",
)

#: A condition that decides between a GPU path and another one.
CONDITION = re.compile(
    r"cuda|synchroni[sz]e|enable_timing|\bl2|nvml|device_span|has_device_clock|\bspan\b"
    r"|_device_s\b|\"device\"|\"cold\"|flush|mem_get_info|\.type\s*(?:[!=]=|(?:not\s+)?in\b)",
    re.IGNORECASE,
)
#: A call into CUDA or NVML.
CALL = re.compile(
    r"torch\.cuda\.|\bCudaTimer\(|_CudaEventSpan\(|synchronize\(|enable_timing|l2_flusher\("
    r"|\bpynvml\b|torch\.device\(\s*\"cuda\"",
)


@dataclass
class CudaPath:
    """One CUDA path: where it is, its kind and text, and (after the run) who reached it."""

    file: str
    line: int
    kind: str  # if | expr | call
    text: str
    body_line: int = 0  # ``if``: the first line of the true side
    true_tests: set[str] = field(default_factory=set)
    false_tests: set[str] = field(default_factory=set)
    line_tests: set[str] = field(default_factory=set)

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"

    @property
    def reached(self) -> bool:
        return bool(self.line_tests or self.true_tests or self.false_tests)

    @property
    def sides(self) -> str:
        if self.kind != "if":
            return "line ran" if self.reached else "-"
        taken = [s for s, t in (("true", self.true_tests), ("false", self.false_tests)) if t]
        return " and ".join(taken) if taken else "-"

    @property
    def full(self) -> bool:
        return bool(self.true_tests and self.false_tests) if self.kind == "if" else self.reached


def _files() -> list[Path]:
    out: list[Path] = []
    for target in TARGETS:
        path = ROOT / target
        out.extend(sorted(path.rglob("*.py")) if path.is_dir() else [path])
    return out


def _text(source: str, node: ast.AST) -> str:
    return " ".join((ast.get_source_segment(source, node) or "").split())


def _statement_lines(tree: ast.AST) -> dict[int, int]:
    """Each node's innermost enclosing statement's first line: the line coverage records."""
    lines: dict[int, int] = {}

    def visit(node: ast.AST, line: int) -> None:
        if isinstance(node, ast.stmt):
            line = node.lineno
        lines[id(node)] = line
        for child in ast.iter_child_nodes(node):
            visit(child, line)

    visit(tree, 0)
    return lines


def scan() -> list[CudaPath]:
    """Every CUDA path in :data:`TARGETS`, in file and line order."""
    found: dict[tuple[str, int], CudaPath] = {}
    for path in _files():
        source = path.read_text()
        rel = str(path.relative_to(ROOT))
        tree = ast.parse(source)
        in_condition: set[int] = set()  # BoolOps inside an if's test are the if's business
        statements = _statement_lines(tree)  # node id -> line of the innermost statement
        for node in ast.walk(tree):
            if isinstance(node, (ast.If, ast.While)):
                for sub in ast.walk(node.test):
                    in_condition.add(id(sub))
                test = _text(source, node.test)
                if CONDITION.search(test):
                    key = (rel, node.lineno)
                    found[key] = CudaPath(
                        rel, node.lineno, "if", test, body_line=node.body[0].lineno
                    )
        for node in ast.walk(tree):
            line = statements.get(id(node), getattr(node, "lineno", 0))
            key = (rel, line)
            if key in found:
                continue
            expression = (
                isinstance(node, ast.IfExp) and CONDITION.search(_text(source, node.test))
            ) or (
                isinstance(node, ast.BoolOp)
                and id(node) not in in_condition
                and CONDITION.search(_text(source, node))
            )
            if expression:
                found[key] = CudaPath(rel, line, "expr", _text(source, node))
            elif isinstance(node, (ast.Call, ast.Import)) and CALL.search(_text(source, node)):
                found[key] = CudaPath(rel, line, "call", _text(source, node))
    return sorted(found.values(), key=lambda p: (p.file, p.line))


def _run_coverage(data_file: Path, tests: list[str]) -> int:
    """The test files under coverage (branch arcs, one context per test function)."""
    rc = data_file.with_suffix(".rc")
    include = ",".join(
        str(ROOT / t / "*") if (ROOT / t).is_dir() else str(ROOT / t) for t in TARGETS
    )
    rc.write_text(
        "[run]\nbranch = True\ndynamic_context = test_function\n"
        f"data_file = {data_file}\ninclude = {include.replace(',', chr(10) + '    ')}\n"
    )
    command = [
        sys.executable,
        "-m",
        "coverage",
        "run",
        f"--rcfile={rc}",
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "-m",
        "not compile",
        *tests,
    ]
    print("$", " ".join(command[1:]), file=sys.stderr)
    return subprocess.run(command, cwd=ROOT, check=False).returncode


def _short(context: str) -> str:
    """``tests.test_x.TestY.test_z`` -> ``test_x::TestY::test_z``."""
    return "::".join(context.removeprefix("tests.").split("."))


def attribute(paths: list[CudaPath], data_file: Path) -> None:
    """Fill each path's tests from the coverage data's arcs and their contexts."""
    from coverage.parser import PythonParser  # here: --list runs without coverage

    db = sqlite3.connect(data_file)
    rows = db.execute(
        "select file.path, context.context, arc.fromno, arc.tono from arc "
        "join file on file.id = arc.file_id join context on context.id = arc.context_id"
    ).fetchall()
    db.close()
    arcs: dict[str, list[tuple[str, int, int]]] = defaultdict(list)
    for path, context, start, end in rows:
        arcs[os.path.relpath(path, ROOT)].append((context, start, end))
    first_lines: dict[str, Callable[[int], int]] = {}
    for rel in {p.file for p in paths}:
        parser = PythonParser(filename=str(ROOT / rel))
        parser.parse_source()
        first_lines[rel] = parser.first_line  # a line of a multi-line statement -> its first
    for p in paths:
        first = first_lines[p.file]
        for context, raw_start, raw_end in arcs.get(p.file, []):
            start = first(raw_start) if raw_start > 0 else raw_start
            end = first(raw_end) if raw_end > 0 else raw_end
            if not context:  # fixtures, imports: not a test of its own
                continue
            name = _short(context)
            if p.line in (start, end):
                p.line_tests.add(name)
            if p.kind == "if" and start == p.line:
                (p.true_tests if end == p.body_line else p.false_tests).add(name)


def _names(tests: set[str], limit: int = 3) -> str:
    shown = sorted(tests)[:limit]
    more = len(tests) - len(shown)
    return ", ".join(f"`{t}`" for t in shown) + (f" +{more}" if more > 0 else "")


def table(paths: list[CudaPath]) -> str:
    """The markdown table: path, kind, text, sides reached, the tests reaching it."""
    lines = [
        "| path | kind | branch | reached (sides) | tests reaching it |",
        "|---|---|---|---|---|",
    ]
    for p in paths:
        text = p.text if len(p.text) <= 70 else p.text[:67] + "..."
        text = text.replace("|", "\\|")
        if p.kind == "if":
            who = "; ".join(
                f"{side}: {_names(t)}"
                for side, t in (("true", p.true_tests), ("false", p.false_tests))
                if t
            )
        else:
            who = _names(p.line_tests)
        reached = ("yes" if p.full else "partly") if p.reached else "**no**"
        lines.append(
            f"| `{p.where}` | {p.kind} | `{text}` | {reached} ({p.sides}) | {who or '-'} |"
        )
    return "\n".join(lines)


def summary(paths: list[CudaPath]) -> str:
    """``N of M CUDA paths reached on CPU`` and what is left."""
    full = [p for p in paths if p.full]
    partly = [p for p in paths if p.reached and not p.full]
    missed = [p for p in paths if not p.reached]
    kinds = {k: sum(p.kind == k for p in paths) for k in ("if", "expr", "call")}
    out = [
        f"{len(full) + len(partly)} of {len(paths)} CUDA paths reached on CPU "
        f"({kinds['if']} `if`, {kinds['expr']} `expr`, {kinds['call']} `call`); "
        f"{len(full)} fully (an `if` with both sides, an `expr` or `call` whose line ran), "
        f"{len(partly)} `if` with one side only, {len(missed)} not at all."
    ]
    if partly:
        out.append("One side only: " + ", ".join(f"`{p.where}` ({p.sides})" for p in partly) + ".")
    if missed:
        out.append("Not reached: " + ", ".join(f"`{p.where}`" for p in missed) + ".")
    return "\n\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--list", action="store_true", help="only list the CUDA paths")
    parser.add_argument("--out", type=Path, help="also write the table and count here")
    parser.add_argument("--data", type=Path, help="reuse this coverage data file (no run)")
    parser.add_argument("tests", nargs="*", help=f"test files (default: {len(TEST_FILES)})")
    args = parser.parse_args(argv)
    paths = scan()
    if args.data is not None and not args.data.is_file():
        parser.error(f"--data {args.data}: no such coverage data file")
    if args.list:
        for p in paths:
            print(f"{p.where}  [{p.kind}]  {p.text}")
        print(f"{len(paths)} CUDA paths")
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        data = args.data or Path(tmp) / ".coverage"
        if args.data is None:
            tests = args.tests or [t for t in TEST_FILES if (ROOT / t).exists()]
            rc = _run_coverage(data, tests)
            if rc != 0:
                print(
                    f"the tests failed (exit {rc}); the table below is from that run",
                    file=sys.stderr,
                )
        attribute(paths, data)
    report = table(paths) + "\n\n" + summary(paths) + "\n"
    print(report)
    if args.out is not None:
        args.out.write_text(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
