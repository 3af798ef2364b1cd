"""One tune per module object at a time: two would see each other's mode flips as changes."""

from __future__ import annotations

import contextlib
import threading
import weakref
from collections.abc import Iterator

_LOCKS: weakref.WeakKeyDictionary[object, threading.RLock] = weakref.WeakKeyDictionary()
_GUARD = threading.Lock()


@contextlib.contextmanager
def exclusive_module(module: object) -> Iterator[None]:
    """Hold ``module`` for one tune (re-entrant, weakly keyed); another thread's tune waits."""
    try:
        with _GUARD:
            lock = _LOCKS.setdefault(module, threading.RLock())
    except TypeError:
        yield
        return
    with lock:
        yield
