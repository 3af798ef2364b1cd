"""The values of one tune call (target, options, outcomes, errors) and helpers; no state."""

from __future__ import annotations

import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import attrs
import torch

from aitune_fp._tree import flatten_tensors, to_device
from aitune_fp.backends.support import safe_folder_name
from aitune_fp.core._checks import check_threshold, of_type, one_of
from aitune_fp.core.config import ProfilingConfig
from aitune_fp.core.messages import one_line
from aitune_fp.core.mismatch import Mismatch
from aitune_fp.core.report import Stage
from aitune_fp.core.results import ISOLATION_MODES, IsolationMode, PerformanceValidationResult
from aitune_fp.core.speedup import DEFAULT_THRESHOLD_PERCENT, Gate
from aitune_fp.correctness.closeness import Closeness
from aitune_fp.errors import (
    AitunefpError,
    InvalidTypeError,
    error_name,
)
from aitune_fp.events.kinds import EagerIsolation
from aitune_fp.inputs import BatchSpec, Sample
from aitune_fp.measure.rules import rule_for
from aitune_fp.profiling.timers import Timer

BASELINE_DIR = "perf_validation_baseline"
PROFILING_LOG_NAME = "profiling_error.log"


def _threshold(value: object) -> float:
    return check_threshold("min_speedup_threshold_percent", value)


@attrs.frozen(kw_only=True)
class ValidationOptions:
    """How a wrapped strategy validates: the gate, how to measure, whether it is on, which clock."""

    min_speedup_threshold_percent: float = attrs.field(
        default=DEFAULT_THRESHOLD_PERCENT, converter=_threshold
    )
    profiling_config: ProfilingConfig = attrs.field(  # its decision names a registered rule
        factory=ProfilingConfig,
        validator=[of_type(ProfilingConfig), lambda _, __, config: rule_for(config)],
    )
    enabled: bool = attrs.field(default=True, validator=of_type(bool))
    timer: Timer | None = attrs.field(default=None, eq=False)
    #: How outputs are held against eager's (None: the default ``Closeness()``): tolerances,
    #: eager's noise floor, a user accuracy metric (``docs/accuracy.md``).
    closeness: Closeness | None = attrs.field(
        default=None, validator=attrs.validators.optional(of_type(Closeness))
    )
    #: Where candidates run until chosen: ``process`` (a worker process each, eager in another),
    #: ``in_process`` (the user's process, guarded by snapshots), None: ``process`` on CPU and
    #: ``in_process`` on CUDA (CUDA workers not yet proven on a GPU); the tune falls back to
    #: ``in_process`` where workers cannot work, and says why.
    isolation: IsolationMode | None = attrs.field(
        default=None, validator=attrs.validators.optional(one_of(ISOLATION_MODES))
    )
    #: Why ``in_process`` where a driver chose it (an AITune distributed run), not the user.
    in_process_why: str | None = None

    @property
    def gate(self) -> Gate:
        """The gate, as the one value the session and the decision rules read."""
        return Gate(self.min_speedup_threshold_percent)

    @property
    def required_speedup(self) -> float:
        """The speedup a candidate must reach: ``1 + pct / 100`` (the gate's)."""
        return self.gate.required_speedup


@attrs.frozen
class TuneTarget:
    """What one tune call works on: AITune's ``tune`` arguments, checked and normalised."""

    module: torch.nn.Module
    name: str
    graph_spec: BatchSpec
    data: tuple[Sample, ...]
    device: torch.device | str
    cache_dir: Path

    @classmethod
    def of(
        cls,
        module: torch.nn.Module,
        name: object,
        graph_spec: BatchSpec,
        data: Sequence[Sample],
        device: torch.device | str,
        cache_dir: Path | str,
    ) -> TuneTarget:
        """Check the arguments a caller passed to ``tune`` (a clear error naming a bad one)."""
        if not isinstance(name, str):
            raise InvalidTypeError(f"name must be a str (the module's name), got {name!r}")
        return cls(module, name, graph_spec, on_device(data, device), device, Path(cache_dir))


def on_device(data: Sequence[Sample], device: torch.device | str) -> tuple[Sample, ...]:
    """The samples with every tensor on ``device`` (ones already there kept as they are)."""
    try:
        target = torch.device(device)
    except (RuntimeError, TypeError):
        return tuple(data)
    return tuple(_moved(item, target) if isinstance(item, Sample) else item for item in data)


def _moved(sample: Sample, device: torch.device) -> Sample:
    """``sample`` with its tensors on ``device``; the same object when none had to move."""
    value = (sample.args, dict(sample.kwargs))
    if all(
        t.device.type == device.type and device.index in (None, t.device.index)
        for t in flatten_tensors(value)
    ):
        return sample
    try:
        args, kwargs = to_device(value, device)
    except Exception:  # a device this torch cannot use: the eager baseline fails and says so
        return sample
    return Sample(args, kwargs)


@attrs.frozen
class CandidateOutcome:
    """What happened to one candidate: the ready backend, or the stage and reason it failed.

    ``build_s`` breaks ties among equally fast candidates; ``error`` is what a driver re-raises.
    """

    description: str
    backend: Any
    result: PerformanceValidationResult | None = None
    stage: Stage | None = None
    reason: str | None = None
    log_path: str | None = None
    mismatch: Mismatch | None = None
    build_s: float | None = None
    error: BaseException | None = attrs.field(default=None, eq=False, repr=False)

    @property
    def ok(self) -> bool:
        """True when the candidate is built, correct and (if gated) measurably faster."""
        return self.backend is not None


@attrs.frozen(eq=False)
class Opened:
    """What opening the baseline established: eager, and what comparisons time and check on.

    ``copied``: eager in this process (a private copy, or shared); ``noise``: its noise fields.
    """

    description: str
    batch: Sample
    baseline: Any
    eager: Any
    copied: EagerIsolation
    batches: tuple[Sample, ...]
    references: tuple[Any, ...]
    id_limits: dict[Any, int]
    heldout: tuple[Sample, ...]
    closeness: Closeness
    throughput: float
    latencies: tuple[float, ...]
    noise: dict[str, Any]
    duration_s: float


class StageError(AitunefpError, RuntimeError):
    """Raised by a driver's own build step to name the stage a candidate failed at."""

    def __init__(self, stage: Stage, cause: BaseException) -> None:
        """Wrap ``cause``, which failed at ``stage``."""
        super().__init__(f"{stage}: {cause}")
        self.stage: Stage = stage
        self.cause = cause


def infer_of(backend: Any) -> Callable[..., Any]:
    """How to call a backend: itself when callable (aitune_fp's), else its ``infer`` (AITune's)."""
    return backend if callable(backend) else backend.infer  # type: ignore[no-any-return]


def declared_dtype(backend: Any) -> torch.dtype | None:
    """The reduced precision a backend declares (``dtype`` or its config's autocast dtype)."""
    found = [getattr(backend, "dtype", None)]
    config = getattr(backend, "_config", None)
    if getattr(config, "autocast_enabled", False):
        found.append(getattr(config, "autocast_dtype", None))
    for dtype in found:
        if isinstance(dtype, torch.dtype) and dtype.is_floating_point:
            return dtype
    return None


class ModelChangedError(AitunefpError, RuntimeError):
    """A candidate changed the user's model (a tensor, a submodule or a flag); it was restored."""


class ProcessChangedError(AitunefpError, RuntimeError):
    """A candidate changed the process; restored, and what could not be is named."""


class NoValidBackendError(AitunefpError, RuntimeError):
    """No candidate was built, correct and faster; lists every candidate and why it failed."""

    def __init__(self, name: str, outcomes: Sequence[CandidateOutcome]) -> None:
        """Keep the module name and every outcome; the message lists them one per line."""
        self.module_name = name
        self.outcomes = tuple(outcomes)
        lines = [f"There is no valid backend for module {name!r}:"]
        lines += [f"- {o.description}: {o.stage or 'rejected'}: {o.reason}" for o in outcomes]
        if not outcomes:
            lines.append("- no candidates were given")
        super().__init__("\n".join(lines))


def append_failure_log(path: Path, title: str, exc: BaseException) -> str | None:
    """Append a failure block to ``path``; its path, or None if it cannot be written."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a", encoding="utf-8") as log:
            log.write(f"\n{title}\nException type: {type(exc).__name__}\n")
            log.write(f"Exception details: {exc}\nFull traceback:\n")
            log.write("".join(traceback.format_exception(type(exc), exc, exc.__traceback__)))
            details = getattr(exc, "details", None)  # an error raised in a worker process
            if isinstance(details, str) and details:
                log.write(f"In the worker process:\n{details}")
    except OSError:
        return None
    return str(path)


def failure_reason(exc: BaseException) -> str:
    name = error_name(exc)
    return f"{name}: {one_line(exc)}" if str(exc).strip() else name


def has_lazy(module: torch.nn.Module) -> bool:
    """Whether some parameter or buffer is still uninitialised (a LazyModule before its call)."""
    from torch.nn.parameter import is_lazy

    return any(is_lazy(t) for t in [*module.parameters(), *module.buffers()])


def candidate_folder(cache_dir: Path, backend: Any, description: str) -> Path:
    """A candidate's folder in the cache dir: its key, made safe; else its description."""
    try:
        name = str(backend.key())
    except Exception:
        name = description
    return cache_dir / safe_folder_name(name)


def describe(backend: Any) -> str:
    """A backend's description; its class name when it has none or ``describe`` fails."""
    try:
        return str(backend.describe())
    except Exception:
        return type(backend).__name__


#: ``TuneSession.open``'s default: build the eager baseline here (not adopt one built elsewhere).
BUILD: Any = object()
