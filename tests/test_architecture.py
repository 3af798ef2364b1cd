"""The package's import structure, as pyproject's import-linter contracts state it.

No part of ``aitune_fp`` is in an import circle with another (at any depth), and the parts
import downwards only: the CLI on top, the pure core and the errors at the bottom.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: ``lint-imports`` run by this interpreter (its console script may not be on PATH).
LINT_IMPORTS = [
    sys.executable,
    "-c",
    "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())",
    "--no-cache",
]


def test_every_import_contract_is_kept() -> None:
    run = subprocess.run(
        LINT_IMPORTS,
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "3 kept, 0 broken" in run.stdout


def test_the_contracts_catch_a_circle(tmp_path: Path) -> None:
    """The contract is not vacuous: a package with a circle between two parts breaks it."""
    package = tmp_path / "circled"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from circled import b\n")
    (package / "b.py").write_text("from circled import a\n")
    (tmp_path / ".importlinter").write_text(
        "[importlinter]\nroot_package = circled\n\n"
        "[importlinter:contract:one]\nname = no circle\ntype = acyclic_siblings\n"
        "ancestors = circled\n"
    )
    run = subprocess.run(
        LINT_IMPORTS,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
    )
    assert run.returncode != 0 and "BROKEN" in run.stdout.upper(), run.stdout + run.stderr


def _module_map() -> list[str]:
    """The first cell of each row of docs/architecture.md's module map (its paths)."""
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    table = text.split("## Module map", 1)[1].split("\n## ", 1)[0]
    cells = [line.split("|")[1] for line in table.splitlines() if line.startswith("| `")]
    return [path for cell in cells for path in re.findall(r"`([^`]+)`", cell)]


def test_the_module_map_names_every_package_and_top_level_module() -> None:
    """A folder or a public top-level module without a row is a part no reader finds."""
    package = ROOT / "aitune_fp"
    parts = [f"{p.name}/" for p in package.iterdir() if (p / "__init__.py").is_file()]
    parts += [
        p.name
        for p in package.glob("*.py")
        if not p.name.startswith("_") and p.name != "__main__.py"
    ]
    listed = _module_map()
    missing = [part for part in parts if not any(path.startswith(part) for path in listed)]
    assert not missing, f"docs/architecture.md's module map has no row for {missing}"


def test_every_path_in_the_module_map_exists() -> None:
    """The map names no module or folder that moved or went."""
    gone = [path for path in _module_map() if not (ROOT / "aitune_fp" / path).exists()]
    assert not gone, f"docs/architecture.md's module map names {gone}, which do not exist"
