"""Every ```python block of README.md and docs/*.md runs as written (a user copies them first).

How the blocks are run (:func:`test_doc_blocks_run`): the blocks of one file are executed in
order, in one namespace (a later block may use a name an earlier block of the same file defined,
as a reader going down the page would), with a fresh temporary directory as the working
directory. That directory holds ``events.jsonl``: the example event line of docs/events.md
(its ```json block), for the blocks that read "your" event log. structlog is reset afterwards.

Skipped, and only these: a block preceded (on the line just above its fence) by an HTML comment
``<!-- no-run: needs GPU -->`` or ``<!-- no-run: needs AITune -->`` (the reason is shown in the
skip), and, by content detection, a block that imports NVIDIA AITune (``import aitune`` /
``from aitune``, not ``aitune_fp``: docs/aitune.md shows AITune's own code). Any other marker
text is an error, so that "no-run" cannot become a way to hide a broken example.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, NamedTuple

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOC_FILES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
#: The reasons a block may be skipped for (in a ``<!-- no-run: ... -->`` marker).
SKIP_REASONS = ("needs GPU", "needs AITune")
_FENCE = re.compile(r"^```python[ \t]*\n(.*?)^```", flags=re.S | re.M)
_MARK = re.compile(r"<!--\s*no-run:\s*(.*?)\s*-->\s*$")
_AITUNE = re.compile(r"^\s*(import aitune\b(?!_fp)|from aitune\b(?!_fp))", flags=re.M)


class Block(NamedTuple):
    """One ```python block: its code, the line its fence opens on, and why it is skipped."""

    code: str
    line: int
    skip: str | None


def doc_blocks(path: Path) -> list[Block]:
    """The ```python blocks of a Markdown file, in order, with their skip reason (or None)."""
    text = path.read_text(encoding="utf-8")
    blocks = []
    for match in _FENCE.finditer(text):
        line = text.count("\n", 0, match.start()) + 1
        before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1]
        mark = _MARK.search(before)
        skip = None
        if mark is not None:
            skip = mark.group(1)
            if skip not in SKIP_REASONS:
                raise AssertionError(
                    f"{path.name}:{line}: unknown no-run reason {skip!r} "
                    f"(allowed: {', '.join(SKIP_REASONS)})"
                )
        elif _AITUNE.search(match.group(1)):
            skip = "needs AITune"
        blocks.append(Block(match.group(1), line, skip))
    return blocks


def python_blocks(path: Path) -> list[str]:
    """The code of every ```python block of a Markdown file, in order."""
    return [b.code for b in doc_blocks(path)]


def run(code: str, namespace: dict[str, Any], where: str = "README.md") -> dict[str, Any]:
    exec(compile(code, where, "exec"), namespace)
    return namespace


def _example_event_line() -> str:
    """docs/events.md's example line (its ```json block, wrapped there) as one JSON line."""
    text = (ROOT / "docs" / "events.md").read_text(encoding="utf-8")
    block = re.search(r"^```json\n(.*?)^```", text, flags=re.S | re.M)
    assert block is not None, "docs/events.md lost its example line"
    return json.dumps(json.loads(block.group(1))) + "\n"


def _check_readme(ns: dict[str, Any], cwd: Path) -> None:
    """The decorated MaxThroughput example tuned for real and holds what it says it holds."""
    strategy, backend = ns["strategy"], ns["backend"]
    results, failures = strategy.perf_validation_results, strategy.candidate_failures
    assert len(results) + len(failures) == 2  # every candidate recorded, one way or the other
    assert backend.describe() in {r.backend_description for r in results if r.passed} | {
        "TorchEagerBackend()"
    }
    assert (cwd / "cache").is_dir()
    assert ns["speedup"] == pytest.approx(1.015)
    assert ns["d"].verdict == "faster"


def _check_events(ns: dict[str, Any], cwd: Path) -> None:
    assert ns["measured"], "the capture example measured no candidate"
    assert [r.run_id for r in ns["report"].runs] == ["5c74189f98434008a20d0b3de1268d7a"]


CHECKS = {"README.md": _check_readme, "events.md": _check_events}


#: The files with at least one runnable block (the others have none to run, or only marked ones).
RUNNABLE_FILES = [p for p in DOC_FILES if any(b.skip is None for b in doc_blocks(p))]


@pytest.mark.slow
@pytest.mark.parametrize(
    "path",
    [
        # README's API tour builds TorchCompileBackend for real: the compile tier
        pytest.param(p, marks=[pytest.mark.compile] if p.name == "README.md" else [])
        for p in RUNNABLE_FILES
    ],
    ids=[p.name for p in RUNNABLE_FILES],
)
def test_doc_blocks_run(path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every runnable ```python block of ``path`` executes without error, in order."""
    import structlog

    runnable = [b for b in doc_blocks(path) if b.skip is None]
    monkeypatch.chdir(tmp_path)
    (tmp_path / "events.jsonl").write_text(_example_event_line(), encoding="utf-8")
    ns: dict[str, Any] = {"__name__": f"doc_{path.stem}"}
    try:
        for block in runnable:
            run(block.code, ns, f"{path.name}:{block.line}")
    finally:
        structlog.reset_defaults()
    check = CHECKS.get(path.name)
    if check is not None:
        check(ns, tmp_path)


def test_every_doc_has_its_blocks_found() -> None:
    """The extractor sees the blocks the files hold (a fence change cannot silently skip all)."""
    counts = {p.name: len(doc_blocks(p)) for p in DOC_FILES}
    assert counts["README.md"] >= 2
    assert counts["events.md"] >= 3
    assert counts["backends.md"] >= 3
    skipped = {p.name: [b.skip for b in doc_blocks(p) if b.skip] for p in DOC_FILES}
    assert skipped["aitune.md"] == ["needs AITune", "needs AITune"]
    assert skipped["README.md"] == []


def test_unknown_no_run_reason_is_refused(tmp_path: Path) -> None:
    doc = tmp_path / "x.md"
    doc.write_text("<!-- no-run: flaky -->\n```python\nprint(1)\n```\n", encoding="utf-8")
    with pytest.raises(AssertionError, match="unknown no-run reason 'flaky'"):
        doc_blocks(doc)
    doc.write_text("<!-- no-run: needs GPU -->\n```python\nprint(1)\n```\n", encoding="utf-8")
    assert doc_blocks(doc) == [Block("print(1)\n", 2, "needs GPU")]


def test_pure_helpers_example_runs_as_written() -> None:
    """The torch-free example runs on its own (it once used names it never defined) and gives
    the numbers its comments state."""
    block = next(b for b in python_blocks(ROOT / "README.md") if "compute_speedup(" in b)
    ns = run(block, {})
    assert ns["speedup"] == pytest.approx(1.015)
    assert ns["d"].verdict == "faster"
    assert ns["d"].speedup == pytest.approx(1.5, rel=0.02)


def _anchors(path: Path) -> set[str]:
    """The anchors GitHub gives ``path``'s headings: lower case, punctuation but ``-`` and ``_``
    dropped, spaces as ``-``."""
    text = re.sub(r"^```.*?^```", "", path.read_text(encoding="utf-8"), flags=re.S | re.M)
    headings = re.findall(r"^#+ (.+)$", text, flags=re.M)
    return {re.sub(r"[^\w\- ]", "", h.lower()).replace(" ", "-") for h in headings}


def test_every_relative_link_resolves() -> None:
    """README and docs/ point to files (and headings) that exist: what moved out of README is
    found where its link says."""
    broken = []
    for doc in DOC_FILES:
        text = doc.read_text(encoding="utf-8")
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue  # an absolute URL
            file, _, anchor = target.partition("#")
            path = (doc.parent / file).resolve() if file else doc
            if not path.is_file() or (anchor and anchor not in _anchors(path)):
                broken.append(f"{doc.name}: {target}")
    assert not broken, broken


def test_readme_reads_in_two_minutes() -> None:
    """README stays short (detail lives in docs/), and its first two sections are the main job
    and the tests, each a block of commands."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 200
    sections = re.findall(r"^## (.+)$", text, flags=re.M)
    assert sections[:2] == [
        "The main job: validate the default candidates on the embedded model",
        "Run the tests",
    ]
