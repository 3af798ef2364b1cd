"""``aitune-fp tune --help``: its flags in groups, each with help, its default and its unit shown.

Read from the help a user sees (wide enough that no line wraps): the groups, the flags under
each, and the ``(default: X)`` each help ends with; a default shown is checked by giving it back
to the command, which must then build the very same tune as without it.
"""

from __future__ import annotations

import argparse
import re
from typing import Any

import pytest

from aitune_fp.cli import main
from aitune_fp.cli._shared import UsageError
from aitune_fp.cli.tune_args import (
    accuracy_options,
    add_arguments,
    profiling_config,
    strategy_settings,
)
from aitune_fp.core import settings
from aitune_fp.core.settings import GROUPS, SETTINGS, Setting
from aitune_fp.correctness.closeness import Closeness
from aitune_fp.correctness.tolerances import Tolerances
from aitune_fp.pipeline import strategy_registry

_DEFAULT = re.compile(r"\(default: ([^()]+)\)$")


def _parser() -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = add_arguments(argparse.ArgumentParser().add_subparsers())
    return parser


def _names(action: argparse.Action) -> tuple[str, ...]:
    return tuple(action.option_strings)


#: The old names ``tune`` still takes, hidden from ``--help`` (docs/cli.md's table names them).
HIDDEN = {"--cache", "--in-process", "--log", "--max-pairs"}


def _flags() -> list[argparse.Action]:
    """Every flag of ``tune`` but ``-h`` and the hidden old names."""
    return [
        a
        for a in _parser()._actions
        if a.option_strings and a.dest != "help" and a.help != argparse.SUPPRESS
    ]


def _help_text(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> str:
    monkeypatch.setenv("COLUMNS", "1000")  # one line per help: nothing wrapped at a hyphen
    with pytest.raises(SystemExit) as exited:
        main(["tune", "--help"])
    assert exited.value.code == 0
    return capsys.readouterr().out


def _sections(text: str) -> dict[str, dict[tuple[str, ...], str]]:
    """Each heading of the help -> its flags (their names) -> their help, one line each."""
    found: dict[str, dict[tuple[str, ...], str]] = {}
    group: dict[tuple[str, ...], str] | None = None
    last: tuple[str, ...] | None = None
    for line in text.splitlines():
        heading = re.fullmatch(r"(\S[^:]*):", line)
        if heading:
            group, last = found.setdefault(heading.group(1), {}), None
            continue
        if group is not None and line.startswith("  -"):
            invocation, *text = re.split(r"\s{2,}", line.strip(), maxsplit=1)
            names = tuple(part.split()[0] for part in invocation.split(", "))
            group[names], last = " ".join(text), names
        elif group is not None and last is not None and line.startswith(" " * 4):
            group[last] = f"{group[last]} {line.strip()}".strip()
    return found


@pytest.fixture
def sections(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> dict[str, dict[tuple[str, ...], str]]:
    return _sections(_help_text(monkeypatch, capsys))


def _helps(sections: dict[str, dict[tuple[str, ...], str]]) -> dict[str, str]:
    """Each flag's long name -> its help as printed."""
    return {names[-1]: text for flags in sections.values() for names, text in flags.items()}


# ---- the groups --------------------------------------------------------------------------------


def test_help_has_the_groups_in_order(sections: dict[str, dict[tuple[str, ...], str]]) -> None:
    """``options`` holds -h alone; then one heading per group, in the settings' order."""
    assert list(GROUPS) == [
        "what to tune",
        "the gate",
        "the statistics",
        "choosing among faster candidates",
        "the accuracy",
        "isolation and threads",
        "output",
    ]
    assert list(sections) == ["options", *GROUPS]
    assert list(sections["options"]) == [("-h", "--help")]
    assert all(sections[title] for title in GROUPS), "a group without flags"


@pytest.mark.parametrize(
    ("flag", "group"),
    [
        ("--model", "what to tune"),
        ("--backends", "what to tune"),
        ("--threshold", "the gate"),
        ("--decision", "the gate"),
        ("--looks", "the statistics"),
        ("--batch-size", "what to tune"),
        ("--strategy", "choosing among faster candidates"),
        ("--budget-ms", "choosing among faster candidates"),
        ("--rel-l2", "the accuracy"),
        ("--spot-rate", "the accuracy"),
        ("--isolation", "isolation and threads"),
        ("--threads", "isolation and threads"),
        ("--format", "output"),
        ("--quiet", "output"),
    ],
)
def test_a_flag_is_under_its_group(
    flag: str, group: str, sections: dict[str, dict[tuple[str, ...], str]]
) -> None:
    assert flag in {names[-1] for names in sections[group]}


def test_each_flag_appears_in_exactly_one_group(
    sections: dict[str, dict[tuple[str, ...], str]],
) -> None:
    """Every flag the parser takes is printed once, under one heading."""
    printed = [names for flags in sections.values() for names in flags]
    assert len(printed) == len(set(printed))
    assert sorted(printed) == sorted([("-h", "--help"), *(_names(a) for a in _flags())])


def test_the_hidden_flags_are_the_old_names() -> None:
    """A flag without help is one of the old names kept for a release, and nothing else."""
    hidden = {a.option_strings[-1] for a in _parser()._actions if a.help == argparse.SUPPRESS}
    assert hidden == HIDDEN


def test_a_settings_row_names_its_group(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A row is printed under the group it names; a group ``--help`` does not have is refused."""
    toy = Setting(
        "warmup_window", "--warmup-window", "toy: the settle window", int, group=settings.OUTPUT
    )
    monkeypatch.setattr(settings, "SETTINGS", (*SETTINGS, toy))
    shown = _sections(_help_text(monkeypatch, capsys))
    assert ("--warmup-window",) in shown["output"]
    assert shown["output"][("--warmup-window",)] == "toy: the settle window (default: 5)"
    with pytest.raises(ValueError, match="group"):
        Setting("warmup_window", "--warmup-window", "toy", int, group="misc")


# ---- help, default and unit --------------------------------------------------------------------


def test_no_flag_without_help(sections: dict[str, dict[tuple[str, ...], str]]) -> None:
    """Every flag but -h has a help of its own, in the parser and as printed."""
    missing = [a.option_strings[-1] for a in _flags() if not a.help or a.help == "==SUPPRESS=="]
    assert not missing, f"flags without help: {missing}"
    empty = [flag for flag, text in _helps(sections).items() if len(text.split()) < 3]
    assert not empty, f"flags printed without help: {empty}"


def _effective(action: argparse.Action) -> object:
    """What a flag left out amounts to: the parser's default, else the setting's own."""
    if action.default not in (None, False):
        return action.default
    row = next((s for s in SETTINGS if s.flag in action.option_strings), None)
    if row is not None:
        return row.default
    option = next(
        (
            o
            for e in strategy_registry.STRATEGIES.values()
            for o in e.options
            if o.name == action.dest
        ),
        None,
    )
    if option is not None:
        return option.default
    return None


def test_every_default_there_is_is_shown(sections: dict[str, dict[tuple[str, ...], str]]) -> None:
    """A flag whose omission means one value (the parser's, the config's) ends its help with it."""
    helps = _helps(sections)
    unshown = [
        a.option_strings[-1]
        for a in _flags()
        if _effective(a) is not None and not _DEFAULT.search(helps[a.option_strings[-1]])
    ]
    assert not unshown, f"flags whose default is not shown: {unshown}"


#: Flags a shown default is only taken with (it would be refused, or do nothing, alone).
_WITH = {
    "--quantile": ["--strategy", "latency-budget", "--budget-ms", "5"],
    "--noise-factor": ["--calibrate-noise"],
}


def _resolved(argv: list[str]) -> tuple[Any, ...]:
    """What the tune is built with: its config, check budget, strategy options, other flags."""
    args = _parser().parse_args(argv)
    closeness = Closeness(**accuracy_options(args))
    budget = closeness.budget(object()) or Tolerances()
    taken = {s.dest for s in SETTINGS if s.into != "command"} | {"max_pairs"}
    taken |= set(strategy_registry.option_names())
    rest = {k: v for k, v in vars(args).items() if k not in taken}
    return (
        profiling_config(args),
        budget,
        closeness.criteria,
        strategy_settings(args),
        rest,
    )


def test_every_default_shown_is_what_leaving_the_flag_out_does(
    sections: dict[str, dict[tuple[str, ...], str]],
) -> None:
    """Giving a flag the default its help shows builds the same tune as leaving it out."""
    helps = _helps(sections)
    checked = []
    for action in _flags():
        flag = action.option_strings[-1]
        shown = _DEFAULT.search(helps[flag])
        if shown is None:
            continue
        before = list(_WITH.get(flag, []))
        row = next((s for s in SETTINGS if s.flag == flag), None)
        if row is not None and row.modes is not None and "statistical" not in row.modes:
            before += ["--decision", row.modes[0]]
        try:
            given = _resolved([*before, flag, shown.group(1)])
        except (UsageError, SystemExit) as exc:
            pytest.fail(f"{flag} {shown.group(1)} (its default shown) is refused: {exc}")
        assert given == _resolved(before), f"{flag} {shown.group(1)} is not its default"
        checked.append(flag)
    assert {"--threshold", "--looks", "--max-seconds", "--format", "--quantile"} <= set(checked)
    assert {"--steps", "--outlier-share", "--noise-factor", "--strategy"} <= set(checked)


#: What a number's unit is called in a help: each numeric flag names one.
_UNITS = (
    "percent",
    "percentage points",
    "seconds",
    "ms",
    "a fraction",
    "pairs",
    "calls",
    "threads",
    "times",
    "rows",
)


def test_every_numeric_flag_states_its_unit(
    sections: dict[str, dict[tuple[str, ...], str]],
) -> None:
    """A flag that takes a number says what it counts or measures: percent, a fraction, ..."""
    helps = _helps(sections)
    numeric = [a for a in _flags() if a.type in (int, float) or a.dest in ("looks", "budget_ms")]
    assert "--batch-size" in {a.option_strings[-1] for a in numeric}
    assert len(numeric) > 15
    bare = [
        a.option_strings[-1]
        for a in numeric
        if not any(re.search(rf"\b{u}\b", helps[a.option_strings[-1]]) for u in _UNITS)
    ]
    assert not bare, f"numeric flags whose help names no unit: {bare}"


@pytest.mark.parametrize(
    ("flag", "unit"),
    [
        ("--threshold", "percent"),
        ("--delta", "percent"),
        ("--futility-margin", "percentage points"),
        ("--confidence", "a fraction"),
        ("--futility-error", "a fraction"),
        ("--spot-rate", "a fraction"),
        ("--outlier-share", "a fraction"),
        ("--quantile", "a fraction"),
        ("--max-seconds", "seconds"),
        ("--wait-quiet", "seconds"),
        ("--selection-seconds", "seconds"),
    ],
)
def test_percent_and_fraction_flags_say_which(
    flag: str, unit: str, sections: dict[str, dict[tuple[str, ...], str]]
) -> None:
    """The flags that mix percent and fractions each say which one they take."""
    assert unit in _helps(sections)[flag]


# ---- the old names -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("old", "new"),
    [
        (["--cache", "cold"], ["--l2-cache", "cold"]),
        (["--in-process"], ["--isolation", "in_process"]),
        (["--log", "e.jsonl"], ["--json-log", "e.jsonl"]),
        (["--throughput-gate", "point"], ["--throughput-gate", "estimate"]),
        (["--max-pairs", "40"], ["--looks", "10,20,40"]),
        (["--max-pairs", "100"], ["--looks", "10,20,40,80,100"]),
        (["--looks", "10,50", "--max-pairs", "50"], ["--looks", "10,50"]),
    ],
)
def test_an_old_name_does_what_the_new_one_does(old: list[str], new: list[str]) -> None:
    """Each hidden old name builds the very tune its new name builds."""
    assert _resolved(old) == _resolved(new)


def test_max_pairs_that_disagrees_with_looks_is_refused() -> None:
    """``--max-pairs`` is the last of ``--looks``: a different number names both flags."""
    with pytest.raises(UsageError, match=r"--max-pairs 40 .*disagrees with --looks 10,20"):
        _resolved(["--looks", "10,20", "--max-pairs", "40"])
    with pytest.raises(UsageError, match="--max-pairs must be >= 2"):
        _resolved(["--max-pairs", "1"])


def test_a_bad_looks_names_the_flag(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tune", "--looks", "10,x"]) == 2
    assert "--looks: must be comma-separated integers like 10,20,40, got '10,x'" in (
        capsys.readouterr().err
    )
