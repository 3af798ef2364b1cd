"""Shared hypothesis strategies for the pure core (one place, as attrs does)."""

from __future__ import annotations

from hypothesis import strategies as st

#: Positive, finite throughputs in a realistic range (samples/s).
throughputs = st.floats(min_value=1e-3, max_value=1e9, allow_nan=False, allow_infinity=False)
#: Threshold percents that are valid: finite and > -100.
threshold_percents = st.floats(
    min_value=-99.0, max_value=1000.0, allow_nan=False, allow_infinity=False
)
#: Positive, finite speedups.
speedups = st.floats(min_value=1e-6, max_value=1e6, allow_nan=False, allow_infinity=False)

#: Positive, finite per-call latencies in seconds (1 µs .. 10 s).
latencies = st.floats(min_value=1e-6, max_value=10.0, allow_nan=False, allow_infinity=False)
#: Lists of latencies long enough for a speedup decision (2 .. 30 values).
latency_lists = st.lists(latencies, min_size=2, max_size=30)
#: One-sided levels accepted by the critical-count functions: strictly between 0 and 0.5.
one_sided_alphas = st.floats(min_value=1e-6, max_value=0.499, allow_nan=False)

_errors = st.floats(min_value=0.0, max_value=1e6, allow_nan=False, allow_infinity=False)
_shares = st.floats(min_value=0.0, max_value=1.0, allow_nan=False)


@st.composite
def mismatches(draw: st.DrawFn) -> object:
    """A :class:`~aitune_fp.core.mismatch.Mismatch`, with or without accuracy criteria."""
    from aitune_fp.core.accuracy import Criterion
    from aitune_fp.core.mismatch import Mismatch

    paths = st.none() | st.text("abcdefgh[]0123.", min_size=1, max_size=12)
    ceiling = st.builds(
        Criterion,
        name=st.sampled_from(["rel_l2", "outlier_share", "metric"]),
        value=_errors,
        budget=_errors,
        path=paths,
    )
    floor = st.builds(
        Criterion, name=st.just("top1_agreement"), value=_shares, budget=_shares, path=paths
    )
    tolerances = draw(st.none() | st.tuples(_errors, _errors))
    return Mismatch(
        max_abs_error=draw(_errors),
        max_rel_error=draw(_errors),
        budget_used=draw(_errors),
        atol=None if tolerances is None else tolerances[0],
        rtol=None if tolerances is None else tolerances[1],
        path=draw(paths),
        n_elements=draw(st.integers(0, 10**9)),
        criteria=draw(st.lists(ceiling | floor, max_size=3)),
    )
