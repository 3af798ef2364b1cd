"""Profiling configuration: how to warm up, time and decide; what its time budget buys."""

from __future__ import annotations

import math
from typing import Any, Final, Literal

import attrs

from aitune_fp.core._checks import (
    as_tuple,
    check_int,
    check_type,
    comma_items,
    finite,
    increasing,
    integer,
    of_type,
    one_of,
    open_interval,
    optional,
    share,
    tuple_of,
)
from aitune_fp.core.messages import counted
from aitune_fp.core.results import QUANTITIES, Quantity
from aitune_fp.core.speedup import DEFAULT_CONFIDENCE
from aitune_fp.core.spot import DEFAULT_SPOT_RATE
from aitune_fp.errors import InvalidValueError

__all__ = [
    "CACHES",
    "CLOCKS",
    "DECISION_MODES",
    "QUANTITIES",
    "THROUGHPUT_GATES",
    "Cache",
    "Clock",
    "DecisionMode",
    "ProfilingConfig",
    "check_rule_name",
    "for_batch_size",
    "needs_cuda",
    "parse_looks",
]

Clock = Literal["host", "device"]
#: The clocks a comparison may be decided on (``ProfilingConfig.clock``, ``--clock``, sweep files).
CLOCKS: tuple[Clock, ...] = ("host", "device")
ThroughputGate = Literal["estimate", "bound"]
#: What the throughput condition compares ("point", the old name of "estimate", is still read).
THROUGHPUT_GATES: tuple[ThroughputGate, ...] = ("estimate", "bound")
Cache = Literal["hot", "cold"]
#: The L2 state each timed call starts from (``ProfilingConfig.cache``).
CACHES: tuple[Cache, ...] = ("hot", "cold")
#: A decision rule's name: a built-in one, or one registered since (``measure.rules.register``).
DecisionMode = str
#: The built-in decision rules; ``aitune_fp.measure.rules.decision_modes()`` adds any registered since.
DECISION_MODES: tuple[DecisionMode, ...] = ("statistical", "point")


def gate_name(value: Any) -> Any:
    """A throughput gate's name, its old ``point`` read as ``estimate``."""
    return "estimate" if value == "point" else value


def parse_looks(text: str) -> tuple[int, ...]:
    """``"10,20,40"`` -> ``(10, 20, 40)``; anything else an InvalidValueError quoting it."""
    items = comma_items(text)
    try:
        return tuple(int(x) for x in items)
    except ValueError:
        raise InvalidValueError(
            f"must be comma-separated integers like 10,20,40, got {text!r}"
        ) from None


def check_rule_name(name: str, value: object) -> str:
    """Return ``value`` if it can name a decision rule (one word), else raise naming ``name``."""
    word = check_type(name, value, str)
    if not isinstance(word, str) or not word.replace("-", "_").isidentifier():
        raise InvalidValueError(
            f"{name} must be a decision rule's name: one word (letters, digits, - or _), "
            f"got {value!r}"
        )
    return word


#: The stated ranges of the settings: beyond them a setting is a mistake, not a budget.
MAX_CALLS: Final = 1_000_000
MAX_SECONDS: Final = 30 * 24 * 3600.0
MAX_BATCH: Final = 1 << 20
MAX_THREADS: Final = 4096


def _below_100(instance: object, attribute: attrs.Attribute[Any], value: float) -> None:
    """Validator: a share in percent below 100."""
    if value >= 100:
        raise InvalidValueError(f"{attribute.name} must be below 100 (percent), got {value!r}")


@attrs.frozen(kw_only=True)
class ProfilingConfig:
    """How a candidate is warmed up, timed and decided; one value for baseline and candidates."""

    #: The rule's name (``statistical``: an interval at planned looks; ``point``: AITune's rule).
    decision: DecisionMode = attrs.field(
        default="statistical", validator=lambda _, a, v: check_rule_name(a.name, v)
    )
    #: Batch sizes to profile; empty: the graph spec's max batch size (:func:`for_batch_size`).
    batch_sizes: tuple[int, ...] = attrs.field(
        default=(), converter=as_tuple, validator=tuple_of(integer(minimum=1, maximum=MAX_BATCH))
    )
    #: Whether inputs are batched along their batch axis (False: the raw sample, batch size 1).
    batching: bool = attrs.field(default=True, validator=of_type(bool))
    #: Warm-up is steady when the last ``warmup_window`` calls settle (``timings.is_settled``).
    warmup_window: int = attrs.field(default=5, validator=integer(minimum=2, maximum=MAX_CALLS))
    warmup_tolerance: float = attrs.field(
        default=0.10, validator=finite(minimum=0, strict=True, maximum=100.0)
    )
    #: Warm-up stops waiting for steadiness after this many calls per arm (and flags it).
    warmup_max_calls: int = attrs.field(default=20, validator=integer(minimum=1, maximum=MAX_CALLS))
    #: Planned looks, in timed pairs per arm; the last is the sample budget.
    looks: tuple[int, ...] = attrs.field(
        default=(10, 20, 40, 80, 160, 320),
        converter=as_tuple,
        validator=attrs.validators.and_(
            tuple_of(integer(minimum=2, maximum=MAX_CALLS)), increasing
        ),
    )
    #: ``1 - confidence``: the false-accept rate allowed over all looks, spent across them
    #: (``look_alpha``: more at the later looks).
    confidence: float = attrs.field(default=DEFAULT_CONFIDENCE, validator=open_interval(0, 1))
    #: ``not_faster`` once the upper bound is below required + this many percentage points.
    futility_margin_percent: float = attrs.field(
        default=1.0, validator=finite(minimum=0, maximum=100.0)
    )
    #: Chance, over all looks, of calling a candidate faster than required + margin not_faster.
    futility_error: float = attrs.field(default=0.20, validator=open_interval(0, 1))
    #: Widen the interval by the AR(1) factor when the paired ratios are serially correlated.
    guard_serial_correlation: bool = attrs.field(default=True, validator=of_type(bool))
    #: Decide on the pairs after a shift in level when one is found.
    guard_shift: bool = attrs.field(default=True, validator=of_type(bool))
    #: Wall-clock budget in seconds for one comparison; when spent, the last look decides.
    max_seconds: float = attrs.field(
        default=60.0, validator=finite(minimum=0, strict=True, maximum=MAX_SECONDS)
    )
    #: AITune's point rule: warm-up calls and timed calls per arm.
    point_warmup_calls: int = attrs.field(
        default=10, validator=integer(minimum=1, maximum=MAX_CALLS)
    )
    point_steps: int = attrs.field(default=20, validator=integer(minimum=1, maximum=MAX_CALLS))
    #: A call not returned after 20x eager's slowest and at least this is hung.
    hang_grace_s: float = attrs.field(
        default=30.0, validator=finite(minimum=0, strict=True, maximum=MAX_SECONDS)
    )
    build_timeout_s: float = attrs.field(
        default=1800.0, validator=finite(minimum=0, strict=True, maximum=MAX_SECONDS)
    )
    #: CPU intra-op threads for both arms (None: 1 in worker processes, else torch's own).
    threads: int | None = optional(integer(minimum=1, maximum=MAX_THREADS))
    #: The clock the statistical decision reads: ``host`` wall time or ``device`` CUDA events.
    clock: Clock = attrs.field(default="host", validator=one_of(CLOCKS))
    #: ``cold``: L2 flushed before each timed call (CUDA, statistical mode; docs/gpu.md).
    cache: Cache = attrs.field(default="hot", validator=one_of(CACHES))
    #: Head-to-head: candidates within this many percent of each other count as equally fast.
    selection_delta_percent: float = attrs.field(
        default=2.0, validator=[finite(minimum=0, strict=True), _below_100]
    )
    #: The head-to-head's time budget, in seconds.
    selection_max_seconds: float = attrs.field(
        default=60.0, validator=finite(minimum=0, strict=True, maximum=MAX_SECONDS)
    )
    #: Share of the timed calls between each look's ends whose outputs are checked against eager's.
    spot_rate: float = attrs.field(
        default=DEFAULT_SPOT_RATE, validator=[finite(minimum=0, strict=True), share]
    )
    #: Checked calls on fresh inputs of the chosen candidate, rebuilt in the user's process.
    soak: int = attrs.field(default=0, validator=integer(minimum=0, maximum=MAX_CALLS))
    #: Wait up to this many seconds before each look for the load average to fall below the cores.
    wait_quiet_s: float = attrs.field(default=0.0, validator=finite(minimum=0, maximum=MAX_SECONDS))
    #: With ``quantity="typical"``: must the throughput ratio's ``estimate`` or ``bound`` clear it.
    throughput_gate: ThroughputGate = attrs.field(
        default="estimate", converter=gate_name, validator=one_of(THROUGHPUT_GATES)
    )
    #: What the verdict is about: ``throughput`` (blocks of calls) or the ``typical`` single call.
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
                f"confidence ({self.confidence!r}) is too low for "
                f"{counted(len(self.looks), 'look')}: "
                "each look's one-sided error (1 - confidence) / len(looks) must be < 0.5"
            )
        if self.futility_error / len(self.looks) >= 0.5:
            raise InvalidValueError(
                f"futility_error ({self.futility_error!r}) is too high for "
                f"{counted(len(self.looks), 'look')}: futility_error / len(looks) must be < 0.5"
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


#: The settings only a CUDA device honours: (field, value, what it uses there).
_CUDA_ONLY = (("clock", "device", "CUDA events"), ("cache", "cold", "it flushes the GPU's L2"))


def needs_cuda(config: ProfilingConfig, device: str) -> tuple[str, str, str] | None:
    """The first setting of ``config`` that ``device`` cannot honour: (field, value, why), or None.

    ``tune`` and sweep files refuse it up front, before any candidate is built.
    """
    if device.startswith("cuda"):
        return None
    return next(((f, v, why) for f, v, why in _CUDA_ONLY if getattr(config, f) == v), None)


def for_batch_size(
    config: ProfilingConfig, batch_size: int, *, batching: bool | None = None
) -> ProfilingConfig:
    """``config`` narrowed to one batch size (``batching=None`` keeps the config's own)."""
    check_int("batch_size", batch_size, minimum=1)
    return attrs.evolve(
        config,
        batch_sizes=(batch_size,),
        batching=config.batching if batching is None else batching,
    )


#: Fewest warm-up pairs a comparison makes (one untimed call of each arm, one timed).
WARMUP_PAIRS = 2


def _fmt_s(seconds: float) -> str:
    """``2.1 s``, ``240 s``, ``35 ms``, ``80 µs``: two significant figures, whole above 10."""
    scale, unit = next(
        ((s, u) for s, u in ((1.0, "s"), (1e-3, "ms")) if seconds >= s), (1e-6, "µs")
    )
    value = seconds / scale
    return f"{value:.0f} {unit}" if value >= 10 else f"{value:.2g} {unit}"


@attrs.frozen(kw_only=True)
class BudgetPlan:
    """What ``max_seconds`` buys at eager's call time: pairs, looks reached, what more costs."""

    eager_call_s: float = attrs.field(validator=finite(minimum=0, strict=True))
    max_seconds: float = attrs.field(validator=finite(minimum=0, strict=True))
    looks: tuple[int, ...] = attrs.field(validator=tuple_of(of_type(int)))
    #: Timed pairs the budget allows (capped at the last look).
    pairs: int
    #: Planned looks whose pairs fit.
    looks_reached: int
    #: Calls of each arm a pair makes: 1, or a block's (its lead included).
    calls: int = 1

    @property
    def first_look_fits(self) -> bool:
        """Whether the budget reaches the first look."""
        return self.looks_reached >= 1

    def seconds_for(self, pairs: int) -> float:
        """About how long ``pairs`` timed pairs take, the least warm-up included."""
        return (pairs + WARMUP_PAIRS) * 2 * self.eager_call_s * self.calls

    def text(self) -> str:
        """The plan in one line, naming the flag when the budget falls short."""
        blocks = f" in blocks of {self.calls} calls" if self.calls > 1 else ""
        head = (
            f"eager {_fmt_s(self.eager_call_s)} a call{blocks}: the {self.max_seconds:g} s "
            "budget per candidate"
        )
        if not self.first_look_fits:
            need = self.seconds_for(self.looks[0])
            return (
                f"{head} is too short for the first look: its {self.looks[0]} pairs take about "
                f"{_fmt_s(need)} with the warm-up; raise it with --max-seconds "
                f"{math.ceil(need)} (ProfilingConfig.max_seconds)"
            )
        if self.looks_reached == len(self.looks):
            every = f"all {len(self.looks)} looks" if len(self.looks) > 1 else "its one look"
            return (
                f"{head} reaches {every} (up to {self.looks[-1]} pairs, "
                f"about {_fmt_s(self.seconds_for(self.looks[-1]))})"
            )
        following = self.looks[self.looks_reached]
        return (
            f"{head} allows about {self.pairs} pairs ({self.looks_reached} of "
            f"{len(self.looks)} looks); the next look ({following} pairs) needs about "
            f"{_fmt_s(self.seconds_for(following))}: --max-seconds (ProfilingConfig.max_seconds)"
        )


def plan_budget(
    eager_call_s: float, *, max_seconds: float, looks: tuple[int, ...], calls: int = 1
) -> BudgetPlan:
    """The plan for ``max_seconds`` at ``looks``, eager taking ``eager_call_s`` a call."""
    if not (math.isfinite(eager_call_s) and eager_call_s > 0):
        raise InvalidValueError(f"eager_call_s must be a finite time > 0, got {eager_call_s!r}")
    if not looks:
        raise InvalidValueError("looks must hold at least one look, got none")
    fit = math.floor(max_seconds / (2 * eager_call_s * calls)) - WARMUP_PAIRS
    pairs = max(0, min(fit, looks[-1]))
    reached = sum(1 for look in looks if look <= pairs)
    return BudgetPlan(
        eager_call_s=eager_call_s,
        max_seconds=max_seconds,
        looks=tuple(looks),
        pairs=pairs,
        looks_reached=reached,
        calls=calls,
    )
