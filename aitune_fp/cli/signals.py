"""SIGTERM and SIGHUP end a command as Ctrl-C does: raised in the main thread as an interrupt.

A CI job's timeout, ``kill`` or a scheduler ends a tune with SIGTERM; a closed terminal with
SIGHUP. Their default action kills the process where it stands: no ``finished`` event, workers
left to the kernel. Raised as :class:`Terminated` (a ``KeyboardInterrupt``), they unwind through
every path a Ctrl-C takes: the tune kills its workers and closes its log with ``finished``, a
sweep records what is left as cancelled. The command line (an application) installs this; the
library never touches signal handlers.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType

__all__ = ["SIGNALS", "Received", "Terminated", "terminate_as_interrupt"]

#: The signals raised as :class:`Terminated` while a command runs.
SIGNALS = (signal.SIGTERM, signal.SIGHUP)


class Terminated(KeyboardInterrupt):
    """A SIGTERM or SIGHUP arrived; the command exits with ``128 + signum``, as a shell reports."""

    def __init__(self, signum: int) -> None:
        """Name the signal: ``str()`` is ``SIGTERM`` or ``SIGHUP``."""
        super().__init__(signal.Signals(signum).name)
        self.signum = signum

    @property
    def exit_code(self) -> int:
        """128 + the signal's number: what a shell reports for a process the signal ended."""
        return 128 + self.signum


class Received:
    """Which of :data:`SIGNALS` arrived while the guard was on (None: none)."""

    def __init__(self) -> None:
        self.signum: int | None = None

    @property
    def exit_code(self) -> int | None:
        """128 + the signal's number, or None when none arrived."""
        return None if self.signum is None else 128 + self.signum


@contextlib.contextmanager
def terminate_as_interrupt() -> Iterator[Received]:
    """While the block runs, SIGTERM and SIGHUP raise :class:`Terminated` in the main thread.

    The first one unwinds the command; a second one takes the default action (the process dies
    at once, as a second signal from a supervisor means). A signal that was ignored (SIGHUP
    under ``nohup``) stays ignored. Off the main thread (nothing can be installed there) the
    block runs as it is. Yields what arrived (a command that catches the interrupt itself, as
    a sweep does, still exits with its code); the previous handlers come back after.
    """
    received = Received()
    if threading.current_thread() is not threading.main_thread():
        yield received
        return

    def handler(signum: int, frame: FrameType | None) -> None:
        received.signum = signum
        for each in SIGNALS:
            if signal.getsignal(each) is handler:
                signal.signal(each, signal.SIG_DFL)
        raise Terminated(signum)

    saved = {each: signal.getsignal(each) for each in SIGNALS}
    try:
        for each, before in saved.items():
            if before is not signal.SIG_IGN:
                signal.signal(each, handler)
        yield received
    finally:
        for each, before in saved.items():
            signal.signal(each, before if before is not None else signal.SIG_DFL)
