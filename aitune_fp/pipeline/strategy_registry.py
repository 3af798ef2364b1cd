"""The built-in strategies by name (torch-free): the one table the CLI and sweep files read."""

from __future__ import annotations

import math
import types
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from aitune_fp.core.quantiles import DEFAULT_QUANTILE
from aitune_fp.errors import InvalidTypeError, InvalidValueError

if TYPE_CHECKING:
    from aitune_fp.backends.protocol import Backend
    from aitune_fp.pipeline.strategies import SessionStrategy

#: An option's check: ``check(spelled, value)`` returns the value to pass on or raises an
#: :class:`InvalidValueError` / :class:`InvalidTypeError` naming ``spelled`` and the value.
Check = Callable[[str, object], object]


def number_check(wanted: str, ok: Callable[[float], bool]) -> Check:
    """A check for a finite real number (bools refused) that ``ok`` accepts; ``wanted`` says it."""

    def check(spelled: str, value: object) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise InvalidTypeError(
                f"{spelled} must be {wanted}, got {type(value).__name__} {value!r}"
            )
        try:
            number = float(value)
        except OverflowError:  # an int beyond float range
            number = math.inf
        if not (math.isfinite(number) and ok(number)):
            shown = number if math.isfinite(number) or isinstance(value, float) else value
            raise InvalidValueError(f"{spelled} must be {wanted}, got {shown!r}")
        return number

    return check


@attrs.frozen
class StrategyOption:
    """One option a strategy's factory takes (``budget_ms``/``--budget-ms``), with its check."""

    name: str = attrs.field(validator=attrs.validators.matches_re(r"[a-z][a-z0-9_]*"))
    help: str
    check: Check = attrs.field(validator=attrs.validators.is_callable())
    required: bool = False
    default: object = None
    parse: Callable[[str], object] = float


@attrs.frozen
class StrategyEntry:
    """One built-in strategy: name, ``--help`` line, factory, options, backend count (None: any)."""

    name: str = attrs.field(validator=attrs.validators.matches_re(r"[a-z][a-z0-9-]*"))
    summary: str
    factory: Callable[..., SessionStrategy] = attrs.field(validator=attrs.validators.is_callable())
    options: tuple[StrategyOption, ...] = ()
    backends: int | None = None

    def option(self, name: str) -> StrategyOption | None:
        """The option ``name`` of this strategy, or None when it takes none of that name."""
        return next((o for o in self.options if o.name == name), None)


def _built_in(class_name: str) -> Callable[..., SessionStrategy]:
    """A factory for ``aitune_fp.pipeline.strategies.<class_name>``, imported when called.

    ``OneBackendStrategy`` takes the one backend there is (:func:`check_backends` saw to it).
    """

    def factory(backends: Sequence[Backend], **options: Any) -> SessionStrategy:
        from aitune_fp.pipeline import strategies

        one = class_name == "OneBackendStrategy"
        given: Any = backends[0] if one else backends
        strategy: SessionStrategy = getattr(strategies, class_name)(given, **options)
        return strategy

    factory.__qualname__ = factory.__name__ = class_name
    return factory


_ENTRIES: tuple[StrategyEntry, ...] = (
    StrategyEntry(
        "one",
        "the one backend given, if it is shown faster (else eager)",
        _built_in("OneBackendStrategy"),
        backends=1,
    ),
    StrategyEntry(
        "first-wins",
        "the first in order shown faster (none: an error)",
        _built_in("FirstWinsStrategy"),
    ),
    StrategyEntry(
        "max-throughput",
        "the fastest of those shown faster (head-to-head)",
        _built_in("MaxThroughputStrategy"),
    ),
    StrategyEntry("min-latency", "max-throughput at batch size 1", _built_in("MinLatencyStrategy")),
    StrategyEntry(
        "latency-budget",
        "the fastest of those shown faster whose latency quantile is shown within a budget",
        _built_in("LatencyBudgetStrategy"),
        options=(
            StrategyOption(
                "budget_ms",
                "the latency (ms) a candidate's quantile must be shown within",
                number_check("a latency > 0 ms", lambda x: x > 0),
                required=True,
            ),
            StrategyOption(
                "quantile",
                "which latency quantile is held to the budget, as a fraction (0.9 = p90)",
                number_check("between 0 and 1 (0.9 = p90)", lambda x: 0 < x < 1),
                default=DEFAULT_QUANTILE,
            ),
        ),
    ),
)

#: The built-in strategies by name, in ``--strategy``'s order.
STRATEGIES: Mapping[str, StrategyEntry] = types.MappingProxyType({e.name: e for e in _ENTRIES})


def strategy_names() -> tuple[str, ...]:
    """The strategies' names (``--strategy``'s choices, a sweep file's ``strategy``)."""
    return tuple(STRATEGIES)


def option_names() -> tuple[str, ...]:
    """Every strategy option's name, each once, in the order the strategies list them."""
    return tuple(dict.fromkeys(o.name for e in STRATEGIES.values() for o in e.options))


def strategy_options(
    name: object,
    given: Mapping[str, object | None],
    *,
    spell: Callable[[str], str] = str,
) -> dict[str, Any]:
    """Strategy ``name``'s ``given`` options checked, defaults filled; errors use ``spell``."""
    entry = STRATEGIES.get(name) if isinstance(name, str) else None
    if entry is None:
        error = InvalidValueError if isinstance(name, str) else InvalidTypeError
        raise error(
            f"{spell('strategy')} must be one of {', '.join(strategy_names())}, got {name!r}"
        )
    for key in (k for k, v in given.items() if v is not None):
        if entry.option(key) is None:
            takers = [repr(e.name) for e in STRATEGIES.values() if e.option(key) is not None]
            where = f"strateg{'y' if len(takers) == 1 else 'ies'} {', '.join(takers)}"
            known = f"applies to {where} only" if takers else "is no strategy's option"
            raise InvalidValueError(f"{spell(key)} {known}, not to {entry.name!r}")
    checked: dict[str, Any] = {}
    for option in entry.options:
        value = given.get(option.name)
        if value is not None:
            checked[option.name] = option.check(spell(option.name), value)
        elif option.required:
            raise InvalidValueError(
                f"strategy {entry.name!r} needs {spell(option.name)}: {option.help}"
            )
        elif option.default is not None:
            checked[option.name] = option.default
    return checked


def check_backends(name: str, labels: Sequence[str]) -> None:
    """Refuse backends strategy ``name`` cannot take (``one`` takes exactly one), naming them."""
    wanted = STRATEGIES[name].backends
    if wanted is not None and len(labels) != wanted:
        noun = "backend" if wanted == 1 else "backends"
        number = "one" if wanted == 1 else str(wanted)
        given = f"{len(labels)}" + (f" ({', '.join(labels)})" if labels else "")
        raise InvalidValueError(f"strategy {name!r} needs exactly {number} {noun}, got {given}")


def make_strategy(name: str, backends: Sequence[Backend], **options: Any) -> SessionStrategy:
    """Strategy ``name`` over ``backends``; bad options raise :class:`InvalidValueError`."""
    checked = strategy_options(name, options)
    check_backends(name, [_label(b) for b in backends])
    return STRATEGIES[name].factory(backends, **checked)


def _label(backend: object) -> str:
    describe = getattr(backend, "describe", None)
    return str(describe()) if callable(describe) else type(backend).__name__
