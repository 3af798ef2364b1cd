"""A sweep description as frozen values, checked up front: a problem names its entry and field."""

from __future__ import annotations

import importlib
import math
import os
import re
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from aitune_fp.backends import registry
from aitune_fp.core import settings
from aitune_fp.core._checks import check_threshold
from aitune_fp.core.config import DECISION_MODES, ProfilingConfig, needs_cuda
from aitune_fp.core.settings import sweep_keys
from aitune_fp.core.speedup import unreachable_threshold
from aitune_fp.errors import InvalidStateError, InvalidTypeError, InvalidValueError
from aitune_fp.measure.rules import decision_modes
from aitune_fp.pipeline import strategy_registry

__all__ = [
    "DEVICE_KINDS",
    "BackendChoice",
    "ModelEntry",
    "SweepSpec",
    "check_models",
    "default_task_timeout_s",
    "load_sweep",
    "parse_sweep",
]

#: Device kinds a sweep runs on: each task gets a whole device of this kind.
DEVICE_KINDS: tuple[str, ...] = ("cpu", "cuda")
#: The ``[budget]`` key that is not a ProfilingConfig field: each task's wall-clock deadline.
TASK_TIMEOUT_KEY = "task_timeout_s"
#: Added to the per-step watchdog bounds in :func:`default_task_timeout_s` (model load, set-up).
TASK_TIMEOUT_SLACK_S = 600.0
#: A sweep file's top-level keys: its tables, and each command setting's own key.
_TOP_KEYS = (
    "name",
    "budget",
    "accuracy",
    "models",
    "backends",
    "ray",
    *(s.key for s in settings.rows("command") if s.key and not s.key.startswith("[")),
)
_ACCURACY_KEYS = tuple(s.field for s in settings.rows("closeness"))
#: A ``[[models]]`` entry's keys: its label, and each command setting's ``[[models]]`` key.
_MODEL_KEYS = (
    "name",
    *(
        s.key.split()[1]
        for s in settings.rows("command")
        if s.key and s.key.startswith("[[models]]")
    ),
)
_ISOLATIONS = next(s.choices for s in settings.SETTINGS if s.field == "isolation") or ()
_RAY_KEYS = ("max_retries",)


@attrs.frozen(kw_only=True)
class ModelEntry:
    """One model of the sweep: its label, what to load (a file path made absolute) and an input shape."""

    name: str
    model: str
    input_shape: tuple[int, ...] | None = None
    batch_size: int | None = None


@attrs.frozen(kw_only=True)
class BackendChoice:
    """One candidate backend: a registry name and the settings passed to its factory."""

    name: str
    settings: tuple[tuple[str, Any], ...] = ()

    def label(self) -> str:
        """``compile`` or ``compile(mode=max-autotune)``: how tables name the choice."""
        if not self.settings:
            return self.name
        return f"{self.name}({', '.join(f'{k}={v}' for k, v in self.settings)})"


@attrs.frozen(kw_only=True)
class SweepSpec:
    """Everything a sweep runs: models × backends on one device kind, one strategy and gate.

    ``backends`` empty: the device's defaults; ``max_retries``: Ray's re-runs of a dead worker.
    """

    name: str
    device: str
    models: tuple[ModelEntry, ...]
    backends: tuple[BackendChoice, ...]
    strategy: str
    threshold: float
    profiling: ProfilingConfig
    log: str | None = None
    max_retries: int = 0
    #: The strategy's options as ``strategy_registry.strategy_options`` checked them, as pairs.
    strategy_options: tuple[tuple[str, Any], ...] = ()
    #: ``[accuracy]``: the ``Closeness`` settings every task's check uses, as pairs.
    accuracy: tuple[tuple[str, Any], ...] = ()
    #: Each task's deadline in seconds (``[budget] task_timeout_s``); None: the default,
    #: :func:`default_task_timeout_s`. A task still running then is killed and recorded as hung.
    task_timeout_s: float | None = None
    #: Where each task's candidates run: ``process`` (worker processes, where they can) or ``in_process``.
    isolation: str = "process"

    def task_deadline_s(self) -> float:
        """The deadline every task of this sweep gets: the file's, else the derived default."""
        if self.task_timeout_s is not None:
            return self.task_timeout_s
        return default_task_timeout_s(self.profiling, len(self.backend_names()))

    def backend_names(self) -> tuple[str, ...]:
        """The candidate names each task builds (the defaults when none are listed)."""
        if self.backends:
            return tuple(b.name for b in self.backends)
        return registry.default_backends(self.device)


def default_task_timeout_s(profiling: ProfilingConfig, backends: int) -> float:
    """A task's default deadline: 600 s, plus one build and two checked steps for eager and each candidate.

    With the defaults and three backends, 600 + 4 x 1,980 s = 8,520 s.
    """
    per_step = profiling.max_seconds + profiling.hang_grace_s
    return TASK_TIMEOUT_SLACK_S + (backends + 1) * (profiling.build_timeout_s + 2 * per_step)


def _str(where: str, value: object) -> str:
    if not isinstance(value, str):
        raise InvalidTypeError(f"{where} must be a string, got {type(value).__name__} {value!r}")
    if not value.strip():
        raise InvalidValueError(f"{where} must not be empty")
    return value


def _choice(where: str, value: object, choices: Sequence[str]) -> str:
    text = _str(where, value)
    if text not in choices:
        raise InvalidValueError(f"{where} must be one of {', '.join(choices)}, got {text!r}")
    return text


def _table(where: str, value: object) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise InvalidTypeError(f"{where} must be a table, got {type(value).__name__} {value!r}")
    return value


def _known_keys(where: str, table: Mapping[str, Any], keys: Sequence[str]) -> None:
    key = next((k for k in table if k not in keys), None)
    if key is not None:
        at = f"{where}: " if where else ""
        raise InvalidValueError(f"{at}unknown key {key!r} (known: {', '.join(keys)})")


def _model(i: int, raw: object, base_dir: str) -> ModelEntry:
    from aitune_fp.models import MODELS, UserModelError, check_source, checked_shape, model_source

    where = f"models[{i}]"
    if isinstance(raw, str):
        raw = {"model": raw}
    table = _table(where, raw)
    _known_keys(where, table, _MODEL_KEYS)
    if "model" not in table:
        raise InvalidValueError(f"{where}: missing 'model' (an embedded name or file.py:factory)")
    spec = _str(f"{where}.model", table["model"])
    shape = None
    if "input_shape" in table:
        at = f"{where}.input_shape"
        shape = checked_shape(_array(at, table["input_shape"], "[8, 256]"), at)
    check_source(spec, shape is not None, f"{where}.model", f"{where}.input_shape")
    if spec in MODELS:
        default_name = spec
    else:
        try:
            kind, target, factory = model_source(spec)
        except UserModelError as exc:
            raise InvalidValueError(
                f"{where}.model must be one of {', '.join(MODELS)}, path/to/file.py:factory or "
                f"package.module:factory, got {spec!r} ({exc})"
            ) from None
        if kind == "file":
            spec = f"{os.path.normpath(os.path.join(base_dir, target))}:{factory}"
        default_name = factory
    name = _file_name(f"{where}.name", table.get("name", default_name))
    rows = table.get("batch_size")
    if rows is not None and (isinstance(rows, bool) or not isinstance(rows, int) or rows < 1):
        raise InvalidValueError(f"{where}.batch_size must be an integer >= 1, got {rows!r}")
    return ModelEntry(name=name, model=spec, input_shape=shape, batch_size=rows)


def _backend(i: int, raw: object, device: str) -> BackendChoice:
    where = f"backends[{i}]"
    if isinstance(raw, str):
        raw = {"name": raw}
    table = _table(where, raw)
    _known_keys(where, table, ("name", "settings"))
    if "name" not in table:
        raise InvalidValueError(f"{where}: missing 'name' (one of {registry.backend_names()})")
    name = _str(f"{where}.name", table["name"])
    settings = _table(f"{where}.settings", table.get("settings", {}))
    try:
        registry.check_backend(name, device)
        registry.check_settings(name, settings)
    except registry.BackendChoiceError as exc:
        raise InvalidValueError(f"{where}: {exc}") from exc
    return BackendChoice(name=name, settings=tuple(sorted(settings.items())))


def _file_name(where: str, value: object) -> str:
    """A name that becomes part of a file or folder name: no separators, no ``..``, not empty."""
    name = _str(where, value)
    seps = {"/", "\\", os.sep, os.altsep or "/", "\x00"}
    if not name.strip() or ".." in name or any(sep in name for sep in seps):
        raise InvalidValueError(
            f"{where} {name!r} must be a plain name (no path separator, no '..', not empty): "
            "it names files the sweep writes"
        )
    return name


def _number(where: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidTypeError(f"{where} must be a number, got {type(value).__name__} {value!r}")
    if not math.isfinite(value):
        raise InvalidValueError(f"{where} must be a finite number, got {value!r}")
    return float(value)


def spelled(message: str, names: Mapping[str, str]) -> str:
    """``message`` with each field name it holds spelled as ``names`` says (a flag, a file's key)."""
    pattern = r"\b(" + "|".join(map(re.escape, names)) + r")\b"
    return re.sub(pattern, lambda m: names[m.group()], message) if names else message


def checked_config(
    values: Mapping[str, Any], decision: str, names: Mapping[str, str], decision_as: str
) -> ProfilingConfig:
    """The ProfilingConfig of ``values`` at ``decision``; errors spell keys as ``names`` does."""
    modes_of = {s.field: s.modes for s in settings.rows("config")}
    for key, value in values.items():
        modes = modes_of[key]
        if modes is not None and decision not in modes:
            raise InvalidValueError(
                f"{names[key]} applies to {decision_as} {modes[0]} only, "
                f"not to {decision_as} {decision}"
            )
        try:
            ProfilingConfig(**{key: value})
        except (TypeError, ValueError) as exc:
            text = spelled(str(exc), names)  # named once: prefixed only where it is not
            raise type(exc)(text if names[key] in text else f"{names[key]}: {text}") from exc
    try:
        return ProfilingConfig(decision=decision, **values)
    except (TypeError, ValueError) as exc:
        raise type(exc)(spelled(str(exc), names)) from exc


def checked_closeness(values: Mapping[str, Any], names: Mapping[str, str]) -> dict[str, Any]:
    """The ``Closeness`` settings given (None, False left out), checked; errors spelled by ``names``."""
    from aitune_fp.correctness.closeness import Closeness

    given = {k: v for k, v in values.items() if v is not None and v is not False}
    try:
        Closeness(**given)
    except (TypeError, ValueError) as exc:
        raise type(exc)(spelled(str(exc), names)) from exc
    return given


def _array(where: str, value: object, example: str) -> Sequence[Any]:
    """``value`` if it is a TOML array, else an error showing how to write one (``example``)."""
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Sequence):
        got = f"{type(value).__name__} {value!r}"
        raise InvalidTypeError(f"{where} must be an array, e.g. {example}, got {got}")
    return value


def parse_sweep(data: Mapping[str, Any], *, base_dir: str = ".", name: str = "sweep") -> SweepSpec:
    """Check a sweep description (TOML's) as a SweepSpec; relative paths from ``base_dir``."""
    table = _table("sweep", data)
    option_keys = strategy_registry.option_names()
    _known_keys("", table, (*_TOP_KEYS, *option_keys))
    device = _choice("device", table.get("device", "cpu"), DEVICE_KINDS)
    strategy = table.get("strategy", "max-throughput")
    options = strategy_registry.strategy_options(strategy, {k: table.get(k) for k in option_keys})
    decision = _choice("decision", table.get("decision", DECISION_MODES[0]), decision_modes())
    isolation = _choice("isolation", table.get("isolation", _ISOLATIONS[0]), _ISOLATIONS)
    threshold = check_threshold("threshold", table.get("threshold", 1.0))
    if (problem := unreachable_threshold("threshold", threshold)) is not None:
        raise InvalidValueError(problem)
    budget = _table("budget", table.get("budget", {}))
    _known_keys("budget", budget, (*sweep_keys(), TASK_TIMEOUT_KEY))
    given = {k: v for k, v in budget.items() if k != TASK_TIMEOUT_KEY}
    for key, default in attrs.asdict(ProfilingConfig(), recurse=False).items():
        if key in given and isinstance(default, tuple):  # looks: written [10, 20, 40]
            _array(f"budget.{key}", given[key], str(list(default)))
    profiling = checked_config(
        given, decision, {k: f"budget.{k}" for k in sweep_keys()}, "decision"
    )
    raw = budget.get(TASK_TIMEOUT_KEY)
    task_timeout = None if raw is None else _number(f"budget.{TASK_TIMEOUT_KEY}", raw)
    if task_timeout is not None and task_timeout <= 0:
        raise InvalidValueError(f"budget.{TASK_TIMEOUT_KEY} must be > 0 (seconds), got {raw!r}")
    if (need := needs_cuda(profiling, device)) is not None:
        key, value, why = need
        raise InvalidValueError(
            f'budget.{key} "{value}" needs device = "cuda" ({why}), got device {device!r}'
        )
    if "models" not in table:
        raise InvalidValueError("missing 'models': list at least one model")
    raw_models = _array("models", table["models"], '["mlp"] (or [[models]] tables)')
    if not raw_models:
        raise InvalidValueError("models must list at least one model")
    models = tuple(_model(i, m, base_dir) for i, m in enumerate(raw_models))
    names = [m.name for m in models]
    for i, name in enumerate(names):
        if name in names[:i]:
            first = names.index(name)
            raise InvalidValueError(f"models[{i}].name {name!r} repeats models[{first}]: give each entry its own name")  # fmt: skip
    backends = tuple(
        _backend(i, b, device)
        for i, b in enumerate(_array("backends", table.get("backends", []), '["compile"]'))
    )
    labels = [b.label() for b in backends]
    for i, label in enumerate(labels):
        if label in labels[:i]:
            raise InvalidValueError(f"backends[{i}] {label!r} is listed twice")
    strategy_registry.check_backends(strategy, labels)
    raw_accuracy = _table("accuracy", table.get("accuracy", {}))
    _known_keys("accuracy", raw_accuracy, _ACCURACY_KEYS)
    spell = {k: f"accuracy.{k}" for k in _ACCURACY_KEYS}
    accuracy = tuple(sorted(checked_closeness(raw_accuracy, spell).items()))
    ray = _table("ray", table.get("ray", {}))
    _known_keys("ray", ray, _RAY_KEYS)
    retries = ray.get("max_retries", 0)
    if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
        raise InvalidValueError(f"ray.max_retries must be an int >= 0, got {retries!r}")
    log = table.get("log")
    if log is not None:
        log = os.path.normpath(os.path.join(base_dir, _str("log", log)))
    sweep_name = _file_name("name", table.get("name", name))
    return SweepSpec(
        name=sweep_name,
        device=device,
        models=models,
        backends=backends,
        strategy=strategy,
        threshold=threshold,
        profiling=profiling,
        log=log,
        max_retries=retries,
        task_timeout_s=task_timeout,
        strategy_options=tuple(options.items()),
        accuracy=accuracy,
        isolation=isolation,
    )


def load_sweep(path: str | os.PathLike[str]) -> SweepSpec:
    """Read and check the sweep TOML file at ``path``, every user model's factory found up front."""
    try:  # the standard library's TOML reader (Python 3.11+); the package still runs on 3.10
        tomllib: Any = importlib.import_module("tomllib")
    except ImportError as exc:  # pragma: no cover - Python 3.10
        raise InvalidStateError("sweep files need Python 3.11 or later (tomllib)") from exc

    text_path = os.fspath(path)
    try:
        with open(text_path, "rb") as handle:
            data = tomllib.load(handle)
    except tomllib.TOMLDecodeError as exc:
        raise InvalidValueError(f"{text_path!r} is not valid TOML: {exc}") from exc
    stem = os.path.splitext(os.path.basename(text_path))[0] or "sweep"
    base_dir = os.path.dirname(os.path.abspath(text_path))
    spec = parse_sweep(data, base_dir=base_dir, name=stem)
    check_models(spec)
    return spec


def check_models(spec: SweepSpec) -> None:
    """Import every user model and find its factory (never called) before any task runs."""
    from aitune_fp.models import MODELS, UserModelError, resolve_factory

    for i, entry in enumerate(spec.models):
        if entry.model in MODELS:
            continue
        try:
            resolve_factory(entry.model)
        except UserModelError as exc:
            raise InvalidValueError(f"models[{i}].model: {exc}") from exc
