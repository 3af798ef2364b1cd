"""How timed samples are laid out: blocks of one arm's calls, and pairs in ABBA / BAAB quads."""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

from aitune_fp.core._checks import check_int
from aitune_fp.inputs import RING_BYTES

#: A block lasts at least this long at eager's pace, so that a worker's hand-over (one round
#: trip a block, 35-160 us on a 2-core VM) and the clock read are at most ~1.6 % of it.
BLOCK_TARGET_S = 0.01
#: Most timed calls a block (a call under ``BLOCK_TARGET_S / MAX_BLOCK_CALLS`` gets a shorter one).
MAX_BLOCK_CALLS = 128
#: From this many timed calls a block also runs a lead call first, untimed: the carry-over from
#: the other arm falls on it. Shorter blocks time their first call: the carry-over's share is
#: then ``1 / calls`` of the block (all of it in a one-call block, as measured by the
#: ``carryover`` guard).
LEAD_FROM = 4
#: A block whose threads waited for a CPU another process had longer than this share of its
#: time is timed again, with its pair: a team of threads with one of them waiting stalls at each
#: barrier (blocks of 7 ms read 28 ms so on a shared 2-core VM). Shorter waits, which hit both
#: arms' blocks (as long in time) alike, stay in as noise: timing them again would leave a
#: loaded machine no pairs at all.
WAIT_SHARE = 0.05
#: A look gives up once it timed again ``RETIMES_PER_PAIR`` times the pairs it asked for, and
#: over ``RETIME_FLOOR``: a machine that stalls four pairs in five costs a second and says so
#: (``machine_too_busy``), not the whole budget (at load 4.6 a tune retimed 2,379 pairs in its
#: 60 s and kept 7); a burst shorter than that is waited out.
RETIMES_PER_PAIR = 4
RETIME_FLOOR = 40
#: Block pairs timed after the per-call warm-up: the machine-moved rule reads eager's level
#: from them on (:func:`aitune_fp.core.dependence.machine_change_index`).
WARMUP_BLOCKS = 10


def block_calls(call_s: float, batch_bytes: int = 0) -> int:
    """Timed calls a block: BLOCK_TARGET_S at the slower arm's ``call_s``, up to most_calls."""
    if not call_s > 0:
        return 1
    return max(1, min(most_calls(batch_bytes), math.ceil(BLOCK_TARGET_S / call_s - 1e-9)))


def most_calls(batch_bytes: int) -> int:
    """The most timed calls a block: MAX_BLOCK_CALLS, or the copies of a batch a ring holds."""
    return max(1, min(MAX_BLOCK_CALLS, RING_BYTES // max(batch_bytes, 1) - 2))


def arm_calls(calls: int, paces: Sequence[float], most: int = MAX_BLOCK_CALLS) -> tuple[int, ...]:
    """Each arm's calls a block: ``calls`` for the slowest, as long in time for the others.

    One count for both weighed a block's fixed cost more on the faster arm, pulling the ratio to 1.
    """
    check_int("calls", calls, minimum=1)
    slowest = max(paces, default=0.0)
    if not (slowest > 0 and all(p > 0 for p in paces)):
        return tuple(calls for _ in paces)
    return tuple(max(1, min(max(most, calls), round(calls * slowest / pace))) for pace in paces)


def disturbed(waited_s: float | None, block_s: float) -> bool:
    """Whether a block of ``block_s`` seconds waited for a CPU past :data:`WAIT_SHARE` of it."""
    return waited_s is not None and waited_s > WAIT_SHARE * block_s


def too_busy(retimed: int, asked: int) -> bool:
    """Whether a look that asked for ``asked`` pairs has timed too many again to go on."""
    return retimed > max(RETIMES_PER_PAIR * asked, RETIME_FLOOR)


def block_fitting(calls: int, pair_call_s: float, pairs: int, left_s: float) -> int:
    """The longest block up to ``calls`` whose ``pairs`` pairs, leads too, fit in ``left_s``."""
    check_int("calls", calls, minimum=1)
    if not (pair_call_s > 0 and pairs > 0):
        return calls
    most = left_s / (pairs * pair_call_s)  # calls an arm, its lead included
    if calls + (calls >= LEAD_FROM) <= most:
        return calls
    k = max(1, math.floor(most))
    return k - 1 if k > LEAD_FROM else min(k, LEAD_FROM - 1)


def pair_order(index: int, orientations: Sequence[bool] | None = None) -> bool:
    """Whether pair ``index`` times the baseline first: quad ``q`` (pairs 2q, 2q+1) is ABBA or BAAB.

    ABBA when ``orientations[q]``; without them the fixed alternation (A B | B A | B A | A B).
    """
    quad, half = divmod(index, 2)
    abba = quad % 2 == 0 if orientations is None else orientations[quad]
    return abba == (half == 0)


def orientation_stream(seed: int) -> random.Random:
    """The random stream of quad orientations for ``seed`` (apart from the spot checks')."""
    return random.Random(f"aitune_fp quad orientation {seed}")
