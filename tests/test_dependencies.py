"""What the package imports when it loads is what a plain ``pip install aitune-fp`` installs."""

from __future__ import annotations

import ast
import re
import sys
from importlib.metadata import packages_distributions
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _declared() -> set[str]:
    """The distributions ``[project].dependencies`` names, normalised."""
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    block = re.search(r"^dependencies = \[(.*?)^\]", text, re.M | re.S)
    assert block is not None, "pyproject.toml has no [project].dependencies list"
    specs = re.findall(r'^\s*"([^"]+)"', block.group(1), re.M)
    return {_norm(re.split(r"[<>=!~;\[ ]", spec, maxsplit=1)[0]) for spec in specs}


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _loaded_at_import(path: Path) -> set[str]:
    """Top-level modules a file imports in its module body (not in functions or TYPE_CHECKING)."""
    names = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names - set(sys.stdlib_module_names) - {"aitune_fp", "__future__"}


def test_every_module_the_package_loads_is_a_declared_dependency() -> None:
    """A module imported at load time that only an extra installs breaks the README's main job
    on a fresh machine (``wrapt`` did: the tests' extras installed it, a plain install not)."""
    owners = packages_distributions()
    declared = _declared()
    missing = {}
    for path in sorted((ROOT / "aitune_fp").rglob("*.py")):
        for module in _loaded_at_import(path):
            dists = {_norm(d) for d in owners.get(module, [module])}
            if not dists & declared:
                missing.setdefault(module, []).append(str(path.relative_to(ROOT)))
    assert not missing, f"imported when the package loads, not in [project].dependencies: {missing}"
