"""The measuring loop: time eager and a candidate, ask the pure decision at each look, stop.

Two decision rules, one module each, chosen by name in :mod:`~aitune_fp.measure.rules`
(:func:`rule_for`, :func:`measure_speedup`; :func:`decision_modes`, the names registered):

- :mod:`~aitune_fp.measure.statistical`: interleaved pairs decided at planned looks, under a hard
  time budget (the default), with :mod:`~aitune_fp.measure.clocks` (host and device time),
  :mod:`~aitune_fp.measure.results` (the result record) and :mod:`~aitune_fp.measure.reasons`
  (the reason sentence);
- :mod:`~aitune_fp.measure.point`: AITune's rule, reproduced (baseline once up front);
- :mod:`~aitune_fp.measure.measurement`: the :class:`Comparison` every rule takes and the
  :class:`Measurement` it returns.

Every rule's ``compare`` takes ``batches`` (several distinct batches, timed in turn: pair ``i``
runs both arms on ``batches[i % len(batches)]``) with ``references`` (eager's output on each, for
the spot checks: ``spot_check(output, reference)``), ``spot_rate`` and ``spot_seed``; without
``batches`` the one ``batch`` is timed and ``spot_check(output)`` is called. While timing, the
candidate's outputs of the first and last pair of every look, of a seeded random ~``spot_rate``
of the pairs between, and of the first pair on each batch go to ``spot_check`` (untimed;
:func:`aitune_fp.profiling.spot_calls`).

Throughputs are always samples/s from the mean latency (AITune's figure); the statistical verdict
is based on the Hodges-Lehmann interval of the paired log ratios (the typical call), which the
``decision`` carries. ``RULES`` is served from here as the same dict :func:`rule_for` reads, so
replacing an entry here (as ``benchmarks/overhead.py`` does) reaches every caller.
"""

from __future__ import annotations

from aitune_fp.measure.measurement import Comparison, Measurement
from aitune_fp.measure.measurement import OnLook as OnLook
from aitune_fp.measure.point import measure_baseline_point
from aitune_fp.measure.reasons import reason_text as reason_text
from aitune_fp.measure.rules import RULES as RULES
from aitune_fp.measure.rules import (
    DecisionRule,
    decision_modes,
    measure_speedup,
    register,
    rule_for,
    unregister,
)
from aitune_fp.measure.statistical import measure_throughput_steady

__all__ = [
    "Comparison",
    "DecisionRule",
    "Measurement",
    "decision_modes",
    "measure_baseline_point",
    "measure_speedup",
    "measure_throughput_steady",
    "register",
    "rule_for",
    "unregister",
]
