"""Pure statistics of deciding "the candidate is faster than eager by the threshold" (a facade).

The statistics live in modules that each hold one idea, reviewable alone; this module re-exports
their public names, so ``from aitune_fp.core.stats import ...`` keeps working:

- :mod:`~aitune_fp.core.timings`: the timing sequences every statistic accepts (checked once), one
  arm's throughput and noise, its warm-up tests (``is_steady``, ``is_settled``) and level shifts;
- :mod:`~aitune_fp.core.ranks`: exact and normal critical counts of the Wilcoxon signed-rank and
  Mann-Whitney tests, with their tie terms;
- :mod:`~aitune_fp.core.hodges_lehmann`: Hodges-Lehmann log speedups and the bounds from inverting
  those tests (paired and unpaired; the implicit selection for large samples);
- :mod:`~aitune_fp.core.verdict`: the three-outcome rule and its record, ``SpeedupDecision``
  (what an interval rules out, in words, is :mod:`~aitune_fp.core.messages`'
  ``ruled_out_statement``, re-exported here where it was imported from before);
- :mod:`~aitune_fp.core.sequential`: the decisions, in one look (``decide_speedup``) or at one look
  of a group-sequential measurement (``decide_at_look``, ``look_alpha``), with the remedies of the
  dependence checks of :mod:`~aitune_fp.core.dependence`.

See ``shared/reference/measurement-findings.md`` for the rule and the evidence behind it.
"""

from __future__ import annotations

from aitune_fp.core.hodges_lehmann import paired_log_speedup_bounds, unpaired_log_speedup_bounds
from aitune_fp.core.messages import ruled_out_statement
from aitune_fp.core.ranks import mann_whitney_critical_count, signed_rank_critical_count
from aitune_fp.core.sequential import (
    EARLY_PAIRS,
    EARLY_PHI,
    SPENDING_POWER,
    decide_at_look,
    decide_speedup,
    look_alpha,
)
from aitune_fp.core.timings import (
    coefficient_of_variation,
    is_settled,
    is_steady,
    level_shift_index,
    throughput_from_latencies,
)
from aitune_fp.core.verdict import METHODS, VERDICTS, SpeedupDecision, Verdict

__all__ = [
    "EARLY_PAIRS",
    "EARLY_PHI",
    "METHODS",
    "SPENDING_POWER",
    "VERDICTS",
    "SpeedupDecision",
    "Verdict",
    "coefficient_of_variation",
    "decide_at_look",
    "decide_speedup",
    "is_settled",
    "is_steady",
    "level_shift_index",
    "look_alpha",
    "mann_whitney_critical_count",
    "paired_log_speedup_bounds",
    "ruled_out_statement",
    "signed_rank_critical_count",
    "throughput_from_latencies",
    "unpaired_log_speedup_bounds",
]
