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


def _block(title: str) -> list[str]:
    """The command lines of README's first shell block under ``title``."""
    block = _section(title).split("```bash\n", 1)[1].split("```", 1)[0]
    return [line for line in block.splitlines() if line.strip()]


def test_readmes_blocks_are_one_line_each() -> None:
    """The main job and the tests are each set up and run by one line: venv, installs, run."""
    (main_job,) = _block("The main job: validate the default candidates on the embedded model")
    (tests,) = _block("Run the tests")
    for line in (main_job, tests):
        assert line.startswith("python3 -m venv .venv && . .venv/bin/activate && pip install ")
    assert main_job.endswith("&& pip install -e . && aitune-fp tune")
    steps = tests.split(" && ")
    assert steps[-2:] == ["python -m pytest -q", 'python -m pytest -q -m "slow or compile or ray"']
    assert "pip install torch==2.13.0" in steps and "pip install --no-deps aitune==0.6.0" in steps
    extras = next(s for s in steps if s.startswith("pip install -e "))
    assert re.fullmatch(r'pip install -e "\.\[[\w,-]*\btest\b[\w,-]*\]"', extras)


def test_ci_runs_exactly_readmes_test_line_last() -> None:
    """``.ci/run``'s last command is README's test line, character for character."""
    (tests,) = _block("Run the tests")
    lines = [
        line
        for line in (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]
    assert lines[-1] == tests
    assert tests.split(" && python -m pytest", 1)[0] in lines[:-1]  # lint needs the set-up


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
