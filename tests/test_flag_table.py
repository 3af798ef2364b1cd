"""docs/cli.md's table of ``tune``'s flags is the one generated from the parser and the settings.

Each flag: its group in ``--help``, the ``ProfilingConfig`` field it sets and the sweep file key
that sets the same, where it has them; the table between the markers is what
``python -m aitune_fp.cli.flag_table docs/cli.md`` writes.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Any

import attrs
import pytest

from aitune_fp.cli import flag_table
from aitune_fp.cli.tune_args import add_arguments
from aitune_fp.core.config import ProfilingConfig
from aitune_fp.core.settings import GROUPS, SETTINGS
from aitune_fp.errors import AitunefpError
from aitune_fp.sweep.spec import parse_sweep

DOC = Path(__file__).resolve().parents[1] / "docs" / "cli.md"


def _rows(table: str) -> list[list[str]]:
    """The table's body rows, cells stripped (header and rule left out)."""
    lines = [line for line in table.splitlines() if line.startswith("|")]
    return [[c.strip() for c in line.strip("|").split("|")] for line in lines[2:]]


def _block(text: str) -> str:
    start = text.index(flag_table.START)
    end = text.index(flag_table.END, start)
    return text[start + len(flag_table.START) : end].strip("\n")


def test_docs_cli_holds_the_generated_table() -> None:
    """The table in docs/cli.md is exactly what the parser and the settings generate now."""
    assert _block(DOC.read_text(encoding="utf-8")) == flag_table.generated().strip("\n"), (
        "docs/cli.md's flag table is stale: run `python -m aitune_fp.cli.flag_table docs/cli.md`"
    )


def test_the_table_has_a_row_per_flag_in_the_groups_order() -> None:
    """One row per flag of ``tune`` but -h, grouped as ``--help`` groups them."""
    parser = add_arguments(argparse.ArgumentParser().add_subparsers())
    flags = {
        ", ".join(a.option_strings)
        for a in parser._actions
        if a.option_strings and a.help != argparse.SUPPRESS
    }
    flags.discard("-h, --help")
    rows = _rows(flag_table.flag_table())
    listed = [
        row[1].split(" (old: ")[0].strip("`").replace("`, `", ", ") for row in rows if row[1] != "—"
    ]
    assert sorted(listed) == sorted(flags)
    groups = [row[0] for row in rows if row[0]]
    assert groups == list(GROUPS)


def test_each_config_row_maps_its_flag_to_its_field_and_budget_key() -> None:
    """A config row's flag sets its field and ``[budget]`` key; a sweep-only row is listed."""
    rows = [row[1:] for row in _rows(flag_table.flag_table())]
    for setting in SETTINGS:
        if setting.into == "config":
            flag = f"`{setting.flag}`" if setting.flag is not None else "—"
            flag += " (old: `--cache`)" if setting.flag == "--l2-cache" else ""
            flag += " (old: `--max-pairs`)" if setting.flag == "--looks" else ""
            assert [flag, f"`{setting.field}`", f"`[budget] {setting.field}`"] in rows


def test_every_hidden_old_name_is_in_the_table() -> None:
    """Each flag hidden from ``--help`` is named, as old, on its new name's row."""
    parser = add_arguments(argparse.ArgumentParser().add_subparsers())
    table = flag_table.flag_table()
    for action in parser._actions:
        if action.help == argparse.SUPPRESS:
            assert f"(old: `{action.option_strings[0]}`)" in table


def test_every_field_named_is_a_profiling_config_field() -> None:
    fields = {f.name for f in attrs.fields(ProfilingConfig)}
    named = [re.findall(r"`(\w+)`", row[2]) for row in _rows(flag_table.flag_table())]
    assert all(set(found) <= fields for found in named)
    assert sum(map(len, named)) == len([s for s in SETTINGS if s.field in fields])


def _sweep_with(key: str) -> dict[str, Any]:
    """A sweep description that sets ``key`` (as the table writes it) to a value of no use."""
    bad: Any = {"not": "a value"}
    base: dict[str, Any] = {"models": [{"model": "mlp"}]}
    table, _, name = key.rpartition(" ")
    if table == "[budget]" or table == "[accuracy]":
        return {**base, table.strip("[]"): {name: bad}}
    if table == "[[models]]":
        return {"models": [{"model": "mlp", name: bad}]}
    if table == "[[backends]]":
        return {**base, "backends": [{name: bad}]}
    assert not table, key
    return {**base, name: bad}


def test_every_sweep_key_named_is_one_a_sweep_file_takes() -> None:
    """Each key the table names is known to a sweep file: a bad value there is not 'unknown'."""
    keys = [k for row in _rows(flag_table.flag_table()) for k in re.findall(r"`([^`]+)`", row[3])]
    assert "threshold" in keys and "[accuracy] rel_l2" in keys and "[budget] looks" in keys
    for key in keys:
        with pytest.raises(AitunefpError) as refused:
            parse_sweep(_sweep_with(key))
        assert "unknown key" not in str(refused.value), key


def test_main_rewrites_the_block_and_checks_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--check`` says 1 on a stale table and writes nothing; a plain run rewrites the block."""
    page = tmp_path / "cli.md"
    stale = f"# cli\n\nbefore\n\n{flag_table.START}\n| old |\n{flag_table.END}\n\nafter\n"
    page.write_text(stale, encoding="utf-8")
    assert flag_table.main(["--check", str(page)]) == 1
    assert page.read_text(encoding="utf-8") == stale
    assert flag_table.main([str(page)]) == 0
    text = page.read_text(encoding="utf-8")
    assert text.startswith("# cli\n\nbefore\n\n") and text.endswith(f"{flag_table.END}\n\nafter\n")
    assert _block(text) == flag_table.generated().strip("\n")
    assert flag_table.main(["--check", str(page)]) == 0
    capsys.readouterr()
    page.write_text("# no markers\n", encoding="utf-8")
    assert flag_table.main([str(page)]) == 2
    assert "marker" in capsys.readouterr().err
