"""The package's import structure, as pyproject's import-linter contracts state it.

No part of ``aitune_fp`` is in an import circle with another (at any depth), and the parts
import downwards only: the CLI on top, the pure core and the errors at the bottom.
"""

from __future__ import annotations

import os
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
