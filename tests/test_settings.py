"""The settings table: one row is a ``tune`` flag and a sweep file's ``[budget]`` key at once.

``aitune_fp.core.settings.SETTINGS`` is what the command's parser, the config built from its
flags, the messages that name a flag and a sweep file's ``[budget]`` check read; adding a setting
is its ProfilingConfig field, its row (with its ``--help`` group) and docs/cli.md ("Add a
setting" in docs/architecture.md).
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Any

import attrs
import pytest

from aitune_fp.cli import build_parser
from aitune_fp.cli._shared import UsageError
from aitune_fp.cli.tune_args import add_arguments, profiling_config
from aitune_fp.core import settings
from aitune_fp.core.config import ProfilingConfig
from aitune_fp.core.settings import SETTINGS, Setting, sweep_keys
from aitune_fp.errors import InvalidValueError
from aitune_fp.sweep.spec import parse_sweep

ROOT = Path(__file__).resolve().parents[1]
_BASE: dict[str, Any] = {"models": [{"name": "mlp", "model": "embedded:mlp"}]}


def _tune(*flags: str) -> Any:
    return profiling_config(build_parser().parse_args(["tune", *flags]))


def test_each_row_names_one_config_field_and_one_flag() -> None:
    """Every row's field is a ProfilingConfig field; no field or flag has two rows."""
    fields = {f.name for f in attrs.fields(ProfilingConfig)}
    assert {s.field for s in SETTINGS} <= fields
    assert len({s.field for s in SETTINGS}) == len(SETTINGS)
    flags = [s.flag for s in SETTINGS if s.flag is not None]
    assert len(set(flags)) == len(flags)
    assert sweep_keys() == tuple(s.field for s in SETTINGS)


@pytest.mark.parametrize("setting", [s for s in SETTINGS if s.choices], ids=lambda s: s.field)
def test_a_flag_with_choices_sets_its_field(setting: Setting) -> None:
    """Each choice of a choice flag lands in its field (statistical mode reads them all)."""
    assert setting.flag is not None and setting.choices is not None
    for choice in setting.choices:
        assert getattr(_tune(setting.flag, choice), setting.field) == choice


def test_examples_sweep_file_names_every_budget_key() -> None:
    """examples/sweep.toml's ``[budget]`` sets or lists every key a sweep file may give."""
    text = (ROOT / "examples" / "sweep.toml").read_text(encoding="utf-8")
    start = text.index("\n[budget]")
    budget = text[start : text.index("\n[", start + 1)]  # to the next table
    named = set(re.findall(r"\b[a-z][a-z_]+\b", budget))
    missing = [key for key in (*sweep_keys(), "task_timeout_s") if key not in named]
    assert not missing, f"examples/sweep.toml's [budget] does not name {missing}"


def test_docs_cli_names_every_flag() -> None:
    """docs/cli.md has a line for each setting's flag."""
    text = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    missing = [s.flag for s in SETTINGS if s.flag is not None and f"`{s.flag}" not in text]
    assert not missing, f"docs/cli.md does not name {missing}"


def test_a_new_row_is_a_flag_and_a_sweep_key(monkeypatch: pytest.MonkeyPatch) -> None:
    """A toy row for ``warmup_window``: ``tune`` takes its flag and a sweep file its key."""
    assert "warmup_window" not in sweep_keys()
    assert "--warmup-window" not in _tune_help()
    with pytest.raises(InvalidValueError, match="warmup_window"):
        parse_sweep({**_BASE, "budget": {"warmup_window": 7}})

    toy = Setting(
        "warmup_window", "--warmup-window", "toy: the settle window", int, group=settings.GATE
    )
    monkeypatch.setattr(settings, "SETTINGS", (*SETTINGS, toy))
    assert _tune("--warmup-window", "7").warmup_window == 7
    assert parse_sweep({**_BASE, "budget": {"warmup_window": 7}}).profiling.warmup_window == 7
    with pytest.raises(UsageError, match="--warmup-window"):  # the message names the flag
        _tune("--warmup-window", "0")
    assert "toy: the settle window" in _tune_help()


def _tune_help() -> str:
    sub = argparse.ArgumentParser().add_subparsers()
    return str(add_arguments(sub).format_help())
