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


@pytest.fixture(scope="module")
def first(digest: ModuleType, tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, Path]:
    """One run's digests and the folder its normalised events were written to."""
    folder = tmp_path_factory.mktemp("digest")
    return digest.digests(folder), folder


def test_two_runs_give_the_same_digests(digest: ModuleType, first: tuple[dict, Path]) -> None:
    """Same code, same events: every scenario's digest repeats; the dump holds real verdicts."""
    digests, folder = first
    assert digest.digests() == digests
    assert set(digests) >= {"first-wins", "max-throughput", "all"}
    dumped = (folder / "max-throughput.jsonl").read_text("utf-8")
    assert '"verdict": "faster"' in dumped and "selection_decided" in dumped


def test_a_changed_figure_changes_the_digest(
    digest: ModuleType, first: tuple[dict, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the digest keeps is compared: one changed reason gives another digest."""
    monkeypatch.setattr(digest, "_normal", lambda e: {**e, "reason": "x"} if "reason" in e else e)
    assert digest.digests()["all"] != first[0]["all"]
