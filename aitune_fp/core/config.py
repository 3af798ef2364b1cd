"""Profiling configuration: how to warm up, time and decide, as one frozen value."""

from __future__ import annotations

import itertools
from typing import Any, Final, Literal

import attrs

from aitune_fp.core._checks import (
    as_tuple,
    check_int,
    check_type,
    finite,
    integer,
    of_type,
    one_of,
    open_interval,
    tuple_of,
)
from aitune_fp.core.spot import DEFAULT_SPOT_RATE
from aitune_fp.errors import InvalidValueError

__all__ = [
    "CACHES",
    "CLOCKS",
    "DECISION_MODES",
    "MODE_FIELDS",
    "QUANTITIES",
    "THROUGHPUT_GATES",
    "Cache",
    "Clock",
    "DecisionMode",
    "ProfilingConfig",
    "check_rule_name",
    "for_batch_size",
]

Clock = Literal["host", "device"]
#: The clocks a comparison may be decided on (``ProfilingConfig.clock``, ``--clock``, sweep files).
CLOCKS: tuple[Clock, ...] = ("host", "device")
ThroughputGate = Literal["point", "bound"]
Quantity = Literal["throughput", "typical"]
#: What the throughput condition compares (``ProfilingConfig.throughput_gate``).
THROUGHPUT_GATES: tuple[ThroughputGate, ...] = ("point", "bound")
QUANTITIES: tuple[Quantity, ...] = ("throughput", "typical")
Cache = Literal["hot", "cold"]
#: The L2 state each timed call starts from (``ProfilingConfig.cache``).
CACHES: tuple[Cache, ...] = ("hot", "cold")
#: A decision rule's name: one of the built-in rules, or one registered since
#: (``aitune_fp.measure.register``, the registry of the shell).
DecisionMode = str
#: The built-in decision rules; ``aitune_fp.measure.decision_modes()`` adds any registered since.
DECISION_MODES: tuple[DecisionMode, ...] = ("statistical", "point")


def check_rule_name(name: str, value: object) -> str:
    """Return ``value`` if it can name a decision rule (one word), else raise naming ``name``.

    Whether a rule of that name is registered is the shell's question (``measure.rule_for``).
    """
    word = check_type(name, value, str)
    if not isinstance(word, str) or not word.replace("-", "_").isidentifier():
        raise InvalidValueError(
            f"{name} must be a decision rule's name: one word (letters, digits, - or _), "
            f"got {value!r}"
        )
    return word


def _a_rule_name(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    """Validator: one word; the rule registry (the shell's) refuses a name it does not hold."""
    check_rule_name(attribute.name, value)


#: Budget fields that only one decision mode reads: field -> the modes that read it. Setting one
#: for another mode would do nothing, so the CLI and sweep files refuse it.
MODE_FIELDS: dict[str, tuple[DecisionMode, ...]] = {
    "looks": ("statistical",),
    "max_seconds": ("statistical",),
    "confidence": ("statistical",),
    "futility_margin_percent": ("statistical",),
    "futility_error": ("statistical",),
    "clock": ("statistical",),
    "selection_delta_percent": ("statistical",),
    "selection_max_seconds": ("statistical",),
    "cache": ("statistical",),
    "wait_quiet_s": ("statistical",),
    "throughput_gate": ("statistical",),
    "quantity": ("statistical",),
    "point_warmup_calls": ("point",),
    "point_steps": ("point",),
}


#: The stated ranges of ProfilingConfig's settings (refused up front, with the value named):
#: a timed-call count (warm-up, steps, looks), a duration in seconds (30 days), a batch size,
#: CPU threads. Beyond them a setting is a mistake, not a budget (issue 32).
MAX_CALLS: Final = 1_000_000
MAX_SECONDS: Final = 30 * 24 * 3600.0
MAX_BATCH: Final = 1 << 20
MAX_THREADS: Final = 4096


def _below_100(instance: object, attribute: attrs.Attribute[Any], value: float) -> None:
    """Validator: a share in percent below 100."""
    if value >= 100:
        raise InvalidValueError(f"{attribute.name} must be below 100 (percent), got {value!r}")


def _at_most_one(instance: object, attribute: attrs.Attribute[Any], value: float) -> None:
    """Validator: a share of at most 1 (all of them)."""
    if value > 1:
        raise InvalidValueError(f"{attribute.name} must be at most 1 (a share), got {value!r}")


def _increasing(instance: object, attribute: attrs.Attribute[Any], value: tuple[int, ...]) -> None:
    """Validator: at least one look, in strictly increasing order."""
    if not value:
        raise InvalidValueError(f"{attribute.name} must name at least one look, got {value!r}")
    if any(b <= a for a, b in itertools.pairwise(value)):
        raise InvalidValueError(f"{attribute.name} must be strictly increasing, got {value!r}")


@attrs.frozen(kw_only=True)
class ProfilingConfig:
    """How a candidate is warmed up, timed and decided; one value shared by baseline and candidates.

    ``statistical`` (default) times eager and candidate interleaved and decides on a confidence
    interval at planned ``looks`` (pairs); ``point`` reproduces AITune's rule
    (``point_warmup_calls`` + ``point_steps`` calls, mean-latency throughput, baseline once).
    """

    #: The decision rule's name, one word; that a rule of the name is registered is checked
    #: where the config enters the shell (``with_performance_validation``, ``measure.rule_for``).
    decision: DecisionMode = attrs.field(default="statistical", validator=_a_rule_name)
    #: Batch sizes to profile; empty means "the graph spec's max batch size". Narrow with
    #: :func:`for_batch_size`.
    batch_sizes: tuple[int, ...] = attrs.field(
        default=(), converter=as_tuple, validator=tuple_of(integer(minimum=1, maximum=MAX_BATCH))
    )
    #: Whether inputs are batched along their batch axis (False: the raw sample, batch size 1).
    batching: bool = attrs.field(default=True, validator=of_type(bool))
    #: Warm-up is steady when the last ``warmup_window`` calls of each arm lie within
    #: ``warmup_tolerance`` of their median ((max - min) / median), or when the last two windows'
    #: medians differ by no more than the arm's own noise explains (``stats.is_settled``).
    warmup_window: int = attrs.field(default=5, validator=integer(minimum=2, maximum=MAX_CALLS))
    warmup_tolerance: float = attrs.field(
        default=0.10, validator=finite(minimum=0, strict=True, maximum=100.0)
    )
    #: Warm-up gives up waiting for steadiness after this many calls per arm, the untimed first
    #: call included (and flags it); 20 as in the rule measured on this kind of machine.
    warmup_max_calls: int = attrs.field(default=20, validator=integer(minimum=1, maximum=MAX_CALLS))
    #: Planned looks, in timed pairs per arm; the last one is the sample budget. The sixth look
    #: (320) is taken only when ``max_seconds`` allows it.
    looks: tuple[int, ...] = attrs.field(
        default=(10, 20, 40, 80, 160, 320),
        converter=as_tuple,
        validator=attrs.validators.and_(
            tuple_of(integer(minimum=2, maximum=MAX_CALLS)), _increasing
        ),
    )
    #: Confidence of the sequential decision: ``1 - confidence`` is the false-accept rate
    #: allowed over all looks (the guarantee reported with every verdict); each look uses
    #: ``(1 - confidence) / len(looks)`` per side, so its interval is two-sided at
    #: ``1 - 2 * (1 - confidence) / len(looks)`` (0.983 with the defaults).
    confidence: float = attrs.field(default=0.95, validator=open_interval(0, 1))
    #: Futility stop: ``not_faster`` as soon as the estimate is below the required speedup and
    #: the upper bound is below required + this many percentage points. 1.0 settles an identical
    #: candidate in a median of ~40 pairs instead of running out of looks (issue 14's audit); a
    #: candidate inside the margin (e.g. 1.015x at the 1 % threshold) may be called not_faster.
    #: 0 gives the symmetric rule (``not_faster`` only when the upper bound clears the threshold).
    futility_margin_percent: float = attrs.field(
        default=1.0, validator=finite(minimum=0, maximum=100.0)
    )
    #: Error of the futility stop over all looks: a candidate faster than required + margin is
    #: called ``not_faster`` with probability <= this. Looser than ``1 - confidence`` on purpose:
    #: a wrong rejection costs a missed gain, a wrong acceptance ships a regression.
    futility_error: float = attrs.field(default=0.20, validator=open_interval(0, 1))
    #: Test the paired ratios for serial correlation at each look and widen the interval by the
    #: AR(1) inflation factor when it is found (restores the error rate; issue 14).
    guard_serial_correlation: bool = attrs.field(default=True, validator=of_type(bool))
    #: Test the paired ratios for a shift in level at each look; when one is found, decide on the
    #: pairs after it (the regime the user will get).
    guard_shift: bool = attrs.field(default=True, validator=of_type(bool))
    #: Wall-clock budget in seconds for one comparison; when spent, the verdict is taken at
    #: the last completed look and is ``inconclusive`` if still open.
    max_seconds: float = attrs.field(
        default=60.0, validator=finite(minimum=0, strict=True, maximum=MAX_SECONDS)
    )
    #: AITune point rule: warm-up calls and timed calls per arm.
    point_warmup_calls: int = attrs.field(
        default=10, validator=integer(minimum=1, maximum=MAX_CALLS)
    )
    point_steps: int = attrs.field(default=20, validator=integer(minimum=1, maximum=MAX_CALLS))
    #: Hung means no progress: a call of a correctness check or a timing that has not returned
    #: after 20x eager's slowest call, and at least ``hang_grace_s``, is interrupted (stage
    #: ``hung``); a build after ``build_timeout_s``. A step stuck in native code is recorded as
    #: hung ``hang_grace_s`` later and the tune ends (``finished``, outcome ``error``).
    hang_grace_s: float = attrs.field(
        default=30.0, validator=finite(minimum=0, strict=True, maximum=MAX_SECONDS)
    )
    build_timeout_s: float = attrs.field(
        default=1800.0, validator=finite(minimum=0, strict=True, maximum=MAX_SECONDS)
    )
    #: CPU intra-op threads for both arms (None: leave torch's setting as it is).
    threads: int | None = attrs.field(
        default=None, validator=attrs.validators.optional(integer(minimum=1, maximum=MAX_THREADS))
    )
    #: The clock the statistical decision reads: ``host`` (default), the wall time around a
    #: synchronised call (what a user serving requests waits), or ``device``, the CUDA-event
    #: time of the same call (what the GPU spent; needs a CUDA device). Both are recorded on
    #: CUDA whichever decides; the result's reason says which did.
    clock: Clock = attrs.field(default="host", validator=one_of(CLOCKS))
    #: ``hot`` (default): calls follow each other, so what fits in L2 stays there (a steady
    #: stream of requests). ``cold``: before each timed call of the interleaved comparison,
    #: untimed, a buffer twice the device's L2 is written, so every call starts from a clean
    #: L2 (a model called between other work). CUDA and the statistical mode only; refused
    #: on CPU when the comparison starts (docs/gpu.md).
    cache: Cache = attrs.field(default="hot", validator=one_of(CACHES))
    #: Head-to-head selection among candidates that passed the gate (statistical mode, strategies
    #: that choose): candidates within this many percent of each other count as equally fast.
    selection_delta_percent: float = attrs.field(
        default=2.0, validator=[finite(minimum=0, strict=True), _below_100]
    )
    #: The head-to-head's time budget; when it runs out the choice is made and says how close
    #: the remaining candidates are.
    selection_max_seconds: float = attrs.field(
        default=60.0, validator=finite(minimum=0, strict=True, maximum=MAX_SECONDS)
    )
    #: Share of the timed calls between each look's first and last whose outputs are compared
    #: with eager's (both ends always are), in the gate's timing and the head-to-head's rounds;
    #: raise it to catch a candidate wrong on rarer calls (docs/guarantees.md has the table).
    spot_rate: float = attrs.field(
        default=DEFAULT_SPOT_RATE, validator=[finite(minimum=0, strict=True), _at_most_one]
    )
    #: Soak: this many more checked calls, each on inputs drawn afresh, of the chosen candidate
    #: once rebuilt in the user's process, before it is handed back; one wrong call rejects it
    #: (stage ``rebuild``; docs/guarantees.md: what a soak of N calls adds to the spot checks).
    soak: int = attrs.field(default=0, validator=integer(minimum=0, maximum=MAX_CALLS))
    #: Before each look of the statistical mode, wait up to this many seconds for the load
    #: average to fall below the cores when it says the machine is busy (``oversubscribed``),
    #: as pyperf's system checks do; the wait counts against ``max_seconds``. 0: no wait. Busy
    #: or not, pairs taken while the machine was busy never carry a verdict (issue 36).
    wait_quiet_s: float = attrs.field(default=0.0, validator=finite(minimum=0, maximum=MAX_SECONDS))
    #: With ``quantity="typical"``, what a ``faster`` needs of the mean-latency throughput
    #: ratio of the same pairs: ``point`` (default), the ratio itself clears the gate;
    #: ``bound``, its delta-method lower bound at the look's level does (costs power with
    #: two-mode latencies). ``quantity="throughput"`` always needs the bound.
    throughput_gate: ThroughputGate = attrs.field(
        default="point", validator=one_of(THROUGHPUT_GATES)
    )
    #: What the statistical verdict is about: ``throughput`` (default), each timed sample a
    #: block of calls whose time over its calls is the mean latency there (samples per second,
    #: as users read it); ``typical``, single calls, the typical call's latency.
    quantity: Quantity = attrs.field(default="throughput", validator=one_of(QUANTITIES))

    def __attrs_post_init__(self) -> None:
        """Cross-field check: the steadiness window must fit in the warm-up budget."""
        if self.warmup_window >= self.warmup_max_calls:
            raise InvalidValueError(
                f"warmup_window ({self.warmup_window}) must be < warmup_max_calls "
                f"({self.warmup_max_calls}): the first call of each arm is never timed"
            )
        if self.cache == "cold" and self.decision == "point":
            raise InvalidValueError(
                "cache='cold' is for decision='statistical': the point rule times each arm "
                "back to back, as AITune does"
            )
        if (1.0 - self.confidence) / len(self.looks) >= 0.5:
            raise InvalidValueError(
                f"confidence ({self.confidence!r}) is too low for {len(self.looks)} look(s): "
                "each look's one-sided error (1 - confidence) / len(looks) must be < 0.5"
            )
        if self.futility_error / len(self.looks) >= 0.5:
            raise InvalidValueError(
                f"futility_error ({self.futility_error!r}) is too high for {len(self.looks)} "
                "look(s): futility_error / len(looks) must be < 0.5"
            )

    @property
    def max_pairs(self) -> int:
        """The sample budget: timed pairs at the last planned look."""
        return self.looks[-1]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict of every field (tuples become lists)."""
        return {
            k: list(v) if isinstance(v, tuple) else v
            for k, v in attrs.asdict(self, recurse=False).items()
        }


def for_batch_size(
    config: ProfilingConfig, batch_size: int, *, batching: bool | None = None
) -> ProfilingConfig:
    """Return ``config`` narrowed to one batch size; every other field stays as it was.

    ``batching=None`` keeps the config's own value (as AITune's narrowing does).
    """
    check_int("batch_size", batch_size, minimum=1)
    return attrs.evolve(
        config,
        batch_sizes=(batch_size,),
        batching=config.batching if batching is None else batching,
    )
