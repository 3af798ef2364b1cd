"""SIGTERM and SIGHUP end a command as Ctrl-C does: raised in the main thread as an interrupt.

So a tune kills its workers and closes its log with ``finished``; the library never installs this.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType

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
    """While the block runs, SIGTERM and SIGHUP raise Terminated in the main thread (once)."""
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
