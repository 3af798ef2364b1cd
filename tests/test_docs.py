"""The README's Python examples run as written (a user copies them first)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent


def python_blocks(path: Path) -> list[str]:
    """The ```python blocks of a Markdown file, in order."""
    return re.findall(r"```python\n(.*?)```", path.read_text(encoding="utf-8"), flags=re.S)


def run(code: str, namespace: dict[str, Any]) -> dict[str, Any]:
    exec(compile(code, "README.md", "exec"), namespace)
    return namespace


@pytest.mark.slow
def test_api_tour_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The decorated MaxThroughput example tunes for real and prints what it says it prints."""
    import structlog

    monkeypatch.chdir(tmp_path)
    tour = next(b for b in python_blocks(ROOT / "README.md") if "with_performance_validation" in b)
    try:
        ns = run(tour, {})
    finally:
        structlog.reset_defaults()
    strategy, backend = ns["strategy"], ns["backend"]
    results, failures = strategy.perf_validation_results, strategy.candidate_failures
    assert len(results) + len(failures) == 2  # every candidate recorded, one way or the other
    assert backend.describe() in {r.backend_description for r in results if r.passed} | {
        "TorchEagerBackend()"
    }
    assert (tmp_path / "cache").is_dir()


def test_pure_helpers_example_runs() -> None:
    """The torch-free example gives the numbers its comments state."""
    block = next(b for b in python_blocks(ROOT / "README.md") if "compute_speedup(" in b)
    eager = [0.010 + 0.0001 * (i % 7) for i in range(30)]
    ns = run(block, {"eager_latencies_s": eager, "candidate_latencies_s": [t / 1.5 for t in eager]})
    assert ns["speedup"] == pytest.approx(1.015)
    assert ns["d"].verdict == "faster"
    assert ns["d"].speedup == pytest.approx(1.5)
