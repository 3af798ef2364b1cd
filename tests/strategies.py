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
