"""The last tune's report of each strategy object, kept outside the object, and its read-outs.

Both ways of validating a strategy (the wrapper in ``validation.py`` and the AITune adapter)
keep the frozen :class:`~aitune_fp.core.report.TuneReport` of each tune here, per strategy
object and thread, so copies and pickles start with none and nothing the user passed is kept
alive. :class:`ReportReadOuts` gives the read-outs (``perf_validation_results``, ...) of it.
"""

from __future__ import annotations

import contextlib
import threading
import weakref
from collections.abc import Callable
from typing import Any, Generic, TypeVar, cast, overload

from aitune_fp.core.report import CandidateFailure, TuneReport
from aitune_fp.core.results import PerformanceValidationResult

__all__ = ["ReportReadOuts", "keep_report", "last_report_of"]

_T = TypeVar("_T")


class _Reports:
    """The last reports of one strategy object: this thread's and the latest of any thread."""

    def __init__(self) -> None:
        self.local = threading.local()
        self.last: tuple[TuneReport, Any] | None = None

    def store(self, report: TuneReport, baseline: Any) -> None:
        """Keep ``report`` (and a weak reference to the eager baseline it fell back to)."""
        try:
            ref: Any = None if baseline is None else weakref.ref(baseline)
        except TypeError:
            ref = None
        entry = (report, ref)
        self.local.entry = entry
        self.last = entry

    def current(self) -> tuple[TuneReport, Any] | None:
        """The calling thread's last entry if it tuned, else the latest of any thread."""
        entry: tuple[TuneReport, Any] | None = getattr(self.local, "entry", None)
        return entry if entry is not None else self.last


_LOCK = threading.Lock()
_REPORTS: dict[int, _Reports] = {}


def _reports(obj: object, *, create: bool) -> _Reports | None:
    """The reports of ``obj`` (by identity); dropped when ``obj`` is collected."""
    key = id(obj)
    with _LOCK:
        reports = _REPORTS.get(key)
        if reports is None and create:
            reports = _REPORTS[key] = _Reports()
            with contextlib.suppress(TypeError):  # not weak-referenceable: kept to the end
                weakref.finalize(obj, _REPORTS.pop, key, None)
    return reports


def keep_report(obj: object, report: TuneReport, baseline: Any = None) -> None:
    """Keep ``report`` as ``obj``'s last (and a weak reference to its eager ``baseline``)."""
    reports = _reports(obj, create=True)
    assert reports is not None
    reports.store(report, baseline)


def last_report_of(obj: object) -> tuple[TuneReport, Any] | None:
    """``obj``'s last report (this thread's if it tuned) and a weak ref to its baseline."""
    reports = _reports(obj, create=False)
    return None if reports is None else reports.current()


class _ReadOut(Generic[_T]):
    """A read-out of the last tune's report, under AITune's name.

    A strategy may assign the same name itself (AITune-style code does): that value is kept and
    returned until a validated tune has run.
    """

    def __init__(self, read: Callable[[TuneReport], _T], default: _T, doc: str) -> None:
        self._read = read
        self._default = default
        self.__doc__ = doc
        self._name = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self._name = name

    @overload
    def __get__(self, obj: None, objtype: type | None = None) -> _ReadOut[_T]: ...
    @overload
    def __get__(self, obj: object, objtype: type | None = None) -> _T: ...
    def __get__(self, obj: object | None, objtype: type | None = None) -> Any:
        if obj is None:
            return self
        entry = last_report_of(_owner(obj))
        if entry is not None:
            return self._read(entry[0])
        return vars(obj).get(f"_aitune_fp_own_{self._name}", self._default)

    def __set__(self, obj: object, value: _T) -> None:
        vars(obj)[f"_aitune_fp_own_{self._name}"] = value


def _owner(obj: object) -> object:
    """Whose reports ``obj``'s read-outs show (see ``ReportReadOuts._aitune_fp_report_owner``)."""
    return cast(ReportReadOuts, obj)._aitune_fp_report_owner()


class ReportReadOuts:
    """The read-outs of the last tune's report, for a validating strategy or a view of one."""

    def _aitune_fp_report_owner(self) -> object:
        """The object whose reports these read-outs show (the strategy itself by default)."""
        return self

    perf_validation_results = _ReadOut[tuple[PerformanceValidationResult, ...]](
        lambda r: r.results,
        (),
        "One result per measured candidate of the last tune (this thread's, if it tuned).",
    )
    candidate_failures = _ReadOut[tuple[CandidateFailure, ...]](
        lambda r: r.failures,
        (),
        "Candidates (and the strategy) of the last tune that failed: build, correctness, profiling.",
    )
    baseline_throughput = _ReadOut[float | None](
        lambda r: r.baseline_throughput,
        None,
        "Eager throughput (samples/s) measured up front in the last tune.",
    )
    resolved_batch_size = _ReadOut[int | None](
        lambda r: r.batch_size, None, "The batch size the last tune validated at."
    )
    run_id = _ReadOut[str | None](
        lambda r: r.run_id, None, "The run id of the last tune (shared by all its events)."
    )
    last_report = _ReadOut[TuneReport | None](
        lambda r: r, None, "The frozen report of the last tune (this thread's, if it tuned)."
    )

    @property
    def baseline_backend(self) -> Any:
        """The eager baseline of the last tune while something else holds it (it is not kept)."""
        entry = last_report_of(self._aitune_fp_report_owner())
        return None if entry is None or entry[1] is None else entry[1]()
