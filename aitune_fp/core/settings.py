"""The settings of a tune, one row each: the ProfilingConfig field, its flag and its help.

The one table that ``aitune-fp tune``'s flags (the parser, the config built from them, every
message that names a flag) and a sweep file's ``[budget]`` keys read: a setting added here is a
flag and a sweep key at once. Plain data: the CLI turns a row into an argparse argument.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs

from aitune_fp.core.config import CACHES, CLOCKS, THROUGHPUT_GATES

__all__ = ["SETTINGS", "Setting", "sweep_keys"]

_STAT = "statistical decision: "
_CHOICE = "choosing among faster candidates: "


@attrs.frozen
class Setting:
    """A ProfilingConfig field a tune's caller sets: its flag, its help, how a flag's text reads.

    ``flag`` None: a sweep file's key only. ``apart``: the command reads the flag itself
    (``--looks`` parses a list and meets ``--max-pairs``; ``--threads`` acts before torch loads).
    """

    field: str
    flag: str | None
    help: str
    type: Callable[[str], Any] | None = None
    choices: tuple[str, ...] | None = None
    metavar: str | None = None
    apart: bool = False

    @property
    def dest(self) -> str:
        """The argparse attribute: ``--max-seconds`` -> ``max_seconds`` (the field without a flag)."""
        return self.field if self.flag is None else self.flag[2:].replace("-", "_")


#: Every ProfilingConfig field a caller sets, in ``tune --help`` order.
SETTINGS: tuple[Setting, ...] = (
    Setting(
        "looks",
        "--looks",
        _STAT + "planned looks in pairs (10,20,40,80,160,320)",
        apart=True,
    ),
    Setting("max_seconds", "--max-seconds", _STAT + "budget per candidate (60 s)", float),
    Setting(
        "confidence",
        "--confidence",
        _STAT + "overall guarantee against a false accept (0.95)",
        float,
    ),
    Setting(
        "futility_margin_percent",
        "--futility-margin",
        _STAT + "stop with not_faster once the upper bound is below required + this many "
        "percentage points (1.0; 0 waits for the bound to clear the threshold)",
        float,
    ),
    Setting(
        "futility_error",
        "--futility-error",
        _STAT + "chance of calling a candidate faster than required + margin not_faster (0.20)",
        float,
    ),
    Setting(
        "clock",
        "--clock",
        _STAT + "which clock decides: host (default; wall time around a synchronised call) or "
        "device (CUDA-event time; CUDA only)",
        choices=CLOCKS,
    ),
    Setting(
        "soak",
        "--soak",
        "N more checked calls of the chosen candidate on fresh inputs, rebuilt in this process, "
        "before it is handed back; one wrong call rejects it (default 0)",
        int,
    ),
    Setting(
        "spot_rate",
        "--spot-rate",
        "share of the timed calls between each look's ends whose outputs are compared with "
        "eager's, in the gate and the head-to-head (0.1; both ends always are)",
        float,
    ),
    Setting(
        "wait_quiet_s",
        "--wait-quiet",
        _STAT + "before each look, wait up to this long for the load average to fall below the "
        "cores (0: no wait; the budget counts the wait). Pairs taken while the machine was busy "
        "never carry a verdict",
        float,
        metavar="SECONDS",
    ),
    Setting(
        "throughput_gate",
        "--throughput-gate",
        _STAT + "what a faster needs of the mean-latency throughput ratio: point (default; the "
        "ratio clears the gate, the verdict is about the typical call) or bound (its lower "
        "bound clears it)",
        choices=THROUGHPUT_GATES,
    ),
    Setting(
        "cache",
        "--cache",
        _STAT + "hot (default) or cold: L2 flushed before each timed call (CUDA only)",
        choices=CACHES,
    ),
    Setting(
        "selection_delta_percent",
        "--delta",
        _CHOICE + "candidates within this many percent count as equally fast (2)",
        float,
    ),
    Setting(
        "selection_max_seconds",
        "--selection-seconds",
        _CHOICE + "time budget of the head-to-head (60 s)",
        float,
    ),
    Setting("point_warmup_calls", "--warmup-calls", "point decision: warm-up calls (10)", int),
    Setting("point_steps", "--steps", "point decision: timed calls (20)", int),
    Setting(
        "warmup_max_calls",
        None,
        "calls at most while waiting for the timings to settle before the first look (20)",
    ),
    Setting(
        "threads",
        "--threads",
        "CPU threads for both arms (OMP_NUM_THREADS before torch loads, then torch's "
        "intra-op threads; default: leave them as they are). See docs/threads.md",
        int,
        apart=True,
    ),
)


def sweep_keys() -> tuple[str, ...]:
    """The ``[budget]`` keys a sweep file may set: every setting's field."""
    return tuple(setting.field for setting in SETTINGS)
