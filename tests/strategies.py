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
