"""Event kinds: one frozen payload class per event, registered with its name and level; run ids."""

from __future__ import annotations

import enum
import functools
import math
import types
import typing
import uuid
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Final, Literal, TypeAlias, TypeVar, Union, cast

import attrs

from aitune_fp.core.results import unstructure
from aitune_fp.errors import InvalidTypeError, InvalidValueError

if TYPE_CHECKING:
    from aitune_fp.core.report import TuneReport

LOGGER_NAME: Final = "aitune_fp"
#: Bumped whenever an event's keys change (a reader refuses keys it does not know). 2: the
#: measured and selection events carry their records nested (``result``, ``selection``).
SCHEMA_VERSION: Final = 4

#: The prefixes of a tune's own events and of a sweep's (``aitune-fp sweep``).
VALIDATION_PREFIX: Final = "aitune_fp.validation."
SWEEP_PREFIX: Final = "aitune_fp.sweep."

Level = Literal["debug", "info", "warning", "error"]
#: How eager is kept out of the candidates' reach (``baseline_measured``).
EagerIsolation: TypeAlias = Literal["private_copy", "shared", "process"]

Phase = Literal["baseline_build", "baseline_measure", "build", "correctness", "measure"]
#: Keys renderers own; never used as payload keys (design §5).
RESERVED_KEYS: Final = frozenset(
    {"message", "name", "level", "timestamp", "logger", "exception", "event"}
)
#: JSON Schema keywords of the kinds' number keys.
MIN0: Final = {"minimum": 0}
MIN1: Final = {"minimum": 1}


def new_run_id() -> str:
    """Return a fresh id shared by all events of one tune call."""
    return uuid.uuid4().hex


class _Absent(enum.Enum):
    """The one value of a key left out of the payload (as opposed to a key set to null)."""

    ABSENT = "absent"

    def __repr__(self) -> str:
        """``ABSENT``."""
        return "ABSENT"


#: The default of an optional key that is left out of the payload unless given.
ABSENT: Final = _Absent.ABSENT
#: The type of :data:`ABSENT`, in a field's type: ``threads: int | Absent = ABSENT``.
Absent: TypeAlias = Literal[_Absent.ABSENT]


class Keywords(dict[str, Any]):
    """Extra JSON Schema keywords of a key of a row (``Annotated[int, Keywords(minimum=0)]``)."""


_P = TypeVar("_P", bound="Payload")
_T = TypeVar("_T")

#: A payload's summary until it is written (a summary given, even empty, is kept).
_UNWRITTEN: Final = cast(str, ABSENT)

#: Event name -> its payload class, in registration order (see :func:`event`).
_REGISTRY: dict[str, type[Payload]] = {}


@attrs.frozen
class Event:
    """One log event: its dotted name, level and flat payload, and the typed value it was made from."""

    name: str
    level: Level
    fields: Mapping[str, Any]
    payload: Payload | None = attrs.field(default=None, kw_only=True, eq=False, repr=False)

    def __attrs_post_init__(self) -> None:
        """Refuse payload keys that renderers own."""
        clash = RESERVED_KEYS.intersection(self.fields)
        if clash:
            raise InvalidValueError(f"event {self.name!r} uses reserved keys {sorted(clash)}")


@attrs.frozen(kw_only=True)
class Payload:
    """The keys every event carries (its run, module and summary line); a subclass adds its own."""

    #: The dotted event name and its usual level, set by :func:`event`.
    event_name: ClassVar[str]
    default_level: ClassVar[Level]

    run_id: str = attrs.field(metadata={"minLength": 1})
    module_name: str
    #: The human line: left out, the kind writes it from its keys (:meth:`describe`).
    summary: str = _UNWRITTEN

    def __attrs_post_init__(self) -> None:
        """Write the summary line from the keys when none was given."""
        if self.summary is _UNWRITTEN:
            object.__setattr__(self, "summary", self.describe())

    def describe(self) -> str:
        """The summary line this kind writes from its keys (one that writes none is given it)."""
        raise InvalidValueError(f"{type(self).__name__} needs its summary line")

    def level(self) -> Level:
        """The level this event is logged at: its kind's usual one unless a key changes it."""
        return self.default_level

    def present(self, *keys: str) -> dict[str, Any]:
        """The values of ``keys``, an :data:`ABSENT` one as None (as a report holds it)."""
        return {k: None if (v := getattr(self, k)) is ABSENT else v for k in keys}

    @classmethod
    def payload_keys(cls) -> tuple[str, ...]:
        """The event's own keys, in payload order (the common keys left out)."""
        common = {a.name for a in attrs.fields(Payload)}
        return tuple(a.name for a in attrs.fields(cls) if a.name not in common)

    def to_fields(self) -> dict[str, Any]:
        """The JSON payload (the one unstructure): records nest, :data:`ABSENT` keys are left out."""
        own = {key: getattr(self, key) for key in self.payload_keys()}
        return {
            "schema_version": SCHEMA_VERSION,
            "run_id": self.run_id,
            "module_name": self.module_name,
            **{key: unstructure(value) for key, value in own.items() if value is not ABSENT},
            "summary": self.summary,
        }

    def to_event(self, level: Level | None = None) -> Event:
        """The :class:`Event` to emit, at ``level`` (:meth:`level` when None)."""
        chosen = self.level() if level is None else level
        return Event(self.event_name, chosen, self.to_fields(), payload=self)

    @classmethod
    def from_fields(cls: type[_P], fields: Mapping[str, Any]) -> _P:
        """The value a JSON payload describes (the one structure); bad keys or types raise."""
        own = {k: v for k, v in fields.items() if k not in ("schema_version", "event")}
        if "summary" not in own:  # a line is read as written: its summary is never made up
            raise InvalidValueError(f"{cls.event_name} is missing the required keys ['summary']")
        return structure(cls, own, cls.event_name)

    def apply(self, report: TuneReport, stamp: str | None = None) -> TuneReport:
        """``report`` with this event in it (``stamp``: its log line's time); progress adds nothing."""
        return report


def fold(report: TuneReport, payload: Payload, stamp: str | None = None) -> TuneReport:
    """``report`` with one more event: its payload's change, and counted (the one fold)."""
    changed = payload.apply(report, stamp)
    return attrs.evolve(changed, n_events=changed.n_events + 1)


def structure(cls: type[_T], data: object, where: str) -> _T:
    """The attrs value ``data`` (a JSON object) describes; nested records are built the same way."""
    if not isinstance(data, Mapping):
        raise InvalidTypeError(f"{where} must be an object, got {data!r}")
    fields = {a.name: a for a in attrs.fields(cast(Any, cls)) if a.init}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise InvalidValueError(f"{where} has no key {unknown}")
    missing = [n for n, a in fields.items() if a.default is attrs.NOTHING and n not in data]
    if missing:
        raise InvalidValueError(f"{where} is missing the required keys {missing}")
    hints = _hints(cast(Any, cls))
    return cls(**{k: _value(hints[k], v, f"{where}.{k}") for k, v in data.items()})


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


_UNIONS: Final = (Union, types.UnionType)
_SCALARS: Final[dict[Any, type | tuple[type, ...]]] = {str: str, bool: bool, float: (int, float)}


def _value(hint: Any, value: Any, where: str) -> Any:
    """``value`` read as ``hint`` says; JSON has no infinity, so a plain ``float`` null is infinite."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in _UNIONS:
        if value is None and type(None) in args:
            return None
        for member in (a for a in args if a is not type(None)):
            try:
                return _value(member, value, where)
            except (TypeError, ValueError):
                continue
        raise InvalidTypeError(f"{where} cannot be {value!r}")
    if hint is Any:
        return value
    if origin is Literal:
        if value not in args or isinstance(value, bool) != any(isinstance(a, bool) for a in args):
            raise InvalidValueError(f"{where} must be one of {list(args)}, got {value!r}")
        return value
    if attrs.has(hint):
        return structure(hint, value, where)
    if hint is float and value is None:
        return math.inf
    if hint is int:
        if isinstance(value, float) and value.is_integer():
            return int(value)  # an integral float is JSON's integer
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif hint in _SCALARS:
        if isinstance(value, _SCALARS[hint]) and (hint is bool or not isinstance(value, bool)):
            return value
    elif origin in (tuple, list):
        if isinstance(value, list):
            items = [_value(args[0], v, f"{where}[{i}]") for i, v in enumerate(value)]
            return tuple(items) if origin is tuple else items
    elif typing.is_typeddict(hint) or origin in (dict, Mapping) or hint in (dict, Mapping):
        if isinstance(value, dict):
            return value
    else:
        raise InvalidTypeError(f"{where}: no way to read a {hint!r}")
    raise InvalidTypeError(f"{where} must be a {getattr(hint, '__name__', hint)}, got {value!r}")


def event(name: str, level: Level) -> Callable[[type[_P]], type[_P]]:
    """Class decorator: register a frozen attrs :class:`Payload` subclass as event ``name``."""

    def register(cls: type[_P]) -> type[_P]:
        if not (
            isinstance(cls, type) and issubclass(cls, Payload) and "__attrs_attrs__" in vars(cls)
        ):
            raise InvalidTypeError(f"event {name!r} must be an attrs Payload class, got {cls!r}")
        if name in _REGISTRY:
            raise InvalidValueError(f"event {name!r} is already registered")
        clash = RESERVED_KEYS.intersection(cls.payload_keys())
        if clash:
            raise InvalidValueError(f"event {name!r} uses reserved keys {sorted(clash)}")
        cls.event_name = name
        cls.default_level = level
        _REGISTRY[name] = cls
        return cls

    return register


def registered() -> dict[str, type[Payload]]:
    """Every registered event's payload class, by event name (sorted by name: a stable order)."""
    return {name: _REGISTRY[name] for name in sorted(_REGISTRY)}


def event_names(prefix: str = "") -> tuple[str, ...]:
    """The registered event names that start with ``prefix``, sorted."""
    return tuple(name for name in registered() if name.startswith(prefix))


def unregister(name: str) -> None:
    """Take the event ``name`` out of the registry (a test's toy event; unknown names pass)."""
    _REGISTRY.pop(name, None)
