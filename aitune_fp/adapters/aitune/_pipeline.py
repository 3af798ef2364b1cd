"""The session's pipeline as AITune's hooks see it; what it finds goes back in AITune's shapes."""

from __future__ import annotations

import contextlib
import contextvars
import math
from collections.abc import Iterator
from typing import Any

import attrs

from aitune_fp.adapters.aitune._names import (
    FORMATTING_MODULE,
    REPORTING_MODULE,
    aitune,
)
from aitune_fp.core.results import PerformanceValidationResult
from aitune_fp.errors import InvalidStateError
from aitune_fp.inputs import Sample, as_sample, copy_sample
from aitune_fp.pipeline.tune import TuneSession, active_session
from aitune_fp.pipeline.values import describe


class AituneSpec:
    """AITune's graph spec at the operating point ``_pre_tune`` resolved (``at``)."""

    def __init__(self, spec: Any) -> None:
        self.spec = spec
        self.name = str(getattr(spec, "name", "0"))
        self._size, self._batching = 1, False

    def at(self, size: int, batching: bool) -> None:
        """Validate at ``size`` (batched along AITune's batch axis when ``batching``)."""
        self._size, self._batching = int(size), bool(batching)

    @property
    def min_batch_size(self) -> int:
        """AITune's smallest recorded batch size (the operating point when it has none)."""
        low = self.spec.get_min_batch_size() if self._batching else None
        return self._size if low is None else min(int(low), self._size)

    def get_max_batch_size(self) -> int:
        """The operating point's batch size."""
        return self._size

    def make_batch(self, sample: Sample | tuple[Any, Any], batch_size: int) -> Sample:
        """AITune's batch of ``batch_size`` from ``sample`` (the sample itself when unbatched)."""
        sample = as_sample(sample)
        if not self._batching:
            return copy_sample(sample)
        args, kwargs = self.spec.make_batch(tuple(sample.args), dict(sample.kwargs), batch_size)
        return Sample(tuple(args), dict(kwargs))


#: Set while AITune builds a candidate for the session: its correctness check then says so.
BUILDING: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "aitune_fp_aitune_build", default=False
)


@attrs.frozen
class AituneBuild:
    """AITune's own build and correctness check as the session's build step.

    What it teaches the strategy is recorded in a worker (:meth:`record`), taught here (:meth:`learn`).
    """

    strategy: Any
    target: tuple[Any, ...]

    def __call__(self, backend: Any) -> Any:
        """AITune's build and check of a copy of ``backend``, its failure naming its stage."""
        token = BUILDING.set(True)
        try:
            return self.strategy._build_and_validate_backend(
                backend, *self.target, raise_on_failure=True
            )
        finally:
            BUILDING.reset(token)

    @contextlib.contextmanager
    def record(self) -> Iterator[list[Any]]:
        """In the block, what a build teaches the strategy is collected, not kept: the list."""
        strategy = self.strategy
        entries: list[Any] = strategy.backend_results
        first, sink = len(entries), strategy._sink
        lines: list[tuple[str, tuple[Any, ...]]] = []
        strategy._sink = lambda msg, *args: lines.append((str(msg), tuple(map(_plain, args))))
        taught: list[Any] = []
        try:
            yield taught
        finally:
            strategy._sink = sink
            new = [dict(e) if isinstance(e, dict) else e for e in entries[first:]]
            del entries[first:]
            taught[:] = [new, lines]

    def learn(self, taught: Any) -> None:
        """Teach the strategy what a build elsewhere taught its copy (:meth:`record`)."""
        entries, lines = taught
        self.strategy.backend_results.extend(entries)
        for msg, args in lines:
            self.strategy._sink(msg, *args)


def _plain(value: Any) -> Any:
    """A log argument as data a worker may send (its text when it is not a plain value)."""
    return value if isinstance(value, (str, int, float, bool, type(None))) else str(value)


def session_of(strategy: Any, module: Any) -> TuneSession:
    """The session of the tune ``strategy`` runs on ``module``; an error outside its tune."""
    session = active_session(module)
    if session is None or session.strategy != type(strategy).__name__:
        raise InvalidStateError(
            "a gated AITune strategy checks candidates only inside its own tune()"
        )
    return session


def key(backend: Any) -> str:
    """AITune's cache key of ``backend`` (its description when it has none)."""
    try:
        return str(backend.key())
    except Exception:
        return describe(backend)


def mark_failed(strategy: Any, description: str) -> None:
    """AITune's ``backend_results`` entry of a candidate aitune_fp found wrong: failed."""
    entries = getattr(strategy, "backend_results", None)
    if entries and isinstance(entries[-1], dict) and entries[-1].get("backend") == description:
        entries[-1]["success"] = False


def per_call_ms(throughput: float, batch_size: int) -> float:
    """The latency of one call of ``batch_size`` samples at ``throughput`` samples/s, in ms."""
    return batch_size / throughput * 1e3 if throughput > 0 else math.inf


def record(
    strategy: Any, result: PerformanceValidationResult, record_type: Any, *, latency: bool = False
) -> None:
    """Append AITune's record of ``result``: latencies in ms if ``latency``, else samples/s."""
    value, baseline = result.throughput, result.baseline_throughput
    if latency:
        size = result.batch_size or 1
        value, baseline = per_call_ms(value, size), per_call_ms(baseline, size)
    strategy.perf_validation_results.append(
        record_type(result.backend_description, value, baseline, result.speedup, result.passed)
    )
    aitune(REPORTING_MODULE, "report_backend_metric")(
        "latency" if latency else "throughput", result.backend_description, value
    )


def speedup_text(result: PerformanceValidationResult) -> str:
    """AITune's rendering of a speedup and whether it passed."""
    return str(aitune(FORMATTING_MODULE, "fmt_speedup_comparison")(result.speedup, result.passed))
