"""One tune call as an explicit value: the baseline, the gate, and the one candidate pipeline.

A :class:`TuneSession` is made by the validating wrapper for each ``tune`` call and handed to
the strategy; ``session.try_candidate(backend)`` builds a candidate, checks it against eager,
times it against eager (when validating), records the result or the failure and releases a
loser. Unvalidated tunes use the same pipeline without the timing (``TuneSession.plain``).
At the end the session becomes a frozen :class:`~aitune_fp.core.report.TuneReport` that holds
no tensors, modules or backends.
"""

from __future__ import annotations

from aitune_fp.core.messages import one_line
from aitune_fp.session.tune import TuneSession, active_session
from aitune_fp.session.values import (
    BASELINE_DIR,
    BUILD,
    PROFILING_LOG_NAME,
    CandidateOutcome,
    ModelChangedError,
    NoValidBackendError,
    ProcessChangedError,
    StageError,
    TuneTarget,
    ValidationOptions,
    append_failure_log,
    declared_dtype,
    describe,
    infer_of,
)

__all__ = [
    "BASELINE_DIR",
    "BUILD",
    "PROFILING_LOG_NAME",
    "CandidateOutcome",
    "ModelChangedError",
    "NoValidBackendError",
    "ProcessChangedError",
    "StageError",
    "TuneSession",
    "TuneTarget",
    "ValidationOptions",
    "active_session",
    "append_failure_log",
    "declared_dtype",
    "describe",
    "infer_of",
    "one_line",
]
