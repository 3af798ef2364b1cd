"""The event digest (``benchmarks/event_digest.py``) repeats exactly, and sees a change."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def digest() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "event_digest", ROOT / "benchmarks" / "event_digest.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_two_runs_give_the_same_digests(
    digest: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Same code, same events: every scenario's digest repeats; the dump holds real verdicts."""
    first = digest.digests(tmp_path)
    assert digest.digests() == first and set(first) >= {"first-wins", "max-throughput", "all"}
    dumped = (tmp_path / "max-throughput.jsonl").read_text("utf-8")
    assert '"verdict": "faster"' in dumped and "selection_decided" in dumped


def test_a_changed_figure_changes_the_digest(
    digest: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the digest keeps is compared: one changed reason gives another digest."""
    before = digest.digests()["all"]
    monkeypatch.setattr(digest, "_normal", lambda e: {**e, "reason": "x"} if "reason" in e else e)
    assert digest.digests()["all"] != before
