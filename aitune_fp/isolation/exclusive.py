"""One tune per module object at a time: a second tune of the same object waits for the first.

Two tunes of one module in two threads would each see the other's eval/train flip as a change
made by its candidate, and the model would end in eval mode when it came in training. The lock
is keyed weakly by the module object (nothing here keeps a model alive) and is re-entrant, so a
strategy that tunes the same module again from inside its own tune is not deadlocked.
"""

from __future__ import annotations

import contextlib
import threading
import weakref
from collections.abc import Iterator

__all__ = ["exclusive_module"]

_LOCKS: weakref.WeakKeyDictionary[object, threading.RLock] = weakref.WeakKeyDictionary()
_GUARD = threading.Lock()


@contextlib.contextmanager
def exclusive_module(module: object) -> Iterator[None]:
    """Hold ``module`` for one tune; another thread's tune of the same object waits its turn.

    An object that cannot be weakly referenced (a plain callable without ``__weakref__``) is
    not locked.
    """
    try:
        with _GUARD:
            lock = _LOCKS.setdefault(module, threading.RLock())
    except TypeError:
        yield
        return
    with lock:
        yield
