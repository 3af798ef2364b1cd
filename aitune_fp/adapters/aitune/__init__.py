"""Gate NVIDIA AITune's own strategies with aitune_fp's interleaved statistical decision.

``aitune_fp.with_performance_validation(strategy_or_class)`` sends an AITune strategy here. What
comes back is a strategy of the same AITune class (a trivial subclass; for an instance, a
strategy of that subclass sharing the instance's state) whose every candidate is decided by
aitune_fp instead of AITune's point estimate:

* mixin strategies (``OneBackendStrategy``, ``FirstWinsStrategy`` and their subclasses): each
  candidate passes through ``_build_validate_and_check_perf``, which is replaced (:mod:`.gate`);
* profiling strategies (``MaxThroughputStrategy``, ``MinLatencyStrategy``,
  ``LatencyBudgetStrategy``): ``_run_backends`` is replaced; the winner among the candidates
  shown faster is :func:`aitune_fp.pipeline.choosing.choose`'s (head-to-head in the statistical mode).
  MinLatency compares at batch size 1; LatencyBudget first holds each one's p90 latency to its
  budget with an exact order-statistics bound. ``_resolve_winner`` keeps the gate's winner and
  AITune's fallbacks (:mod:`.profiling_gate`).

Each tune runs in a :class:`~aitune_fp.pipeline.TuneSession`, the same one candidate pipeline
the built-in strategies use; this package only drives it from AITune's hooks. The session takes
the model (eval mode, guarded) before AITune's ``_pre_tune``, adopts AITune's eager baseline
there, and takes each candidate through ``try_candidate`` with AITune's own build and
correctness check as the build step: model guard, closeness to eager on every sample at both
batch ends, the timed comparison with spot checks, the record, the release of a loser. AITune
keeps its contract: its ``perf_validation_results`` list gets one AITune-shaped record per
measured candidate (so its log lines and ⚡ post-tune line print as before), its threshold and
``enable_performance_validation(mode)`` keep their meaning (enabled / diagnostic / disabled),
and its fallbacks stay. aitune_fp's results, failures and report are read through
``validation_of(strategy)`` from the session's report; the events are the built-in path's.

The hooks are private names of AITune 0.6 (:mod:`._names`): each is checked by name when a
strategy is decorated, and a missing one is a clear :class:`AituneVersionError` naming the
AITune version and the name; the decorated strategy never falls back to AITune's own gate.
Nothing here imports AITune at import time (it works on the strategy it is given and imports
AITune's modules on first use).
"""

from __future__ import annotations

from aitune_fp.adapters import is_aitune_strategy
from aitune_fp.adapters.aitune._names import (
    SUPPORTED_AITUNE,
    AituneVersionError,
    aitune_version,
)
from aitune_fp.adapters.aitune.decorate import closeness_options, with_performance_validation
from aitune_fp.adapters.aitune.options import AituneOptions, threshold_of

__all__ = [
    "SUPPORTED_AITUNE",
    "AituneOptions",
    "AituneVersionError",
    "aitune_version",
    "closeness_options",
    "is_aitune_strategy",
    "threshold_of",
    "with_performance_validation",
]
