"""Every setting of a tune, one row each: read by ``tune``'s parser, sweep files and docs/cli.md."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, Literal

import attrs

from aitune_fp.core.accuracy import CRITERIA_MODES
from aitune_fp.core.config import (
    CACHES,
    CLOCKS,
    DECISION_MODES,
    QUANTITIES,
    THROUGHPUT_GATES,
    ProfilingConfig,
    gate_name,
    parse_looks,
)

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

#: Where a row's value lands: a ProfilingConfig field (sweep ``[budget]``), a Closeness setting
#: (sweep ``[accuracy]``) or the command's own (a top-level sweep key, if any).
Into = Literal["config", "closeness", "command"]


@attrs.frozen
class Setting:
    """One setting: its value's name, flag, help (with its unit), group and the modes that read it.

    ``modes`` None: every mode; ``aliases``: hidden old flags; ``key``: a command row's sweep key.
    """

    field: str
    flag: str | None
    help: str
    type: Callable[[str], Any] | None = None
    choices: tuple[str, ...] | None = None
    metavar: str | None = None
    group: str = attrs.field(kw_only=True, validator=attrs.validators.in_(tuple(GROUPS)))
    modes: tuple[str, ...] | None = attrs.field(default=None, kw_only=True)
    into: Into = attrs.field(default="config", kw_only=True)
    key: str | None = attrs.field(default=None, kw_only=True)
    aliases: tuple[str, ...] = attrs.field(default=(), kw_only=True)
    action: str | None = attrs.field(default=None, kw_only=True)
    shown: Any = attrs.field(default=None, kw_only=True)
    short: str | None = attrs.field(default=None, kw_only=True)

    @property
    def dest(self) -> str:
        """The argparse attribute: the field's name."""
        return self.field

    @property
    def default(self) -> Any:
        """What the value is when not set: ProfilingConfig's default, else the row's."""
        if self.into == "config":
            return getattr(ProfilingConfig(), self.field)
        return self.shown

    @property
    def sweep_key(self) -> str | None:
        """How a sweep file sets it: ``[budget] looks``, ``[accuracy] rel_l2``, ``threshold``."""
        if self.into == "config":
            return f"[budget] {self.field}"
        if self.into == "closeness":
            return f"[accuracy] {self.field}"
        return self.key


_STAT = ("statistical",)
_POINT = ("point",)

#: Every setting of ``tune``, in ``--help`` order within each group.
# fmt: off
SETTINGS: tuple[Setting, ...] = (
    # what to tune
    Setting("model", "--model", "an embedded model or your own factory", group=WHAT,
            into="command", key="[[models]] model", shown="mlp"),
    Setting("input_shape", "--input-shape", "the input's shape, comma-separated (8,256), for a "
            "factory that returns only a module: a random float input whose first dimension is the "
            "batch", metavar="SHAPE", group=WHAT, into="command", key="[[models]] input_shape"),
    Setting("batch_size", "--batch-size", "the batch, in rows, the sample is tiled to along its "
            "first dimension for eager and every candidate; without it, the model's own (embedded: "
            "mlp 32, convnet 8, transformer 8; a factory's: its sample's first dimension)", int,
            metavar="ROWS", group=WHAT, into="command", key="[[models]] batch_size"),
    Setting("device", "--device", "auto (CUDA when torch sees a device, else CPU), cpu, cuda or "
            "cuda:N", group=WHAT, into="command", key="device", shown="auto"),
    Setting("backends", "--backends", "comma-separated backend names", metavar="NAMES", group=WHAT,
            into="command", key="[[backends]] name"),
    # the gate
    Setting("threshold", "--threshold", "the speedup over eager a candidate must show, in percent "
            "(5: 1.05x)", float, metavar="PERCENT", group=GATE, into="command", key="threshold",
            shown=1.0),
    Setting("decision", "--decision", "how a candidate is judged: statistical (eager and candidate "
            "timed interleaved, decided on a confidence interval at planned looks) or point (AITune's "
            "rule: the mean of a few timed calls per arm, eager timed once)", choices=DECISION_MODES,
            group=GATE, into="command", key="decision", shown=DECISION_MODES[0]),
    Setting("clock", "--clock", "which clock decides: host (wall time around a synchronised call) "
            "or device (CUDA-event time; CUDA only)", choices=CLOCKS, group=GATE, modes=_STAT),
    Setting("quantity", "--quantity", "what the verdict is about: throughput (each timed sample a "
            "block of calls; its time over its calls, as samples per second read) or typical (single "
            "calls: the typical call)", choices=QUANTITIES, group=GATE, modes=_STAT),
    Setting("throughput_gate", "--throughput-gate", "with --quantity typical, what a faster needs "
            "of the mean-latency throughput ratio: estimate (the ratio itself clears the gate) or "
            "bound (its lower bound does; throughput always needs it)", gate_name,
            choices=THROUGHPUT_GATES, group=GATE, modes=_STAT),
    Setting("cache", "--l2-cache", "the L2 state each timed call starts from: hot, or cold (L2 "
            "flushed before each timed call; CUDA only)", choices=CACHES, group=GATE, modes=_STAT,
            aliases=("--cache",)),
    # the statistics
    Setting("looks", "--looks", "planned looks, in timed pairs per candidate, comma-separated; the "
            "last is the most pairs a candidate gets", parse_looks, metavar="PAIRS,...",
            group=STATISTICS, modes=_STAT),
    Setting("max_seconds", "--max-seconds", "time budget per candidate, in seconds", float,
            metavar="SECONDS", group=STATISTICS, modes=_STAT),
    Setting("confidence", "--confidence", "overall guarantee against a false accept, as a fraction "
            "(0.95: a wrong accept at most 5 % over all looks for independent or moderately "
            "correlated timings; docs/guarantees.md)", float, metavar="FRACTION", group=STATISTICS, modes=_STAT),
    Setting("futility_margin_percent", "--futility-margin", "stop with not_faster once the upper "
            "bound is below the required speedup + this many percentage points (0 waits for the "
            "bound to clear the threshold)", float, metavar="POINTS", group=STATISTICS, modes=_STAT),
    Setting("futility_error", "--futility-error", "chance of calling a candidate faster than "
            "required + margin not_faster, as a fraction", float, metavar="FRACTION",
            group=STATISTICS, modes=_STAT),
    Setting("wait_quiet_s", "--wait-quiet", "before each look, wait up to this many seconds for the "
            "load average to fall below the cores (0: no wait; the budget counts the wait)", float,
            metavar="SECONDS", group=STATISTICS, modes=_STAT),
    Setting("point_warmup_calls", "--warmup-calls", "warm-up calls before the timed ones, per arm",
            int, metavar="CALLS", group=STATISTICS, modes=_POINT),
    Setting("point_steps", "--steps", "timed calls, per arm", int, metavar="CALLS",
            group=STATISTICS, modes=_POINT),
    Setting("warmup_max_calls", None, "calls at most while waiting for the timings to settle",
            group=STATISTICS),
    # choosing among faster candidates
    Setting("strategy", "--strategy", "which of the candidates shown faster is kept", group=CHOICE,
            into="command", key="strategy", shown="max-throughput"),
    Setting("selection_delta_percent", "--delta", "candidates within this many percent of each "
            "other count as equally fast", float, metavar="PERCENT", group=CHOICE, modes=_STAT),
    Setting("selection_max_seconds", "--selection-seconds", "time budget of the head-to-head among "
            "the candidates shown faster, in seconds", float, metavar="SECONDS", group=CHOICE,
            modes=_STAT),
    # the accuracy
    Setting("criteria", "--accuracy", "auto (norm criteria for reduced precision and int8, "
            "element-wise for float32 and float64), elementwise (every element within atol + "
            "rtol*|eager|) or norm (the norm criteria in every precision tier)",
            choices=CRITERIA_MODES, group=ACCURACY, into="closeness", shown="auto"),
    Setting("rel_l2", "--rel-l2", "relative L2 error budget, ||candidate - eager|| / ||eager||, as "
            "a fraction, in every norm tier; without it, each tier's own", float, metavar="FRACTION",
            group=ACCURACY, into="closeness"),
    Setting("outlier_share", "--outlier-share", "share of the elements allowed beyond their "
            "element-wise allowance, as a fraction", float, metavar="FRACTION", group=ACCURACY,
            into="closeness", shown=0.001),
    Setting("calibrate", "--calibrate-noise", "measure eager's own noise (float32 vs float64) once; "
            "rel-L2 budgets are at least --noise-factor times it", group=ACCURACY, into="closeness",
            action="store_true"),
    Setting("noise_factor", "--noise-factor", "with --calibrate-noise: how many times eager's noise "
            "a rel-L2 budget is at least", float, metavar="TIMES", group=ACCURACY, into="closeness",
            shown=10.0),
    Setting("spot_rate", "--spot-rate", "share of the timed calls between each look's ends whose "
            "outputs are compared with eager's, as a fraction (both ends always are)", float,
            metavar="FRACTION", group=ACCURACY),
    Setting("soak", "--soak", "this many more checked calls of the chosen candidate on fresh "
            "inputs, rebuilt in this process, before it is handed back; one wrong call rejects it",
            int, metavar="CALLS", group=ACCURACY),
    # isolation and threads
    Setting("isolation", "--isolation", "process: each candidate built, checked and timed in a "
            "worker process of its own; in_process: in this process, guarded by snapshots. Without "
            "it: process on CPU, in_process on CUDA (CUDA workers run only when asked: they are not "
            "yet proven on a GPU); docs/guarantees.md", choices=("process", "in_process"),
            group=ISOLATION, into="command", key="isolation",
            aliases=("--in-process=in_process",)),
    Setting("threads", "--threads", "CPU intra-op threads for eager and every candidate, in "
            "threads, at most the CPUs this process may use (OMP_NUM_THREADS before torch loads; "
            "workers run the same). Without it: "
            "torch's own count (OMP_NUM_THREADS, else the cores), in workers as in this process; "
            "docs/threads.md", int, metavar="N", group=ISOLATION),
    # output
    Setting("cache_dir", "--cache-dir", "where builds and failure logs go; without it, a new "
            "aitune_fp-* temp dir, kept so that the logs it names stay readable (its path is "
            "printed)", metavar="DIR", group=OUTPUT, into="command"),
    Setting("json_log", "--json-log", "append every event as JSON lines to this file",
            metavar="FILE", group=OUTPUT, into="command", key="log", aliases=("--log",)),
    Setting("format", "--format", "how the results print on stdout: table, json (one document) or "
            "markdown (GitHub-flavoured tables)", choices=("table", "json", "markdown"),
            group=OUTPUT, into="command", shown="table"),
    Setting("quiet", "--quiet", "no progress on stderr", group=OUTPUT, into="command",
            action="store_true", short="-q"),
    Setting("verbose", "--verbose", "each row also shows its decided level, the futility bound's "
            "level, the quality flags and the full reason (--format json and --json-log always hold "
            "them)", group=OUTPUT, into="command", action="store_true", short="-v"),
)
# fmt: on


def rows(into: Into) -> tuple[Setting, ...]:
    """The rows whose value lands in ``into``."""
    return tuple(s for s in SETTINGS if s.into == into)


def sweep_keys() -> tuple[str, ...]:
    """The ``[budget]`` keys a sweep file may set: every ProfilingConfig row's field."""
    return tuple(s.field for s in rows("config"))
