"""Correctness before speed: a candidate's outputs must match eager's, checked leaf by leaf.

For every recorded sample, at the spec's smallest and largest batch size, the candidate and the
eager reference run on fresh copies of the same batch. The candidate's outputs must be finite
(infinity reported before NaN), have the reference's structure, shapes and dtypes (or the declared
reduced dtype), and be close to the reference's values: element-wise with dtype-aware tolerances,
or (reduced precision, by default) by norm criteria calibrated to the dtype and to eager's own
noise. Non-tensor outputs are compared explicitly; an output type we cannot compare is an error,
never skipped. See ``docs/accuracy.md``.

The parts: ``tolerances`` (the budget), ``compare`` (the walk over an output tree),
``_values`` (one floating leaf), ``check`` (the check over samples), ``closeness`` (``Closeness``), ``envelope`` (the
recorded inputs' envelope; copies that keep an input's layout), ``calls``, ``noise``
(eager's own error), ``_leaves`` (paths and finiteness), ``_errors``.
"""

from __future__ import annotations

from aitune_fp.core.accuracy import Criterion, NoiseFloor
from aitune_fp.core.mismatch import Mismatch
from aitune_fp.correctness._errors import (
    CHECKS,
    CheckName,
    CorrectnessError,
    ReferenceFailedError,
)
from aitune_fp.correctness.check import AccuracyMetric, check_correctness, served_batch_sizes
from aitune_fp.correctness.closeness import Closeness, InputGenerator
from aitune_fp.correctness.compare import check_comparable, compare_outputs
from aitune_fp.correctness.degenerate import degenerate_outputs
from aitune_fp.correctness.noise import eager_noise_floor
from aitune_fp.correctness.tolerances import TIERS, Tier, Tolerances

__all__ = [
    "CHECKS",
    "TIERS",
    "AccuracyMetric",
    "CheckName",
    "Closeness",
    "CorrectnessError",
    "Criterion",
    "InputGenerator",
    "Mismatch",
    "NoiseFloor",
    "ReferenceFailedError",
    "Tier",
    "Tolerances",
    "check_comparable",
    "check_correctness",
    "compare_outputs",
    "degenerate_outputs",
    "eager_noise_floor",
    "served_batch_sizes",
]
