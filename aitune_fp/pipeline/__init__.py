"""One tune call as an explicit value: the baseline, the gate, and the one candidate pipeline.

A :class:`TuneSession` is made by the validating wrapper for each ``tune`` call and handed to
the strategy; ``session.try_candidate(backend)`` builds a candidate, checks it against eager,
times it against eager (when validating), records the result or the failure and releases a
loser. Unvalidated tunes use the same pipeline without the timing (``TuneSession.plain``).
At the end the session becomes a frozen :class:`~aitune_fp.core.report.TuneReport` that holds
no tensors, modules or backends.

Parts: ``tune`` (:class:`TuneSession`), its steps (``values``, ``baseline``, ``guarding``,
``vetting``, ``workers``, ``ending``), the choice among passing candidates (``choosing``), the
built-in strategies (``strategies``) and their torch-free table (``strategy_registry``). Names
load on first use (PEP 562), so ``aitune_fp.pipeline.strategy_registry`` imports without torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aitune_fp._lazy import lazy_names

if TYPE_CHECKING:
    from aitune_fp.core.messages import one_line
    from aitune_fp.pipeline.tune import TuneSession, active_session
    from aitune_fp.pipeline.values import (
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

_NAMES = {
    "BASELINE_DIR": "aitune_fp.pipeline.values",
    "BUILD": "aitune_fp.pipeline.values",
    "CandidateOutcome": "aitune_fp.pipeline.values",
    "ModelChangedError": "aitune_fp.pipeline.values",
    "NoValidBackendError": "aitune_fp.pipeline.values",
    "PROFILING_LOG_NAME": "aitune_fp.pipeline.values",
    "ProcessChangedError": "aitune_fp.pipeline.values",
    "StageError": "aitune_fp.pipeline.values",
    "TuneSession": "aitune_fp.pipeline.tune",
    "TuneTarget": "aitune_fp.pipeline.values",
    "ValidationOptions": "aitune_fp.pipeline.values",
    "active_session": "aitune_fp.pipeline.tune",
    "append_failure_log": "aitune_fp.pipeline.values",
    "declared_dtype": "aitune_fp.pipeline.values",
    "describe": "aitune_fp.pipeline.values",
    "infer_of": "aitune_fp.pipeline.values",
    "one_line": "aitune_fp.core.messages",
}

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
__getattr__, __dir__ = lazy_names(__name__, globals(), _NAMES)
