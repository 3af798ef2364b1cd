"""A result keeps the raw timings it rests on, so any figure can be derived from them again.

Spec: ``baseline_latencies_s`` and ``candidate_latencies_s`` are each arm's seconds per call on
the clock that decided; in statistical mode pair ``i`` is each arm's ``i``-th interleaved call
and the throughputs and the estimate rest on the ``n_baseline`` pairs from ``latencies_from``.
They travel in ``candidate_measured`` and come back through ingest's fold unchanged.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from aitune_fp.adapters.validation import validation_of
from aitune_fp.core.config import ProfilingConfig
from aitune_fp.core.hodges_lehmann import paired_log_speedup_bounds
from aitune_fp.core.results import PerformanceValidationResult, Raw
from aitune_fp.core.timings import throughput_from_latencies
from aitune_fp.errors import InvalidValueError
from aitune_fp.events.ingest import ingest
from aitune_fp.pipeline.strategies import OneBackendStrategy
from aitune_fp.testing import capture_events
from tests.test_fold import _lines
from tests.test_machine_moved import _machine, _measure
from tests.validation_helpers import FAST_CONFIG, Pruned, Slower, gated, make_case


def _measured(backend: Any, tmp_path: Path, **config: Any) -> PerformanceValidationResult:
    profiling = ProfilingConfig(**{**FAST_CONFIG.to_dict(), **config})
    strategy = gated(OneBackendStrategy(backend), profiling_config=profiling)
    module, spec, data = make_case()
    strategy.tune(module, "m", spec, data, "cpu", tmp_path)
    report = validation_of(strategy).last_report
    assert report is not None
    (result,) = report.results
    return result


@pytest.mark.parametrize("backend", [Pruned(), Slower()], ids=["faster", "slower"])
def test_statistical_figures_derive_from_the_raw_pairs(backend: Any, tmp_path: Path) -> None:
    """Throughputs and the estimate come back from the recorded pairs and nothing else."""
    r = _measured(backend, tmp_path)
    base, cand = r.baseline_latencies_s, r.candidate_latencies_s
    assert len(base) == len(cand) >= r.n_baseline >= 10
    assert r.latencies_from is not None and r.batch_size is not None
    used = slice(r.latencies_from, r.latencies_from + r.n_baseline)
    size = r.batch_size
    assert r.baseline_throughput == pytest.approx(throughput_from_latencies(base[used], size))
    assert r.throughput == pytest.approx(throughput_from_latencies(cand[used], size))
    estimate, _, _ = paired_log_speedup_bounds(base[used], cand[used], 0.05)
    assert r.estimate == pytest.approx(math.exp(estimate))


def test_point_mode_keeps_each_arms_calls(tmp_path: Path) -> None:
    """Point mode: eager's up-front calls and the candidate's, unpaired (no ``latencies_from``)."""
    r = _measured(Pruned(), tmp_path, decision="point")
    assert r.latencies_from is None and r.batch_size is not None
    assert len(r.candidate_latencies_s) == r.n_candidate == FAST_CONFIG.point_steps
    assert len(r.baseline_latencies_s) == r.n_baseline
    size = r.batch_size
    assert r.throughput == pytest.approx(throughput_from_latencies(r.candidate_latencies_s, size))
    assert r.baseline_throughput == pytest.approx(
        throughput_from_latencies(r.baseline_latencies_s, size)
    )


def test_the_raw_timings_survive_the_log(tmp_path: Path) -> None:
    """What ``candidate_measured`` carries, ingest reads back as the same tuples."""
    strategy = gated(OneBackendStrategy(Pruned()))
    module, spec, data = make_case()
    with capture_events() as events:
        strategy.tune(module, "m", spec, data, "cpu", tmp_path)
    report = validation_of(strategy).last_report
    assert report is not None
    (run,) = ingest(_lines(events)).runs
    (read,) = run.results
    (kept,) = report.results
    assert read.baseline_latencies_s == kept.baseline_latencies_s != ()
    assert read.candidate_latencies_s == kept.candidate_latencies_s
    assert read.latencies_from == kept.latencies_from


def test_a_negative_or_nonfinite_latency_is_refused_by_name() -> None:
    for bad in ([-1.0], [math.inf], ["x"]):
        with pytest.raises((InvalidValueError, TypeError), match="candidate_latencies_s"):
            Raw(candidate_latencies_s=bad)


def test_after_a_machine_change_the_figures_rest_on_the_pairs_from_latencies_from() -> None:
    """A machine that slows or quickens mid-run: the pairs used start later, and still derive."""
    starts = set()
    for seed in range(4):
        for slow_from, hit in ((26, 1 / 3), (60, 3.0), (90, 3.0)):
            eager, cand = _machine(1.5, slow_from, seed, eager_hit=hit, cand_hit=hit)
            r: Any = _measure(eager, cand, seed)
            if r.estimate is None:
                continue
            used = slice(r.latencies_from, r.latencies_from + r.n_baseline)
            base, cand_s = r.baseline_latencies_s[used], r.candidate_latencies_s[used]
            assert r.baseline_throughput == pytest.approx(throughput_from_latencies(base, 1))
            assert r.throughput == pytest.approx(throughput_from_latencies(cand_s, 1))
            starts.add(r.latencies_from)
    assert 0 in starts and max(starts) > 0
