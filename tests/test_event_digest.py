"""The event digest (``benchmarks/event_digest.py``) repeats exactly, and sees a change."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest

from tests.benchmark_scripts import load_benchmark


@pytest.fixture(scope="module")
def digest() -> ModuleType:
    return load_benchmark("event_digest")


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
