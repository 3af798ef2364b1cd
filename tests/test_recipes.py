"""The recipes of docs/architecture.md, counted: what adding a backend really takes.

Spec: a backend is its module, one registry entry and its row in docs/backends.md' registry
table; the CLI, sweep files and defaults read the registry, so nothing else changes. The toy
backend here lives in this file (its "module"); the test adds its registry entry and shows the
command line and a sweep file take it, and that the docs check names the one row left to write.
"""

from __future__ import annotations

import json
import re
import types
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import torch

from aitune_fp.backends import registry
from aitune_fp.cli import main
from tests.validation_helpers import _ModuleBackend

DOC = Path(__file__).resolve().parents[1] / "docs" / "backends.md"


class ToyBackend(_ModuleBackend):
    """A copy of the module that skips nothing: correct, and as fast as eager."""

    def _infer(self, *args: Any, **kwargs: Any) -> Any:
        with torch.no_grad():
            return self.module(*args, **kwargs)


def _documented_names(text: str) -> set[str]:
    """The names in docs/backends.md's registry table (``| `name` | Builds | ...``)."""
    table = text.split("## Backends by name: the registry", 1)[1].split("```", 1)[0]
    return set(re.findall(r"^\| `([a-z0-9-]+)` \|", table, flags=re.M))


def _missing_rows(backends: Mapping[str, Any]) -> list[str]:
    return sorted(set(backends) - _documented_names(DOC.read_text(encoding="utf-8")))


@pytest.fixture(name="toy_registered")
def _toy_registered(monkeypatch: pytest.MonkeyPatch) -> None:
    """The one registry entry the recipe asks for, added for this test only."""
    entry = registry.BackendEntry(
        name="toy",
        factory=ToyBackend,
        devices=frozenset({"cpu"}),
        default_on=frozenset(),
        summary="a toy backend for the recipe test",
    )
    extended = types.MappingProxyType({**registry.BACKENDS, "toy": entry})
    monkeypatch.setattr(registry, "BACKENDS", extended)


def test_every_registered_backend_has_its_docs_row() -> None:
    """The third piece of the recipe: the registry table of docs/backends.md names each one."""
    assert _missing_rows(registry.BACKENDS) == []


@pytest.mark.usefixtures("toy_registered")
def test_a_new_backend_needs_only_its_module_and_one_registry_entry(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """With the entry added, `tune --backends toy` validates it; a sweep file accepts it."""
    from aitune_fp.sweep.spec import parse_sweep

    args = ["tune", "--backends", "toy", "--strategy", "one", "--looks", "10,20", "-q"]
    args += ["--max-seconds", "5", "--format", "json", "--cache-dir", str(tmp_path)]
    assert main(args) == 0
    run = json.loads(capsys.readouterr().out)["run"]
    assert [r["backend_description"] for r in run["results"]] == ["ToyBackend()"]
    assert parse_sweep({"models": ["mlp"], "backends": ["toy"]}).backend_names() == ("toy",)
    assert _missing_rows(registry.BACKENDS) == ["toy"]  # ... and its docs row is what is left
