"""``aitune-fp tune``'s parser from the settings rows; every problem names the flag, not a field."""

from __future__ import annotations

import argparse
from typing import Any

import attrs

from aitune_fp.backends import registry
from aitune_fp.cli._shared import OneName, UsageError, usage_errors
from aitune_fp.core import settings
from aitune_fp.core.config import ProfilingConfig
from aitune_fp.errors import InvalidValueError
from aitune_fp.measure.rules import decision_modes
from aitune_fp.models import MODELS
from aitune_fp.pipeline import strategy_registry
from aitune_fp.sweep.spec import checked_closeness, checked_config

#: The old flag for the last of ``--looks`` (hidden): alone it replaces the last look.
LAST_LOOK = "--max-pairs"


def _dynamic_help(field: str) -> str | None:
    """The help of a row whose text lists what this install has (models, backends, strategies)."""
    if field == "model":
        return (
            f"an embedded model: {', '.join(MODELS)}; or your own factory: path/to/file.py:factory "
            "or package.module:factory (installed, or on PYTHONPATH). factory() takes no "
            "arguments and returns a torch.nn.Module (give --input-shape) or (module, sample)"
        )
    if field == "backends":
        return (
            f"comma-separated names: {', '.join(registry.backend_names())}; without it, the "
            f"device's defaults (CPU: {','.join(registry.default_backends('cpu'))}; "
            f"CUDA: {','.join(registry.default_backends('cuda'))})"
        )
    if field == "strategy":
        return "which of the candidates shown faster is kept: " + "; ".join(
            f"{e.name}: {e.summary}" for e in strategy_registry.STRATEGIES.values()
        )
    return None


def _choices(row: settings.Setting) -> tuple[str, ...] | None:
    """A row's choices, with the decision rules and strategies registered in this process."""
    if row.field == "decision":
        return tuple(decision_modes())
    if row.field == "strategy":
        return tuple(strategy_registry.strategy_names())
    return row.choices


def default_text(value: object) -> str:
    """A default as ``--help`` shows it: ``60.0`` -> ``60``, ``(10, 20)`` -> ``10,20``."""
    if isinstance(value, tuple):
        return ",".join(default_text(v) for v in value)
    return f"{value:g}" if isinstance(value, float) else str(value)


def _help(text: str, default: object, modes: tuple[str, ...] | None = None) -> str:
    """A flag's help: led by the one mode that reads it, ended by its default when it has one."""
    if modes:
        text = f"{' or '.join(modes)} decision only: {text}"
    if default is not None and default is not False:
        text = f"{text} (default: {default_text(default)})"
    return text.replace("%", "%%")


def _typed(row: settings.Setting) -> Any:
    """The row's parser; a ValueError it raises becomes argparse's message naming the flag."""
    parse = row.type
    if parse is None or parse in (int, float):
        return parse

    def typed(text: str) -> Any:
        try:
            return parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    typed.__name__ = row.field
    return typed


def add_rows(group: Any, fields: tuple[str, ...], **helps: str) -> None:
    """Add the rows of ``fields`` to ``group`` (another command's), ``helps`` replacing theirs."""
    for row in settings.SETTINGS:
        if row.field in fields:
            _add_row(group, attrs.evolve(row, help=helps.get(row.field, row.help)))


def _add_row(group: Any, row: settings.Setting) -> None:
    """The row's flag (with ``-q``-style short name) and its hidden old names."""
    assert row.flag is not None
    kwargs: dict[str, Any] = {"dest": row.dest}
    if row.action is not None:
        kwargs["action"] = row.action
    else:
        kwargs.update(type=_typed(row), choices=_choices(row), metavar=row.metavar)
        kwargs["default"] = row.shown if row.into == "command" else None
        if row.aliases:
            kwargs["action"] = OneName
    text = _dynamic_help(row.field) or row.help
    group.add_argument(
        *[n for n in (row.short, row.flag) if n], help=_help(text, row.default, row.modes), **kwargs
    )
    for alias in row.aliases:
        name, _, const = alias.partition("=")
        if const:
            group.add_argument(
                name, dest=row.dest, action=OneName, nargs=0, const=const, help=argparse.SUPPRESS
            )
        else:
            group.add_argument(name, **{**kwargs, "help": argparse.SUPPRESS})
    if row.field == "looks":
        group.add_argument(LAST_LOOK, type=int, dest="max_pairs", help=argparse.SUPPRESS)


def _flag(option: str) -> str:
    """A strategy option's flag: ``budget_ms`` -> ``--budget-ms``."""
    return "--" + option.replace("_", "-")


def _strategy_option_arguments(group: Any) -> None:
    """Each strategy option's flag; one whose flag ``tune`` has already is refused by name."""
    takers: dict[str, tuple[strategy_registry.StrategyOption, list[str]]] = {}
    for entry in strategy_registry.STRATEGIES.values():
        for option in entry.options:
            takers.setdefault(option.name, (option, []))[1].append(entry.name)
    for name, (option, names) in takers.items():
        try:
            group.add_argument(
                _flag(name),
                dest=name,
                type=option.parse,
                help=_help(f"{', '.join(names)}: {option.help}", option.default),
            )
        except argparse.ArgumentError:
            raise InvalidValueError(
                f"strategy option {name!r} of {', '.join(map(repr, names))} would be the flag "
                f"{_flag(name)}, which tune has already: give the option another name"
            ) from None


def add_arguments(sub: Any) -> Any:
    """Add the ``tune`` subcommand's parser to ``sub`` and return it: one group per settings group."""
    tune = sub.add_parser(
        "tune",
        help="validate candidate backends against eager on a model (the main job)",
        description="Build the eager baseline and every candidate, gate each by measurement, "
        "print the verdicts. With no arguments: the default candidates on the embedded mlp.",
    )
    for title, line in settings.GROUPS.items():
        group = tune.add_argument_group(title, line)
        for row in settings.SETTINGS:
            if row.flag is not None and row.group == title:
                _add_row(group, row)
        if title == settings.CHOICE:
            _strategy_option_arguments(group)
    return tune


def _last_look(args: argparse.Namespace, looks: tuple[int, ...] | None) -> tuple[int, ...] | None:
    """``--looks`` with the old ``--max-pairs`` folded in: alone it ends the planned looks."""
    if args.max_pairs is None:
        return looks
    if looks is not None:
        if looks[-1] != args.max_pairs:
            raise UsageError(
                f"{LAST_LOOK} {args.max_pairs} (an old name for the last of --looks) disagrees "
                f"with --looks {default_text(looks)}: give --looks alone"
            )
        return looks
    if args.max_pairs < 2:
        raise UsageError(f"{LAST_LOOK} must be >= 2, got {args.max_pairs}")
    return (*[n for n in ProfilingConfig().looks if n < args.max_pairs], args.max_pairs)


def config_flags() -> dict[str, str]:
    """Each ProfilingConfig field's flag (its own name where it has none): how errors name it."""
    return {row.field: row.flag or row.field for row in settings.rows("config")}


def profiling_config(args: argparse.Namespace) -> Any:
    """The ProfilingConfig the flags ask for; every problem names the flag, never a field."""
    flags = config_flags()
    kwargs = {
        row.field: getattr(args, row.dest)
        for row in settings.rows("config")
        if row.flag is not None and getattr(args, row.dest, None) is not None
    }
    looks = _last_look(args, kwargs.get("looks"))
    if looks is not None:
        kwargs["looks"] = looks
        if args.looks is None:
            flags["looks"] = LAST_LOOK
    with usage_errors():
        return checked_config(kwargs, args.decision, flags, "--decision")


def accuracy_options(args: argparse.Namespace) -> dict[str, Any]:
    """The ``Closeness`` settings the accuracy flags ask for; a problem names the flag."""
    flags = {row.field: row.flag or row.field for row in settings.rows("closeness")}
    with usage_errors():
        return checked_closeness({f: getattr(args, f) for f in flags}, flags)


def strategy_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The options ``--strategy`` is built with, checked by the registry; a problem names the flag."""
    given = {name: getattr(args, name, None) for name in strategy_registry.option_names()}
    with usage_errors():
        return strategy_registry.strategy_options(args.strategy, given, spell=_flag)
