"""What a validating strategy holds (the decorator's options, its last report) and its read-outs."""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from typing import Any, TypeVar

import attrs

from aitune_fp.core._checks import check_threshold, of_type, one_of
from aitune_fp.core.config import ProfilingConfig
from aitune_fp.core.report import CandidateFailure, TuneReport
from aitune_fp.core.results import ISOLATION_MODES, IsolationMode, PerformanceValidationResult
from aitune_fp.core.speedup import DEFAULT_THRESHOLD_PERCENT
from aitune_fp.correctness.closeness import Closeness
from aitune_fp.errors import InvalidValueError
from aitune_fp.pipeline.values import TuneTarget, ValidationOptions
from aitune_fp.pipeline.workers import isolation_of
from aitune_fp.profiling.timers import Timer

_T = TypeVar("_T")


def _optional_threshold(value: object) -> float | None:
    return None if value is None else check_threshold("min_speedup_threshold_percent", value)


def _config_or_default(value: object) -> object:
    return ProfilingConfig() if value is None else value


@attrs.frozen(kw_only=True)
class DecoratorOptions:
    """``with_performance_validation``'s arguments: one value on every path (``docs/api.md``)."""

    min_speedup_threshold_percent: float | None = attrs.field(
        default=None, converter=_optional_threshold
    )
    profiling_config: ProfilingConfig = attrs.field(
        factory=ProfilingConfig,
        converter=_config_or_default,
        validator=of_type(ProfilingConfig),
    )
    enabled: bool = attrs.field(default=True, validator=of_type(bool))
    timer: Timer | None = attrs.field(default=None, eq=False)
    closeness: Closeness | None = attrs.field(
        default=None, validator=attrs.validators.optional(of_type(Closeness))
    )
    isolation: IsolationMode | None = attrs.field(
        default=None, validator=attrs.validators.optional(one_of(ISOLATION_MODES))
    )

    def session_options(
        self, *, own_threshold: float | None = None, enabled: bool | None = None
    ) -> ValidationOptions:
        """The session's options: the strategy's own threshold and switch fill what was not given."""
        given = self.min_speedup_threshold_percent
        own = DEFAULT_THRESHOLD_PERCENT if own_threshold is None else own_threshold
        return ValidationOptions(
            min_speedup_threshold_percent=own if given is None else given,
            profiling_config=self.profiling_config,
            enabled=self.enabled if enabled is None else enabled,
            timer=self.timer,
            closeness=self.closeness,
            isolation=self.isolation,
        )

    def check_isolation(
        self, options: ValidationOptions, target: TuneTarget, why_not: str | None = None
    ) -> None:
        """Refuse ``isolation='process'`` by name where this tune could not give it workers."""
        if self.isolation != "process" or not options.enabled:  # off: nothing runs anywhere
            return
        where, note = isolation_of(options, target)
        reason = why_not or (note if where != "process" else None)
        if reason is not None:
            raise InvalidValueError(
                f"isolation='process' cannot hold for this tune: {reason}; pass "
                "isolation='in_process', or leave isolation unset (workers where they can run)"
            )


class LastReport:
    """A strategy's last report: this thread's if it tuned, else the latest; copies start empty."""

    def __init__(self, owner: object = None) -> None:
        self.owner = id(owner)
        self._local = threading.local()
        self._latest: tuple[TuneReport, Any] | None = None

    def __reduce__(self) -> tuple[Any, ...]:
        return (LastReport, ())

    def keep(self, report: TuneReport, baseline: Any = None) -> None:
        """Hold ``report`` and a weak reference to the eager ``baseline`` (never kept alive)."""
        try:
            ref: Any = None if baseline is None else weakref.ref(baseline)
        except TypeError:
            ref = None
        self._local.entry = self._latest = (report, ref)

    def get(self) -> tuple[TuneReport, Any] | None:
        """The report and baseline reference: this thread's, else the latest of any thread."""
        entry: tuple[TuneReport, Any] | None = getattr(self._local, "entry", None)
        return entry if entry is not None else self._latest


_LOCK = threading.Lock()
_HELD = "_aitune_fp_last_report"


def last_report_of(obj: object) -> LastReport:
    """``obj``'s holder in its ``__dict__`` (a fresh one on a copy, which has its own identity)."""
    with _LOCK:
        held = vars(obj).get(_HELD)
        if not isinstance(held, LastReport) or held.owner != id(obj):
            held = vars(obj)[_HELD] = LastReport(obj)
    return held


def _read_out(field: str, default: Any, doc: str) -> Any:
    """The last report's ``field`` (empty: the report); what the strategy assigns shows until a tune."""
    own = f"_aitune_fp_own_{field or 'report'}"

    def get(self: ReadOuts) -> Any:
        entry = self._aitune_fp_last().get()
        if entry is None:
            return getattr(self, "__dict__", {}).get(own, default)
        return getattr(entry[0], field) if field else entry[0]

    def put(self: object, value: Any) -> None:
        vars(self)[own] = value

    return property(get, put, doc=doc)


class ReadOuts:
    """The read-outs of a validating strategy's last tune, under AITune's names."""

    _aitune_fp_last: Callable[[], LastReport]
    _aitune_fp_session_options: Callable[[], ValidationOptions]

    perf_validation_results: tuple[PerformanceValidationResult, ...] = _read_out(
        "results", (), "One result per measured candidate of the last tune."
    )
    candidate_failures: tuple[CandidateFailure, ...] = _read_out(
        "failures", (), "What failed in the last tune: build, correctness, profiling."
    )
    baseline_throughput: float | None = _read_out(
        "baseline_throughput", None, "Eager throughput (samples/s) of the last tune."
    )
    resolved_batch_size: int | None = _read_out(
        "batch_size", None, "The batch size the last tune validated at."
    )
    run_id: str | None = _read_out("run_id", None, "The run id of the last tune.")
    last_report: TuneReport | None = _read_out(
        "", None, "The frozen report of the last tune (this thread's, if it tuned)."
    )

    @property
    def baseline_backend(self) -> Any:
        """The eager baseline of the last tune while something else holds it (it is not kept)."""
        entry = self._aitune_fp_last().get()
        return None if entry is None or entry[1] is None else entry[1]()

    @property
    def validation_options(self) -> ValidationOptions:
        """The options the next tune validates with."""
        return self._aitune_fp_session_options()

    @property
    def performance_validation_enabled(self) -> bool:
        """Whether ``tune`` validates (False: no eager build, no profiling)."""
        return self._aitune_fp_session_options().enabled


class Validation(ReadOuts):
    """aitune_fp's view of a validating strategy: ``validation_of`` returns one on every path."""

    def __init__(self, strategy: Any) -> None:
        self.strategy = strategy
        self._aitune_fp_last = strategy._aitune_fp_last
        self._aitune_fp_session_options = strategy._aitune_fp_session_options

    @property
    def min_speedup_threshold_percent(self) -> float:
        """The gate in percent: a candidate must be this much faster than eager."""
        return self._aitune_fp_session_options().min_speedup_threshold_percent
