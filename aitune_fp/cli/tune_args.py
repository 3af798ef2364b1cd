"""``aitune-fp tune``'s flags: the parser and the ProfilingConfig they ask for.

Every problem with a flag names the flag, never a config field; a flag that would do nothing in
the chosen decision mode is refused.
"""

from __future__ import annotations

import argparse
import re
from typing import Any

from aitune_fp.backends import registry
from aitune_fp.cli._shared import UsageError
from aitune_fp.core import settings
from aitune_fp.core.accuracy import CRITERIA_MODES, accuracy_conflict
from aitune_fp.core.config import DECISION_MODES, MODE_FIELDS
from aitune_fp.errors import InvalidValueError
from aitune_fp.measure import decision_modes
from aitune_fp.models import MODELS
from aitune_fp.pipeline import strategy_registry

__all__ = ["accuracy_options", "add_arguments", "profiling_config", "strategy_settings"]

_STAT = "statistical decision: "


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
    f"an embedded model: {', '.join(MODELS)} (default mlp); or your own factory: "
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
    from aitune_fp.core.config import ProfilingConfig

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
_ACCURACY_FLAGS = {
    "criteria": "--accuracy",
    "rel_l2": "--rel-l2",
    "outlier_share": "--outlier-share",
    "calibrate": "--calibrate-noise",
    "noise_factor": "--noise-factor",
}


def accuracy_options(args: argparse.Namespace) -> dict[str, Any]:
    """The ``Closeness`` settings the accuracy flags ask for; a problem names the flag."""
    from aitune_fp.correctness import Closeness

    given = {
        "criteria": args.accuracy,
        "rel_l2": args.rel_l2,
        "outlier_share": args.outlier_share,
        "calibrate": args.calibrate_noise or None,
        "noise_factor": args.noise_factor,
    }
    kwargs = {k: v for k, v in given.items() if v is not None}
    problem = accuracy_conflict(kwargs.get("criteria", "auto"), kwargs, _ACCURACY_FLAGS)
    if problem is not None:
        raise UsageError(problem)
    try:
        Closeness(**kwargs)
    except (TypeError, ValueError) as exc:
        message = str(exc)
        for field, flag in _ACCURACY_FLAGS.items():
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


def _strategy_argument(tune: argparse.ArgumentParser) -> None:
    """``--strategy``, its choices and their summaries from the registry as it is now."""
    entries = strategy_registry.STRATEGIES.values()
    summaries = "; ".join(f"{e.name}: {e.summary}" for e in entries)
    tune.add_argument(
        "--strategy",
        choices=strategy_registry.strategy_names(),
        default="max-throughput",
        help=f"which candidate is kept (default max-throughput): {summaries}".replace("%", "%%"),
    )


def _strategy_option_arguments(tune: argparse.ArgumentParser) -> None:
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
            tune.add_argument(
                _flag(name),
                dest=name,
                type=option.parse,
                help=f"{', '.join(names)}: {option.help}".replace("%", "%%"),
            )
        except argparse.ArgumentError:
            raise InvalidValueError(
                f"strategy option {name!r} of {', '.join(map(repr, names))} would be the flag "
                f"{_flag(name)}, which tune has already: give the option another name"
            ) from None


def _plain(message: str, field: str, flag: str) -> str:
    return re.sub(rf"\b{field}\b", flag, message)


def add_arguments(sub: Any) -> Any:
    """Add the ``tune`` subcommand's parser to ``sub`` and return it."""
    tune = sub.add_parser(
        "tune",
        help="validate candidate backends against eager on a model (the main job)",
        description="Build the eager baseline and every candidate, gate each by measurement, "
        "print the verdicts. With no arguments: the default candidates on the embedded mlp.",
    )
    tune.add_argument(
        "--model",
        default="mlp",
        help=_MODEL_HELP,
    )
    tune.add_argument(
        "--input-shape", help="input shape for a user factory that returns only a module (8,256)"
    )
    tune.add_argument("--device", default="auto", help="auto (default), cpu, cuda or cuda:N")
    tune.add_argument(
        "--backends",
        help=f"comma list of {', '.join(registry.backend_names())} "
        f"(default CPU: {','.join(registry.default_backends('cpu'))}; "
        f"CUDA: {','.join(registry.default_backends('cuda'))})",
    )
    _strategy_argument(tune)
    tune.add_argument(
        "--threshold", type=float, default=1.0, help="minimum speedup in percent (default 1.0)"
    )
    tune.add_argument("--decision", choices=decision_modes(), default=DECISION_MODES[0])
    tune.add_argument("--max-pairs", type=int, help=_STAT + "timed pairs per arm at most (320)")
    for setting in settings.SETTINGS:
        if setting.flag is not None:
            tune.add_argument(
                setting.flag,
                type=setting.type,
                choices=setting.choices,
                metavar=setting.metavar,
                help=setting.help.replace("%", "%%"),
            )
    tune.add_argument(
        "--in-process",
        action="store_true",
        help="build, check and time candidates in this process (guarded by snapshots) instead "
        "of a worker process each; see docs/guarantees.md",
    )
    check = "the accuracy check (docs/accuracy.md): "
    tune.add_argument(
        "--accuracy",
        choices=CRITERIA_MODES,
        help=check + "auto (default: norm criteria for reduced precision and int8, element-wise "
        "for float32 and float64), elementwise (every element within atol + rtol*|eager|, "
        "everywhere) or norm (the norm criteria in every precision tier)",
    )
    tune.add_argument(
        "--rel-l2", type=float, help=check + "relative L2 error budget in every norm tier"
    )
    tune.add_argument(
        "--outlier-share", type=float, help=check + "share of outlier elements allowed (0.001)"
    )
    tune.add_argument(
        "--calibrate-noise",
        action="store_true",
        help=check + "measure eager's own noise (float32 vs float64) once; rel-L2 budgets are "
        "at least --noise-factor times it",
    )
    tune.add_argument(
        "--noise-factor", type=float, help=check + "with --calibrate-noise: the factor (10)"
    )
    tune.add_argument(
        "--cache-dir",
        help="where builds and failure logs go (default: a new aitune_fp-* temp dir, kept so "
        "that the logs it names stay readable; its path is printed)",
    )
    tune.add_argument("--json-log", help="append every event as JSON lines to this file")
    tune.add_argument("--format", choices=("table", "json", "markdown"), default="table")
    tune.add_argument("-q", "--quiet", action="store_true", help="no progress on stderr")
    _strategy_option_arguments(tune)
    return tune
