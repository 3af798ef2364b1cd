"""A watchdog for one step of a tune: a call that does not return cannot hold it forever.

Python code is interrupted at its deadline; native code goes to ``on_stuck`` ``grace_s`` later.
"""

from __future__ import annotations

import contextlib
import contextvars
import ctypes
import functools
import threading
import time
from collections.abc import Callable
from types import TracebackType

from aitune_fp.errors import CandidateHungError, InvalidValueError


def _raise_in(thread_id: int, exc_type: type[BaseException] | None) -> None:
    """Raise ``exc_type`` in thread ``thread_id`` at its next bytecode (None: cancel a pending one)."""
    ctypes.pythonapi.PyThreadState_SetAsyncExc(
        ctypes.c_ulong(thread_id), ctypes.py_object(exc_type) if exc_type is not None else None
    )


class _Monitor:
    """One daemon thread that runs due actions: arming a step costs a lock, not a thread."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._due: dict[int, tuple[float, Callable[[], None]]] = {}
        self._next = 0
        self._thread: threading.Thread | None = None

    def schedule(self, delay_s: float, action: Callable[[], None]) -> int:
        """Run ``action`` on the monitor's thread in ``delay_s`` s (caller's context); a token."""
        run_in_context = functools.partial(contextvars.copy_context().run, action)
        with self._cond:
            self._next += 1
            self._due[self._next] = (time.monotonic() + delay_s, run_in_context)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._run, name="aitune_fp-watchdog", daemon=True
                )
                self._thread.start()
            self._cond.notify()
            return self._next

    def cancel(self, token: int) -> None:
        """Drop a scheduled action (nothing when it ran already)."""
        with self._cond:
            self._due.pop(token, None)

    def _run(self) -> None:
        while True:
            with self._cond:
                while True:
                    now = time.monotonic()
                    ready = [t for t, (when, _) in self._due.items() if when <= now]
                    if ready:
                        actions = [self._due.pop(t)[1] for t in sorted(ready)]
                        break
                    wait = min((when for when, _ in self._due.values()), default=now + 60) - now
                    self._cond.wait(timeout=max(wait, 0.001))
            for action in actions:
                with contextlib.suppress(Exception):  # one failing report never stops the rest
                    action()


_MONITOR = _Monitor()


class _Step:
    """One guarded step: schedules its interrupt (and then its stuck report), drops them on exit."""

    def __init__(
        self,
        what: str,
        deadline_s: float,
        grace_s: float,
        on_stuck: Callable[[str, float], None] | None,
        *,
        per_call: bool = False,
        note: str = "",
    ) -> None:
        self.what = what
        self.deadline_s = deadline_s
        self.grace_s = grace_s
        self.on_stuck = on_stuck
        self.per_call = per_call
        self.note = note
        #: When the thread last completed a call (per call: the deadline counts from here).
        self.progressed = 0.0
        self._lock = threading.Lock()
        self._done = False
        self._raised = False
        self._thread_id = 0
        self._start = 0.0
        self._outer: _Step | None = None
        self._tokens: list[int] = []

    def __enter__(self) -> _Step:
        self._thread_id = threading.get_ident()
        self._start = self.progressed = time.monotonic()
        if self.per_call:
            self._outer = _PER_CALL.get(self._thread_id)
            _PER_CALL[self._thread_id] = self
        self._tokens = [_MONITOR.schedule(self.deadline_s, self._interrupt)]
        return self

    def _interrupt(self) -> None:
        with self._lock:
            if self._done:
                return
            if self.per_call:  # a call completed since: the deadline runs from that call
                left = self.progressed + self.deadline_s - time.monotonic()
                if left > 0:
                    self._tokens.append(_MONITOR.schedule(left, self._interrupt))
                    return
            self._raised = True
            _raise_in(self._thread_id, CandidateHungError)
            self._tokens.append(_MONITOR.schedule(self.grace_s, self._stuck))

    def _stuck(self) -> None:
        with self._lock:
            if self._done:
                return
        if self.on_stuck is not None:
            self.on_stuck(self.what, time.monotonic() - self._start)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        with self._lock:
            self._done = True
            if self._raised and exc is None:
                _raise_in(self._thread_id, None)  # fired as the step ended: never raise it later
        if self.per_call:
            if self._outer is None:
                _PER_CALL.pop(self._thread_id, None)
            else:
                _PER_CALL[self._thread_id] = self._outer
        for token in self._tokens:  # dropped: nothing outlives the step holding what it guards
            _MONITOR.cancel(token)
        if self._raised and exc is not None:  # the interrupt, perhaps wrapped by the step's code
            if self.per_call:
                raise CandidateHungError(
                    f"{self.what}: no call completed within its deadline of {self.deadline_s:g} s"
                    + (f" ({self.note})" if self.note else "")
                    + " and it was interrupted"
                ) from exc
            raise CandidateHungError(
                f"{self.what} did not return within its deadline of {self.deadline_s:g} s "
                "and was interrupted"
            ) from exc


#: Each thread's innermost per-call step: what :func:`progress` moves on.
_PER_CALL: dict[int, _Step] = {}


def progress() -> None:
    """The calling thread completed a call: restart its per-call deadline (cheap)."""
    step = _PER_CALL.get(threading.get_ident())
    if step is not None:
        step.progressed = time.monotonic()


class Watchdog:
    """Deadlines for a tune's steps; a stuck step goes to ``on_stuck`` ``grace_s`` later."""

    def __init__(
        self, *, grace_s: float, on_stuck: Callable[[str, float], None] | None = None
    ) -> None:
        """A watchdog whose uninterruptible steps are reported ``grace_s`` after the deadline."""
        if not grace_s > 0:
            raise InvalidValueError(f"grace_s must be > 0 seconds, got {grace_s!r}")
        self.grace_s = grace_s
        self.on_stuck = on_stuck

    def step(
        self, what: str, deadline_s: float, *, per_call: bool = False, note: str = ""
    ) -> _Step:
        """Guard a step of this thread (``per_call``: each call, from the last :func:`progress`)."""
        if not deadline_s > 0:
            raise InvalidValueError(f"deadline_s must be > 0 seconds, got {deadline_s!r}")
        return _Step(what, deadline_s, self.grace_s, self.on_stuck, per_call=per_call, note=note)
