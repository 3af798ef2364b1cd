"""The settings of a tune, one row each: the ProfilingConfig field, its flag and its help.

The one table that ``aitune-fp tune``'s flags (the parser, the config built from them, every
message that names a flag) and a sweep file's ``[budget]`` keys read: a setting added here is a
flag and a sweep key at once. Plain data: the CLI turns a row into an argparse argument.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

import attrs

from aitune_fp.core.config import CACHES, CLOCKS, THROUGHPUT_GATES, ProfilingConfig

__all__ = [
    "ACCURACY",
    "CHOICE",
    "GATE",
    "GROUPS",
    "ISOLATION",
    "OUTPUT",
    "SETTINGS",
    "STATISTICS",
    "WHAT",
    "Setting",
    "sweep_keys",
]

WHAT = "what to tune"
GATE = "the gate"
STATISTICS = "the statistics"
CHOICE = "choosing among faster candidates"
ACCURACY = "the accuracy"
ISOLATION = "isolation and threads"
OUTPUT = "output"

#: ``tune --help``'s groups, in order: title -> the line under it.
GROUPS: Mapping[str, str] = MappingProxyType(
    {
        WHAT: "the model, its input and the candidate backends",
        GATE: "what a candidate must show to be called faster than eager",
        STATISTICS: "how long and how many calls a decision takes, and the error it allows",
        CHOICE: "which of the candidates shown faster is kept",
        ACCURACY: "how a candidate's outputs are held against eager's (docs/accuracy.md)",
        ISOLATION: "where candidates run, and on how many CPU threads",
        OUTPUT: "what is printed and written, and where",
    }
)


@attrs.frozen
class Setting:
    """A ProfilingConfig field a tune's caller sets: its flag, help, ``--help`` group, parsing.

    ``flag`` None: a sweep file's key only. ``help`` states the unit and leaves the default to
    the field's (shown after it). ``apart``: the command reads the flag itself (``--looks``
    parses a list and meets ``--max-pairs``; ``--threads`` acts before torch loads).
    """

    field: str
    flag: str | None
    help: str
    type: Callable[[str], Any] | None = None
    choices: tuple[str, ...] | None = None
    metavar: str | None = None
    apart: bool = False
    group: str = attrs.field(kw_only=True, validator=attrs.validators.in_(tuple(GROUPS)))

    @property
    def dest(self) -> str:
        """The argparse attribute: ``--max-seconds`` -> ``max_seconds`` (the field without a flag)."""
        return self.field if self.flag is None else self.flag[2:].replace("-", "_")

    @property
    def default(self) -> Any:
        """What the field is when not set: ProfilingConfig's default."""
        return getattr(ProfilingConfig(), self.field)


#: Every ProfilingConfig field a caller sets, in ``tune --help`` order within each group.
SETTINGS: tuple[Setting, ...] = (
    Setting(
        "looks",
        "--looks",
        "planned looks: how many pairs are timed by each, comma-separated; the last is the "
        "most pairs per candidate",
        metavar="PAIRS,...",
        apart=True,
        group=STATISTICS,
    ),
    Setting(
        "max_seconds",
        "--max-seconds",
        "time budget per candidate, in seconds",
        float,
        metavar="SECONDS",
        group=STATISTICS,
    ),
    Setting(
        "confidence",
        "--confidence",
        "overall guarantee against a false accept, as a fraction (0.95: a wrong accept at most "
        "5 % over all looks)",
        float,
        metavar="FRACTION",
        group=STATISTICS,
    ),
    Setting(
        "futility_margin_percent",
        "--futility-margin",
        "stop with not_faster once the upper bound is below required + this many percentage "
        "points (0 waits for the bound to clear the threshold)",
        float,
        metavar="POINTS",
        group=STATISTICS,
    ),
    Setting(
        "futility_error",
        "--futility-error",
        "chance of calling a candidate faster than required + margin not_faster, as a fraction",
        float,
        metavar="FRACTION",
        group=STATISTICS,
    ),
    Setting(
        "clock",
        "--clock",
        "which clock decides: host (wall time around a synchronised call) or device "
        "(CUDA-event time; CUDA only)",
        choices=CLOCKS,
        group=GATE,
    ),
    Setting(
        "spot_rate",
        "--spot-rate",
        "share of the timed calls between each look's ends whose outputs are compared with "
        "eager's, as a fraction, in the gate and the head-to-head (both ends always are)",
        float,
        metavar="FRACTION",
        group=ACCURACY,
    ),
    Setting(
        "soak",
        "--soak",
        "this many more checked calls of the chosen candidate on fresh inputs, rebuilt in this "
        "process, before it is handed back; one wrong call rejects it",
        int,
        metavar="CALLS",
        group=ACCURACY,
    ),
    Setting(
        "wait_quiet_s",
        "--wait-quiet",
        "before each look, wait up to this many seconds for the load average to fall below the "
        "cores (0: no wait; the budget counts the wait); pairs taken while the machine was "
        "busy never carry a verdict",
        float,
        metavar="SECONDS",
        group=STATISTICS,
    ),
    Setting(
        "throughput_gate",
        "--throughput-gate",
        "what a faster needs of the mean-latency throughput ratio: point (the ratio clears the "
        "gate; the verdict is about the typical call) or bound (its lower bound clears it)",
        choices=THROUGHPUT_GATES,
        group=GATE,
    ),
    Setting(
        "cache",
        "--cache",
        "hot, or cold: L2 flushed before each timed call (CUDA only)",
        choices=CACHES,
        group=GATE,
    ),
    Setting(
        "selection_delta_percent",
        "--delta",
        "candidates within this many percent of each other count as equally fast",
        float,
        metavar="PERCENT",
        group=CHOICE,
    ),
    Setting(
        "selection_max_seconds",
        "--selection-seconds",
        "time budget of the head-to-head among the candidates shown faster, in seconds",
        float,
        metavar="SECONDS",
        group=CHOICE,
    ),
    Setting(
        "point_warmup_calls",
        "--warmup-calls",
        "warm-up calls before the timed ones",
        int,
        metavar="CALLS",
        group=STATISTICS,
    ),
    Setting("point_steps", "--steps", "timed calls", int, metavar="CALLS", group=STATISTICS),
    Setting(
        "warmup_max_calls",
        None,
        "calls at most while waiting for the timings to settle before the first look",
        group=STATISTICS,
    ),
    Setting(
        "threads",
        "--threads",
        "CPU threads for both arms (OMP_NUM_THREADS before torch loads, then torch's intra-op "
        "threads; worker processes run the same count). Without it: 1 thread where candidates "
        "run in worker processes, torch's own where they run in this process; see "
        "docs/threads.md",
        int,
        metavar="N",
        apart=True,
        group=ISOLATION,
    ),
)


def sweep_keys() -> tuple[str, ...]:
    """The ``[budget]`` keys a sweep file may set: every setting's field."""
    return tuple(setting.field for setting in SETTINGS)
