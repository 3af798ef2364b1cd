"""The settings table: one row is a ``tune`` flag and a sweep file's ``[budget]`` key at once.

``aitune_fp.core.settings.SETTINGS`` is what the command's parser, the config built from its
flags, the messages that name a flag and a sweep file's ``[budget]`` check read; adding a setting
is its ProfilingConfig field, its row (with its ``--help`` group) and docs/cli.md's generated
tables ("Add a setting" in docs/architecture.md).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import attrs
import pytest

from aitune_fp.cli import build_parser, flag_table
from aitune_fp.cli._shared import UsageError
from aitune_fp.cli.tune_args import add_arguments, profiling_config
from aitune_fp.core import settings
from aitune_fp.core.config import ProfilingConfig
from aitune_fp.core.settings import SETTINGS, Setting, rows, sweep_keys
from aitune_fp.correctness.closeness import Closeness
from aitune_fp.errors import InvalidValueError
from aitune_fp.sweep.spec import TASK_TIMEOUT_KEY, load_sweep, parse_sweep

ROOT = Path(__file__).resolve().parents[1]
_BASE: dict[str, Any] = {"models": [{"name": "mlp", "model": "embedded:mlp"}]}


def _tune(*flags: str) -> Any:
    return profiling_config(build_parser().parse_args(["tune", *flags]))


def test_each_row_lands_in_one_place_under_one_flag() -> None:
    """A config row names a ProfilingConfig field, an accuracy row a Closeness setting; no field,
    flag or old name has two rows."""
    assert {s.field for s in rows("config")} <= set(attrs.fields_dict(ProfilingConfig))
    assert {s.field for s in rows("closeness")} <= set(attrs.fields_dict(Closeness))
    assert len({s.field for s in SETTINGS}) == len(SETTINGS)
    names = [n for s in SETTINGS for n in (s.short, s.flag, *s.aliases) if n is not None]
    assert len(set(names)) == len(names)
    assert sweep_keys() == tuple(s.field for s in rows("config"))
    assert {"threshold", "decision", "isolation", "criteria"} <= {s.field for s in SETTINGS}


@pytest.mark.parametrize("row", [s for s in SETTINGS if s.modes], ids=lambda s: s.field)
def test_a_row_of_one_mode_is_refused_in_the_other(row: Setting) -> None:
    """The ``modes`` column: the flag and the ``[budget]`` key are refused in another mode."""
    other = next(m for m in ("statistical", "point") if m not in (row.modes or ()))
    value = row.choices[-1] if row.choices else str(row.default).strip("()").replace(" ", "")
    if row.flag is not None:
        with pytest.raises(UsageError, match=f"{row.flag} applies to --decision {row.modes[0]}"):
            _tune("--decision", other, row.flag, value)
    with pytest.raises(InvalidValueError, match=f"budget.{row.field} applies to decision"):
        parse_sweep({**_BASE, "decision": other, "budget": {row.field: row.default}})


@pytest.mark.parametrize("setting", [s for s in rows("config") if s.choices], ids=lambda s: s.field)
def test_a_flag_with_choices_sets_its_field(setting: Setting) -> None:
    """Each choice of a choice flag lands in its field (statistical mode reads them all)."""
    assert setting.flag is not None and setting.choices is not None
    for choice in setting.choices:
        assert getattr(_tune(setting.flag, choice), setting.field) == choice


def test_examples_sweep_file_points_to_the_table_of_every_budget_key() -> None:
    """examples/sweep.toml's ``[budget]`` points to docs/cli.md's generated table of its keys,
    which names every key a sweep file may give (``test_flag_table`` keeps the page current)."""
    text = (ROOT / "examples" / "sweep.toml").read_text(encoding="utf-8")
    start = text.index("\n[budget]")
    budget = text[start : text.index("\n[", start + 1)]  # to the next table
    assert "docs/cli.md" in budget
    table = flag_table.budget_table()
    missing = [key for key in (*sweep_keys(), TASK_TIMEOUT_KEY) if f"| `{key}` |" not in table]
    assert not missing, f"docs/cli.md's [budget] table does not name {missing}"
    assert load_sweep(ROOT / "examples" / "sweep.toml").profiling.max_seconds == 10.0


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


def test_batch_size_sets_the_batch_the_sample_is_tiled_to() -> None:
    """``--batch-size`` and ``[[models]] batch_size``: the graph spec's batch; a bad one is named."""
    import torch

    from aitune_fp.cli.tune import _load_model
    from aitune_fp.inputs import GraphSpec, Sample
    from aitune_fp.models import EmbeddedModel, UserModelError, at_batch_size

    assert _load_model(build_parser().parse_args(["tune"])).graph_spec.max_batch_size == 32
    args = build_parser().parse_args(["tune", "--batch-size", "48"])
    assert _load_model(args).graph_spec.max_batch_size == 48
    assert (
        parse_sweep({**_BASE, "models": [{"model": "mlp", "batch_size": 8}]}).models[0].batch_size
        == 8
    )
    with pytest.raises(InvalidValueError, match=r"models\[0\]\.batch_size must be an integer >= 1"):
        parse_sweep({**_BASE, "models": [{"model": "mlp", "batch_size": 0}]})
    scalar = EmbeddedModel(
        name="s", module=torch.nn.Identity(), sample=Sample((3,)), graph_spec=GraphSpec()
    )
    with pytest.raises(UserModelError, match="--batch-size 4: s's sample has no batched tensor"):
        at_batch_size(scalar, 4, name="--batch-size")
