"""Stops of this process (``SIGSTOP`` and the like), counted while a tune times.

A stopped judge, or eager's worker, makes the block it times read slow: another process that
stops either now and then, only while eager is timed, made an identical candidate read faster.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

_count = [0]  # continues seen in this process so far


def seen() -> int:
    """Continues this process has seen so far (one after each stop; 0 where none is counted)."""
    return _count[0]


@contextmanager
def counting() -> Iterator[None]:
    """Count this process's continues (``SIGCONT``) meanwhile, then put the handler back.

    A handler of the application's still runs. Counted on the main thread only, where Python
    sets handlers; from another thread, or without ``SIGCONT``, nothing is counted.
    """
    if not hasattr(signal, "SIGCONT") or threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGCONT)
    signal.signal(signal.SIGCONT, _counter(previous))
    try:
        yield
    finally:
        signal.signal(signal.SIGCONT, previous)


def _counter(previous: Any) -> Callable[[int, Any], None]:
    def on_continue(signum: int, frame: Any) -> None:
        _count[0] += 1
        if callable(previous):
            previous(signum, frame)

    return on_continue
