"""Helpers for testing code that uses aitune_fp: a fake clock and an event capture."""

from __future__ import annotations

import contextlib
import itertools
import logging
import random
import sys
import threading
import types
import weakref
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeAlias

import structlog

from aitune_fp.errors import InvalidTypeError, InvalidValueError
from aitune_fp.events.kinds import LOGGER_NAME

__all__ = ["FakeClock", "FakeSpan", "Latency", "capture_events"]

#: Scripted latency of an arm in seconds: one for every call, a sequence used in turn (cycled),
#: or a function of the 0-based call number.
Latency: TypeAlias = float | Sequence[float] | Callable[[int], float]

#: Clocks by key, so that an unpickled clock is the live one it was pickled from.
_CLOCKS: weakref.WeakValueDictionary[str, FakeClock] = weakref.WeakValueDictionary()
_SITES: dict[str, itertools.count[int]] = {}  # clocks made so far at each line of code


def _site_key() -> str:
    """Where the clock being made is made (module:line#n), the same in a fork server's worker."""
    frame = sys._getframe(2)  # FakeClock.__init__'s caller
    site = f"{frame.f_globals.get('__name__')}:{frame.f_lineno}"
    return f"{site}#{next(_SITES.setdefault(site, itertools.count()))}"


def _seconds(latency: Latency, call: int) -> float:
    if callable(latency):
        return float(latency(call))
    if isinstance(latency, Sequence):
        return float(latency[call % len(latency)])
    return float(latency)


def _check_latency(name: str, latency: Latency | None) -> None:
    if latency is None or callable(latency):
        return
    if isinstance(latency, (int, float)) and not isinstance(latency, bool):
        values: Sequence[Any] = [latency]
    elif isinstance(latency, Sequence) and not isinstance(latency, (str, bytes)):
        values = latency
        if not values:
            raise InvalidValueError(f"{name} must not be an empty sequence")
    else:
        raise InvalidTypeError(
            f"{name} must be seconds, a sequence of seconds or a function of the call number, "
            f"got {type(latency).__name__}"
        )
    for value in values:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise InvalidTypeError(f"{name} must hold numbers, got {type(value).__name__}")
        if not value >= 0:
            raise InvalidValueError(f"{name} must be >= 0 seconds, got {value!r}")


class FakeSpan:
    """A device span of a :class:`FakeClock`: the device time between ``start`` and ``stop``."""

    def __init__(self, clock: FakeClock) -> None:
        """A span reading ``clock``'s device time."""
        self._clock = clock
        self._t0 = self._t1 = 0

    def start(self) -> None:
        """Mark the start."""
        self._t0 = self._clock.device_ns

    def stop(self) -> None:
        """Mark the end."""
        self._t1 = self._clock.device_ns

    def elapsed_s(self) -> float:
        """Device seconds between the marks."""
        return (self._t1 - self._t0) / 1e9


class FakeClock:
    """A :class:`~aitune_fp.profiling.timers.Timer` whose time moves only when calls spend it."""

    def __init__(
        self,
        *,
        jitter: float = 0.0,
        seed: int = 0,
        device_scale: float | None = None,
        load: float | None = None,
    ) -> None:
        """A clock at 0; ``jitter`` is relative (0.02: ±2 % per step), seeded by ``seed``.

        ``load``: the load average its machine reports (None: none, a quiet machine); the host's
        is never read on a fake clock, so its verdicts do not depend on what else runs.
        """
        if isinstance(jitter, bool) or not isinstance(jitter, (int, float)):
            raise InvalidTypeError(f"jitter must be a number, got {type(jitter).__name__}")
        if not 0.0 <= jitter < 1.0:
            raise InvalidValueError(f"jitter must be in [0, 1), got {jitter!r}")
        if device_scale is not None and not (
            isinstance(device_scale, (int, float)) and device_scale > 0
        ):
            raise InvalidValueError(f"device_scale must be > 0 or None, got {device_scale!r}")
        if load is not None and (isinstance(load, bool) or not isinstance(load, (int, float))):
            raise InvalidTypeError(f"load must be a number or None, got {type(load).__name__}")
        if load is not None and not load >= 0:
            raise InvalidValueError(f"load must be >= 0 or None, got {load!r}")
        self.jitter = float(jitter)
        self.seed = seed
        self.device_scale = device_scale
        self.load = load
        #: How many times ``sync`` was called (all threads).
        self.syncs = 0
        self._local = threading.local()
        self._key = _site_key()
        _CLOCKS[self._key] = self

    def load_average(self) -> float | None:
        """The 1-minute load average of this clock's machine: :attr:`load`."""
        return self.load

    def _state(self) -> Any:
        state = self._local
        if not hasattr(state, "ns"):
            self.reset()
        return state

    def reset(self) -> None:
        """Time 0 (wall and device) and a fresh jitter sequence, for the calling thread."""
        self._local.ns = self._local.device_ns = 0
        self._local.rng = random.Random(self.seed)

    @property
    def ns(self) -> int:
        """The calling thread's wall time in nanoseconds."""
        return int(self._state().ns)

    @property
    def device_ns(self) -> int:
        """The calling thread's device time in nanoseconds."""
        return int(self._state().device_ns)

    def advance(self, seconds: float, device_seconds: float | None = None) -> None:
        """Let ``seconds`` of wall time (and ``device_seconds`` of device time) pass, ± jitter."""
        state = self._state()
        factor = 1.0 + state.rng.uniform(-self.jitter, self.jitter) if self.jitter else 1.0
        state.ns += round(seconds * 1e9 * factor)
        if device_seconds is None:
            device_seconds = seconds * (self.device_scale or 1.0)
        state.device_ns += round(device_seconds * 1e9 * factor)

    def arm(
        self,
        seconds: Latency,
        *,
        device_seconds: Latency | None = None,
        fn: Callable[..., Any] | None = None,
        log: list[str] | None = None,
        label: str = "",
    ) -> Callable[..., Any]:
        """A fake model: call ``i`` advances this clock by ``seconds`` for call ``i``."""
        _check_latency("seconds", seconds)
        _check_latency("device_seconds", device_seconds)
        calls = itertools.count()

        def call(*args: Any, **kwargs: Any) -> Any:
            i = next(calls)
            device = None if device_seconds is None else _seconds(device_seconds, i)
            self.advance(_seconds(seconds, i), device)
            if log is not None:
                log.append(label)
            return None if fn is None else fn(*args, **kwargs)

        return call

    def now_ns(self) -> int:
        """The calling thread's wall time in nanoseconds."""
        return self.ns

    def spend_ns(self, ns: int) -> None:
        """Let exactly ``ns`` of wall time pass (a worker's call spent it on its copy)."""
        state = self._state()
        state.ns += ns
        state.device_ns += round(ns * (self.device_scale or 1.0))

    def sync(self) -> None:
        """Count the barrier; nothing to wait for."""
        self.syncs += 1

    def device_span(self) -> FakeSpan | None:
        """A span on the device clock, or None when this clock has none (``device_scale``)."""
        return None if self.device_scale is None else FakeSpan(self)

    def __copy__(self) -> FakeClock:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> FakeClock:
        return self

    def __reduce__(self) -> tuple[Any, ...]:
        return (_clock, (self._key, self.jitter, self.seed, self.device_scale))

    def __repr__(self) -> str:
        return (
            f"FakeClock(jitter={self.jitter}, seed={self.seed}, device_scale={self.device_scale})"
        )


def _clock(key: str, jitter: float, seed: int, device_scale: float | None) -> FakeClock:
    """The live clock pickled under ``key``, or (in another process) a new one like it."""
    found = _CLOCKS.get(key)
    if found is None:  # another process (a worker): one clock for the key there too
        found = FakeClock(jitter=jitter, seed=seed, device_scale=device_scale)
        found._key = key
        _CLOCKS[key] = found
    return found


def _named_logger(*args: Any) -> Any:
    """The logger a captured event came through: only its name matters."""
    return types.SimpleNamespace(name=args[0] if args and isinstance(args[0], str) else None)


@contextlib.contextmanager
def capture_events(level: int = logging.DEBUG) -> Iterator[list[dict[str, Any]]]:
    """Collect the events aitune_fp logs in the block, at ``level`` and up, as dicts."""
    captured: list[dict[str, Any]] = []

    def keep(logger: Any, method_name: str, event_dict: Any) -> Any:
        name = getattr(logger, "name", None) or ""
        if name == LOGGER_NAME or name.startswith(LOGGER_NAME + "."):
            event_dict["log_level"] = {"warn": "warning", "exception": "error"}.get(
                method_name, method_name
            )
            captured.append(event_dict)
        raise structlog.DropEvent

    configured = structlog.is_configured()
    saved = dict(structlog.get_config())
    saved["processors"] = list(saved["processors"])
    structlog.configure(
        processors=[keep],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=_named_logger,
        cache_logger_on_first_use=False,
    )
    try:
        yield captured
    finally:
        if configured:
            structlog.configure(**saved)
        else:
            structlog.reset_defaults()
