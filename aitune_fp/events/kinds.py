"""The kinds of event: one frozen payload class per event, registered with its name and level.

An event is a :class:`Payload` subclass decorated with :func:`event`: its attrs fields are the
event's keys (a field without a default is a required key; ``metadata`` holds extra JSON Schema
keywords), and :meth:`Payload.to_event` turns a value into the :class:`Event` that is emitted.
The registry lists every kind; ``EVENT_NAMES`` and the JSON Schema are derived from it.
"""

from __future__ import annotations

import enum
import typing
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Final, Literal, TypeAlias, TypeVar

import attrs

from aitune_fp.core._checks import schema_keywords
from aitune_fp.errors import InvalidTypeError, InvalidValueError
from aitune_fp.events.names import RESERVED_KEYS, SCHEMA_VERSION, Event, Level, clean

__all__ = [
    "ABSENT",
    "Absent",
    "Keywords",
    "Payload",
    "copied_fields",
    "event",
    "event_names",
    "registered",
    "unregister",
]


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
    """Extra JSON Schema keywords of a key of a row (``Annotated[int, Keywords(minimum=0)]``).

    A payload class's own fields carry theirs in ``attrs.field(metadata={...})``; the rows of a
    list (``TypedDict`` classes) carry them this way.
    """


_P = TypeVar("_P", bound="Payload")

#: Event name -> its payload class, in registration order (see :func:`event`).
_REGISTRY: dict[str, type[Payload]] = {}


@attrs.frozen(kw_only=True)
class Payload:
    """The keys every event carries; a subclass adds that event's keys as its fields.

    ``schema_version`` is stamped by :meth:`to_fields`; ``run_id`` is the tune's id (the sweep's
    for a sweep's events), ``module_name`` the tuned name, ``summary`` the human line.
    """

    #: The dotted event name and its usual level, set by :func:`event`.
    event_name: ClassVar[str]
    default_level: ClassVar[Level]

    run_id: str = attrs.field(metadata={"minLength": 1})
    module_name: str
    summary: str

    @classmethod
    def payload_keys(cls) -> tuple[str, ...]:
        """The event's own keys, in payload order (the common keys left out)."""
        common = {a.name for a in attrs.fields(Payload)}
        return tuple(a.name for a in attrs.fields(cls) if a.name not in common)

    def to_fields(self) -> dict[str, Any]:
        """The flat payload: schema version, run id, module name, own keys, then the summary.

        A key whose value is :data:`ABSENT` is left out; a non-finite float becomes None and a
        tuple a list (JSON's array).
        """
        own = {key: getattr(self, key) for key in self.payload_keys()}
        return {
            "schema_version": SCHEMA_VERSION,
            "run_id": self.run_id,
            "module_name": self.module_name,
            **{key: _json_ready(value) for key, value in own.items() if value is not ABSENT},
            "summary": self.summary,
        }

    def to_event(self, level: Level | None = None) -> Event:
        """The :class:`Event` to emit, at ``level`` (this kind's usual level when None)."""
        chosen = self.default_level if level is None else level
        return Event(self.event_name, chosen, self.to_fields(), payload=self)

    @classmethod
    def from_fields(cls: type[_P], fields: Mapping[str, Any]) -> _P:
        """The value a payload (:meth:`to_fields` or a log line, ``event`` key aside) describes.

        Unknown keys and missing required keys raise; absent optional keys take their default.
        """
        names = {a.name: a for a in attrs.fields(cls)}
        unknown = sorted(set(fields) - set(names) - {"schema_version", "event"})
        if unknown:
            raise InvalidValueError(f"{cls.event_name} has no key {unknown}")
        missing = [n for n, a in names.items() if a.default is attrs.NOTHING and n not in fields]
        if missing:
            raise InvalidValueError(f"{cls.event_name} is missing the keys {missing}")
        return cls(**{key: value for key, value in fields.items() if key in names})


def _json_ready(value: Any) -> Any:
    """A value as JSON has it: a tuple as a list, a non-finite float as None."""
    return list(value) if isinstance(value, tuple) else clean(value)


def _decorated(cls: type) -> bool:
    """Whether ``cls`` itself is an attrs class (not only a subclass of one)."""
    return "__attrs_attrs__" in vars(cls)


def event(name: str, level: Level) -> Callable[[type[_P]], type[_P]]:
    """Class decorator: register a :class:`Payload` subclass as the event ``name`` at ``level``.

    The class must be a frozen attrs class whose keys clash with no renderer key; a name is
    registered once (see :func:`unregister` to take one back).
    """

    def register(cls: type[_P]) -> type[_P]:
        if not (isinstance(cls, type) and issubclass(cls, Payload) and _decorated(cls)):
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


# --------------------------------------------------------------------------------------------
# Fields copied from another attrs class (a record whose every field an event carries)
# --------------------------------------------------------------------------------------------


def copied_fields(source: type, renamed: Mapping[str, str]) -> dict[str, Any]:
    """``source``'s attrs fields as payload fields, in order, keys renamed by ``renamed``.

    Each keeps its type (resolved), its default (a key with one is optional), and as schema
    keywords the bounds its validator enforces: a field added to ``source`` becomes a key.
    """
    hints = typing.get_type_hints(source, include_extras=True)
    copied: dict[str, Any] = {}
    for a in attrs.fields(source):
        metadata = {**schema_keywords(a.validator), **a.metadata}
        copied[renamed.get(a.name, a.name)] = attrs.field(
            type=hints[a.name], default=a.default, metadata=metadata
        )
    return copied
