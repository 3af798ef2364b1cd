"""The identical-candidate benchmark tells a machine's move (both arms alike) from a false alarm."""

from __future__ import annotations

import math

from hypothesis import assume, given
from hypothesis import strategies as st

from tests.benchmark_scripts import load_benchmark

quiet = load_benchmark("blocks_quiet")


def _record(eager_step: float, candidate_step: float, at: int = 20) -> dict[str, object]:
    """Forty steady blocks a side of 10 ms, each arm's level times its step from pair ``at`` on."""
    return {
        "baseline_latencies_s": [0.01 * (eager_step if i >= at else 1.0) for i in range(40)],
        "candidate_latencies_s": [0.01 * (candidate_step if i >= at else 1.0) for i in range(40)],
    }


@given(step=st.floats(0.3, 3.0), skew=st.floats(0.97, 1.03))
def test_a_step_both_arms_take_alike_is_the_machines_and_eagers_alone_is_not(
    step: float, skew: float
) -> None:
    flag = "machine_moved_ratio_steady_at_pair_20"
    assume(abs(abs(math.log(step)) - quiet.ALIKE_MOVE) > 1e-9)  # not on the line itself
    real = abs(math.log(step)) > quiet.ALIKE_MOVE
    assert quiet.moved_alike(_record(step, step * skew), flag) is real
    assert quiet.moved_alike(_record(step, 1.0), flag) is False  # eager alone: a false alarm


def test_a_flag_at_the_edge_of_the_pairs_is_no_move_of_the_machine() -> None:
    assert not quiet.moved_alike(_record(2.0, 2.0, at=0), "machine_changed_at_pair_0")
    assert not quiet.moved_alike(_record(2.0, 2.0), "machine_changed_at_pair_40")
