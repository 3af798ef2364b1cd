"""CI (``.ci/run``) runs exactly the test commands README gives; the suite keeps to its temp dir."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _section(title: str) -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    return text.split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]


def _commands(block: str) -> list[str]:
    """The pytest command lines of a shell text, comments and spacing dropped."""
    lines = (line.split("#", 1)[0].strip() for line in block.splitlines())
    return [" ".join(line.split()) for line in lines if line.startswith("python -m pytest")]


def test_ci_runs_exactly_readmes_test_commands() -> None:
    readme = _commands(_section("Run the tests"))
    assert readme == ["python -m pytest -q", 'python -m pytest -q -m "slow or compile or ray"']
    assert _commands((ROOT / ".ci" / "run").read_text(encoding="utf-8")) == readme


def _pip_installs(text: str) -> list[str]:
    """What each ``pip install`` of a shell text installs, in order (``-q`` and comments dropped,
    ``&&`` chains split): ``["torch==2.13.0", '-e ".[test]"', ...]``."""
    found = []
    for line in text.splitlines():
        for command in line.split("#", 1)[0].split("&&"):
            words = command.split()
            if "pip" in words and "install" in words:
                args = words[words.index("install") + 1 :]
                found.append(" ".join(a for a in args if a != "-q"))
    return found


def test_readmes_set_up_is_the_one_ci_runs() -> None:
    """README's test commands work on a fresh machine after README's set-up lines: the same pip
    installs, in the same order, as ``.ci/run`` (torch's CPU build first, the extras with
    ``test``, AITune without its GPU dependencies)."""
    readme = _pip_installs(_section("Run the tests"))
    ci = _pip_installs((ROOT / ".ci" / "run").read_text(encoding="utf-8"))
    assert readme == [c for c in ci if c != "--upgrade pip"]
    assert readme[0] == "torch==2.13.0"
    extras = re.fullmatch(r'-e "\.\[([\w,-]+)\]"', readme[1])
    assert extras is not None and "test" in extras.group(1).split(",")
    assert readme[2:] == ["--no-deps aitune==0.6.0"]


def test_readmes_main_job_is_set_up_and_run_in_one_block() -> None:
    """The first section sets up the plain install (CPU torch first) and runs the main job."""
    section = _section("The main job: validate the default candidates on the embedded model")
    assert _pip_installs(section) == ["torch==2.13.0", "-e ."]
    lines = [line.split("#", 1)[0].strip() for line in section.splitlines()]
    assert "aitune-fp tune" in lines


def test_the_default_run_leaves_the_slow_tier_out() -> None:
    """addopts deselects ``slow``, ``compile`` and ``ray``; README's second command runs them."""
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    options = text.split("[tool.pytest.ini_options]", 1)[1].split("\n[", 1)[0]
    addopts = re.search(r"^addopts = (.*)$", options, re.M)
    assert addopts is not None and "-m 'not slow and not compile and not ray'" in addopts.group(1)
    for marker in ("slow", "compile", "ray"):
        assert re.search(rf'^    "{marker}: ', options, re.M), marker


def test_the_temp_dir_is_pytests_here_and_in_child_processes(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """What a tune or a sweep keeps in the temp dir by default stays in pytest's (conftest)."""
    base = tmp_path_factory.getbasetemp().resolve()
    assert Path(tempfile.gettempdir()).resolve().is_relative_to(base)
    child = subprocess.run(
        [sys.executable, "-c", "import tempfile; print(tempfile.gettempdir())"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert Path(child.stdout.strip()).resolve().is_relative_to(base)
    assert Path(os.environ["TMPDIR"]).resolve().is_relative_to(base)
