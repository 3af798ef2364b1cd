"""``aitune-fp tune``'s flags: the parser and the ProfilingConfig they ask for.

Every problem with a flag names the flag, never a config field; a flag that would do nothing in
the chosen decision mode is refused.
"""

from __future__ import annotations

import argparse
import re
from typing import Any

from aitune_fp.backends import registry
from aitune_fp.cli._shared import VERBOSE_HELP, UsageError
from aitune_fp.core import settings
from aitune_fp.core.accuracy import CRITERIA_MODES, accuracy_conflict
from aitune_fp.core.config import DECISION_MODES, MODE_FIELDS, ProfilingConfig
from aitune_fp.errors import InvalidValueError
from aitune_fp.measure.rules import decision_modes
from aitune_fp.models import MODELS
from aitune_fp.pipeline import strategy_registry

__all__ = [
    "ACCURACY_FLAGS",
    "accuracy_options",
    "add_arguments",
    "profiling_config",
    "strategy_settings",
]


def _flags() -> dict[str, tuple[str, tuple[str, ...] | None]]:
    """ProfilingConfig field -> the flag that sets it, and the decision modes that read it.

    None: every mode, registered ones too, for a field that ``MODE_FIELDS`` does not tie to one.
    """
    return {
        s.field: (s.flag, MODE_FIELDS.get(s.field)) for s in settings.SETTINGS if s.flag is not None
    }


#: Every form ``--model`` takes (``models.load_model`` parses it), so ``tune --help`` shows what
#: README and docs/cli.md document without sending the reader there.
_MODEL_HELP = (
    f"an embedded model: {', '.join(MODELS)}; or your own factory: "
    "path/to/file.py:factory (a Python file) or package.module:factory (an importable "
    "module: installed, or on PYTHONPATH). factory() takes no arguments and returns a "
    "torch.nn.Module (give --input-shape) or (module, sample)"
)


def _parse_looks(text: str) -> tuple[int, ...]:
    try:
        looks = tuple(int(x) for x in text.split(","))
    except ValueError:
        raise UsageError(
            f"--looks must be comma-separated integers like 10,20,40, got {text!r}"
        ) from None
    return looks


def profiling_config(args: argparse.Namespace) -> Any:
    """The ProfilingConfig the flags ask for; every problem names the flag, never a field."""
    kwargs: dict[str, Any] = {}
    if args.looks is not None:
        kwargs["looks"] = _parse_looks(args.looks)
        if args.max_pairs is not None and kwargs["looks"][-1] != args.max_pairs:
            raise UsageError("--max-pairs must equal the last of --looks (or give only one)")
    elif args.max_pairs is not None:
        if args.max_pairs < 2:
            raise UsageError(f"--max-pairs must be >= 2, got {args.max_pairs}")
        planned = [n for n in ProfilingConfig().looks if n < args.max_pairs]
        kwargs["looks"] = (*planned, args.max_pairs)
    flags = _flags()
    for setting in settings.SETTINGS:
        if setting.apart or setting.flag is None:
            continue
        value = getattr(args, setting.dest, None)
        if value is not None:
            kwargs[setting.field] = value
    for field in kwargs:
        flag, modes = flags[field]
        if field == "looks" and args.looks is None:
            flag = "--max-pairs"
        if modes is not None and args.decision not in modes:
            raise UsageError(
                f"{flag} applies to --decision {modes[0]} only, not to --decision {args.decision}"
            )
        try:
            ProfilingConfig(**{field: kwargs[field]})
        except (TypeError, ValueError) as exc:
            raise UsageError(f"{flag}: {_plain(str(exc), field, flag)}") from exc
    if args.threads is not None:  # both decision modes read it
        if args.threads < 1:
            raise UsageError(f"--threads must be an integer >= 1, got {args.threads}")
        kwargs["threads"] = args.threads
    try:
        return ProfilingConfig(decision=args.decision, **kwargs)
    except (TypeError, ValueError) as exc:
        message = str(exc)
        for field, (flag, _) in flags.items():
            message = _plain(message, field, flag)
        raise UsageError(message) from exc


#: ``Closeness`` setting -> the flag that sets it.
ACCURACY_FLAGS = {
    "criteria": "--accuracy",
    "rel_l2": "--rel-l2",
    "outlier_share": "--outlier-share",
    "calibrate": "--calibrate-noise",
    "noise_factor": "--noise-factor",
}


def accuracy_options(args: argparse.Namespace) -> dict[str, Any]:
    """The ``Closeness`` settings the accuracy flags ask for; a problem names the flag."""
    from aitune_fp.correctness.closeness import Closeness

    given = {
        "criteria": args.accuracy,
        "rel_l2": args.rel_l2,
        "outlier_share": args.outlier_share,
        "calibrate": args.calibrate_noise or None,
        "noise_factor": args.noise_factor,
    }
    kwargs = {k: v for k, v in given.items() if v is not None}
    problem = accuracy_conflict(kwargs.get("criteria", "auto"), kwargs, ACCURACY_FLAGS)
    if problem is not None:
        raise UsageError(problem)
    try:
        Closeness(**kwargs)
    except (TypeError, ValueError) as exc:
        message = str(exc)
        for field, flag in ACCURACY_FLAGS.items():
            message = _plain(message, field, flag)
        raise UsageError(message) from exc
    return kwargs


def _flag(option: str) -> str:
    """A strategy option's flag: ``budget_ms`` -> ``--budget-ms``."""
    return "--" + option.replace("_", "-")


def strategy_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The options ``--strategy`` is built with, checked by the registry; a problem names the flag."""
    given = {name: getattr(args, name, None) for name in strategy_registry.option_names()}
    try:
        return strategy_registry.strategy_options(args.strategy, given, spell=_flag)
    except (TypeError, ValueError) as exc:
        raise UsageError(str(exc)) from exc


def _shown(value: object) -> str:
    """A default as ``--help`` shows it: ``60.0`` -> ``60``, ``(10, 20)`` -> ``10,20``."""
    if isinstance(value, tuple):
        return ",".join(_shown(v) for v in value)
    return f"{value:g}" if isinstance(value, float) else str(value)


def _add(group: Any, *names: str, help: str, shown: object = None, **kwargs: Any) -> None:
    """Add a flag whose help ends with its default: the parser's, else ``shown`` (what applies)."""
    default = kwargs.get("default")
    value = shown if default is None or default is False else default
    text = help if value is None else f"{help} (default: {_shown(value)})"
    group.add_argument(*names, help=text.replace("%", "%%"), **kwargs)


def _row_help(setting: settings.Setting) -> str:
    """A row's help, led by the decision mode that alone reads it."""
    modes = MODE_FIELDS.get(setting.field)
    return f"{' or '.join(modes)} decision only: {setting.help}" if modes else setting.help


def _strategy_option_arguments(group: Any) -> None:
    """Each strategy option's flag, added after every flag of tune's own.

    An option whose flag tune has already (``threshold`` would be ``--threshold``) is refused,
    naming the option and its strategies, instead of argparse's clash inside the parser.
    """
    takers: dict[str, tuple[strategy_registry.StrategyOption, list[str]]] = {}
    for entry in strategy_registry.STRATEGIES.values():
        for option in entry.options:
            takers.setdefault(option.name, (option, []))[1].append(entry.name)
    for name, (option, names) in takers.items():
        try:
            _add(
                group,
                _flag(name),
                dest=name,
                type=option.parse,
                help=f"{', '.join(names)}: {option.help}",
                shown=option.default,
            )
        except argparse.ArgumentError:
            raise InvalidValueError(
                f"strategy option {name!r} of {', '.join(map(repr, names))} would be the flag "
                f"{_flag(name)}, which tune has already: give the option another name"
            ) from None


def _what_to_tune(group: Any) -> None:
    _add(group, "--model", default="mlp", help=_MODEL_HELP)
    _add(
        group,
        "--input-shape",
        help="the input's shape, comma-separated (8,256), for a factory that returns only a "
        "module: a random float input whose first dimension is the batch",
    )
    _add(
        group,
        "--device",
        default="auto",
        help="auto (CUDA when torch sees a device, else CPU), cpu, cuda or cuda:N",
    )
    _add(
        group,
        "--backends",
        help=f"comma-separated names: {', '.join(registry.backend_names())}; without it, the "
        f"device's defaults (CPU: {','.join(registry.default_backends('cpu'))}; "
        f"CUDA: {','.join(registry.default_backends('cuda'))})",
    )


def _the_gate(group: Any) -> None:
    _add(
        group,
        "--threshold",
        type=float,
        default=1.0,
        metavar="PERCENT",
        help="the speedup over eager a candidate must show, in percent (5: 1.05x)",
    )
    _add(
        group,
        "--decision",
        choices=decision_modes(),
        default=DECISION_MODES[0],
        help="how a candidate is judged: statistical (eager and candidate timed interleaved, "
        "decided on a confidence interval at planned looks) or point (AITune's rule: one point "
        "estimate from a warm-up and a few timed calls)",
    )


def _accuracy(group: Any) -> None:
    _add(
        group,
        "--accuracy",
        choices=CRITERIA_MODES,
        shown="auto",
        help="auto (norm criteria for reduced precision and int8, element-wise for float32 and "
        "float64), elementwise (every element within atol + rtol*|eager|, everywhere) or norm "
        "(the norm criteria in every precision tier)",
    )
    _add(
        group,
        "--rel-l2",
        type=float,
        metavar="FRACTION",
        help="relative L2 error budget, ||candidate - eager|| / ||eager|| as a fraction, in every "
        "norm tier; without it, each tier's own",
    )
    _add(
        group,
        "--outlier-share",
        type=float,
        metavar="FRACTION",
        shown=0.001,
        help="share of the elements allowed beyond their element-wise allowance, as a fraction",
    )
    _add(
        group,
        "--calibrate-noise",
        action="store_true",
        help="measure eager's own noise (float32 vs float64) once; rel-L2 budgets are at least "
        "--noise-factor times it",
    )
    _add(
        group,
        "--noise-factor",
        type=float,
        metavar="FACTOR",
        shown=10.0,
        help="with --calibrate-noise: how many times eager's noise a rel-L2 budget is at least",
    )


def _output(group: Any) -> None:
    _add(
        group,
        "--cache-dir",
        help="where builds and failure logs go; without it, a new aitune_fp-* temp dir, kept so "
        "that the logs it names stay readable (its path is printed)",
    )
    _add(group, "--json-log", help="append every event as JSON lines to this file")
    _add(
        group,
        "--format",
        choices=("table", "json", "markdown"),
        default="table",
        help="how the results print on stdout: table (a block of fields per candidate on a "
        "narrow terminal or a pipe), json (one document) or markdown (GitHub-flavoured tables)",
    )
    _add(group, "-q", "--quiet", action="store_true", help="no progress on stderr")
    _add(group, "-v", "--verbose", action="store_true", help=VERBOSE_HELP)


def _plain(message: str, field: str, flag: str) -> str:
    return re.sub(rf"\b{field}\b", flag, message)


def _max_pairs(group: Any) -> None:
    _add(
        group,
        "--max-pairs",
        type=int,
        metavar="PAIRS",
        shown=ProfilingConfig().looks[-1],
        help="statistical decision only: the most pairs timed per candidate, the last look "
        "(the planned looks below it are kept; with --looks, equal to its last)",
    )


def _strategy(group: Any) -> None:
    summaries = "; ".join(f"{e.name}: {e.summary}" for e in strategy_registry.STRATEGIES.values())
    _add(
        group,
        "--strategy",
        choices=strategy_registry.strategy_names(),
        default="max-throughput",
        help=f"which of the candidates shown faster is kept: {summaries}",
    )


def _isolation(group: Any) -> None:
    _add(
        group,
        "--in-process",
        action="store_true",
        help="build, check and time candidates in this process (guarded by snapshots) instead "
        "of a worker process each; see docs/guarantees.md",
    )


#: Each group's flags written here, added before the settings rows of that group.
_WRITTEN = {
    settings.WHAT: _what_to_tune,
    settings.GATE: _the_gate,
    settings.STATISTICS: _max_pairs,
    settings.CHOICE: _strategy,
    settings.ACCURACY: _accuracy,
    settings.ISOLATION: _isolation,
    settings.OUTPUT: _output,
}


def add_arguments(sub: Any) -> Any:
    """Add the ``tune`` subcommand's parser to ``sub`` and return it: its flags in groups."""
    tune = sub.add_parser(
        "tune",
        help="validate candidate backends against eager on a model (the main job)",
        description="Build the eager baseline and every candidate, gate each by measurement, "
        "print the verdicts. With no arguments: the default candidates on the embedded mlp.",
    )
    groups = {}
    for title, line in settings.GROUPS.items():
        group = groups[title] = tune.add_argument_group(title, line)
        if title in _WRITTEN:
            _WRITTEN[title](group)
        for setting in settings.SETTINGS:
            if setting.flag is not None and setting.group == title:
                _add(
                    group,
                    setting.flag,
                    type=setting.type,
                    choices=setting.choices,
                    metavar=setting.metavar,
                    shown=setting.default,
                    help=_row_help(setting),
                )
    _strategy_option_arguments(groups[settings.CHOICE])
    return tune
