"""The interpreter's and OS's process settings a build may change, read and put back as a table."""

from __future__ import annotations

import atexit
import contextlib
import decimal
import functools
import gc
import locale
import logging
import math
import os
import random
import signal
import socket
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Callable, Hashable
from typing import Any, Final

import attrs

from aitune_fp.errors import InvalidStateError
from aitune_fp.profiling.interference import cpu_clock, descendants
from aitune_fp.profiling.timers import gc_enabled, set_gc_enabled


@attrs.frozen
class Setting:
    """One process- or thread-wide setting: read it, compare readings by ``key``, ``write`` one back.

    ``write`` None: it cannot be put back; ``why``: why putting it back may fail.
    """

    name: str
    read: Callable[[], Any]
    write: Callable[[Any], object] | None
    key: Callable[[Any], Hashable] = attrs.field(default=lambda value: value)
    why: str = ""
    #: What differs between two readings (texts), where equal keys are too strict (threads).
    diff: Callable[[Any, Any], list[str]] | None = None
    #: Capture's reading where ``write`` needs more (a dup of an fd), held on the stack it is
    #: given until put back.
    keep: Callable[[contextlib.ExitStack[bool | None]], Any] | None = None
    #: The changes between two readings that reject what made them (a thread left running).
    rejects: Callable[[Any, Any], list[str]] | None = None

    def change(self, then: Any, now: Any) -> str | None:
        """What changed from ``then`` to ``now``, named (``a -> b`` for plain values); None: nothing."""
        if self.diff is not None:
            texts = self.diff(then, now)
            return f"{self.name}: {'; '.join(texts)}" if texts else None
        if self.key(now) == self.key(then):
            return None
        plain = all(isinstance(v, (bool, int, float, str)) for v in (then, now))
        return f"{self.name}: {then!r} -> {now!r}" if plain else self.name


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _handlers() -> tuple[tuple[int, Any], ...]:
    found = []
    for signum in sorted(signal.valid_signals()):
        with contextlib.suppress(OSError, ValueError):
            found.append((int(signum), signal.getsignal(signum)))
    return tuple(found)


def _set_handlers(saved: tuple[tuple[int, Any], ...]) -> None:
    for signum, handler in saved:
        if handler is not None and signal.getsignal(signum) is not handler:
            with contextlib.suppress(OSError, ValueError, TypeError):
                signal.signal(signum, handler)


def _rlimits() -> tuple[tuple[str, tuple[int, int]], ...]:
    import resource

    names = sorted(n for n in dir(resource) if n.startswith("RLIMIT_"))
    return tuple((n, resource.getrlimit(getattr(resource, n))) for n in names)


def _set_rlimits(saved: tuple[tuple[str, tuple[int, int]], ...]) -> None:
    import resource

    for name, limits in saved:
        if resource.getrlimit(getattr(resource, name)) != limits:
            resource.setrlimit(getattr(resource, name), limits)


def _set_environ(saved: dict[str, str]) -> None:
    for name in set(os.environ) - set(saved):
        del os.environ[name]
    for name, value in saved.items():
        if os.environ.get(name) != value:
            os.environ[name] = value


def _set_path(saved: tuple[str, ...]) -> None:
    sys.path[:] = saved


def _root_logger() -> tuple[int, tuple[logging.Handler, ...], int]:
    root = logging.getLogger()
    return root.level, tuple(root.handlers), logging.root.manager.disable


def _set_root_logger(saved: tuple[int, tuple[logging.Handler, ...], int]) -> None:
    level, handlers, disable = saved
    root = logging.getLogger()
    root.setLevel(level)
    root.handlers[:] = handlers
    logging.disable(disable)


_Logger = tuple[int, tuple[logging.Handler, ...], bool, bool]
_PLAIN_LOGGER: _Logger = (logging.NOTSET, (), True, False)


def _named_loggers() -> dict[str, _Logger]:
    """Each named logger configured off the defaults, less torch's own artifact loggers."""
    found = {}
    for name, logger in list(logging.root.manager.loggerDict.items()):
        if isinstance(logger, logging.Logger) and ".__" not in name and not name.startswith("__"):
            state = (logger.level, tuple(logger.handlers), logger.propagate, logger.disabled)
            if state != _PLAIN_LOGGER:
                found[name] = state
    return found


def _set_named_loggers(saved: dict[str, _Logger]) -> None:
    for name in set(_named_loggers()) | set(saved):
        level, handlers, propagate, disabled = saved.get(name, _PLAIN_LOGGER)
        logger = logging.getLogger(name)
        logger.setLevel(level)
        logger.handlers[:] = handlers
        logger.propagate, logger.disabled = propagate, disabled


def _set_gc(saved: tuple[bool, tuple[int, ...]]) -> None:
    enabled, threshold = saved
    gc.set_threshold(*threshold)
    set_gc_enabled(enabled)


def _if_loaded(
    module: str, get: Callable[[Any], Any], put: Callable[[Any, Any], object]
) -> tuple[Callable[[], Any], Callable[[Any], None]]:
    """Read and put back through ``module`` once something imported it (None before: no import)."""

    def read() -> Any:
        loaded = sys.modules.get(module)
        return None if loaded is None else get(loaded)

    def write(saved: Any) -> None:
        loaded = sys.modules.get(module)
        if loaded is not None and saved is not None:
            put(loaded, saved)

    return read, write


def _cuda_rng(torch: Any) -> Any:
    """Every GPU's RNG state, once CUDA is initialised (reading never initialises it)."""
    return tuple(torch.cuda.get_rng_state_all()) if torch.cuda.is_initialized() else None


def _rng_key(state: Any) -> Hashable:
    """A torch RNG state (or a tuple of them, one a GPU) as bytes."""
    if isinstance(state, tuple):
        return tuple(bytes(s.numpy().tobytes()) for s in state)
    return None if state is None else bytes(state.numpy().tobytes())


def _numpy_rng_key(state: Any) -> Hashable:
    if state is None:
        return None
    kind, keys, pos, has_gauss, gauss = state
    return kind, bytes(keys.tobytes()), pos, has_gauss, gauss


def _structlog_key(config: Any) -> Hashable:
    if config is None:
        return None
    return tuple(sorted((k, repr(v) if isinstance(v, list) else id(v)) for k, v in config.items()))


#: A thread's CPU affinity, niceness, scheduling policy and priority.
ThreadState = tuple[frozenset[int], int, int, int]
#: Each thread's :data:`ThreadState`, by thread id.
OsState = dict[int, ThreadState]
_FIELDS = ("CPU affinity", "niceness", "scheduling policy", "scheduling priority")
_POLICIES = {
    getattr(os, n): n for n in ("SCHED_OTHER", "SCHED_BATCH", "SCHED_IDLE") if hasattr(os, n)
}
_POLICIES |= {getattr(os, n): n for n in ("SCHED_FIFO", "SCHED_RR") if hasattr(os, n)}


def os_state(pid: int = 0) -> OsState:
    """Each thread's affinity, niceness and scheduling: what another process may change from outside.

    Every thread, not the main one alone: torch's intra-op pool runs on threads of their own.
    """
    found = {}
    for task in os.listdir(f"/proc/{pid or os.getpid()}/task"):
        tid = int(task)
        with contextlib.suppress(OSError):  # a thread that ended meanwhile
            found[tid] = (
                frozenset(os.sched_getaffinity(tid)),
                os.getpriority(os.PRIO_PROCESS, tid),
                os.sched_getscheduler(tid),
                os.sched_getparam(tid).sched_priority,
            )
    return found


def _shown(field: int, value: Any) -> str:
    if field == 0:
        return str(sorted(value))
    return _POLICIES.get(value, str(value)) if field == 2 else str(value)


def os_state_changes(before: OsState, now: OsState) -> list[str]:
    """What differs, thread by thread, between two :func:`os_state` readings (threads in both)."""
    texts = []
    for tid in sorted(before.keys() & now.keys()):
        diffs = [
            f"{name}: {_shown(i, a)} -> {_shown(i, b)}"
            for i, (name, a, b) in enumerate(zip(_FIELDS, before[tid], now[tid], strict=True))
            if a != b
        ]
        if diffs:
            texts.append(f"thread {tid}: {', '.join(diffs)}")
    return texts


def restore_os_state(saved: OsState, pid: int = 0) -> None:
    """Put back what :func:`os_state` read, threads gone aside.

    An error when it cannot: niceness only rises, and SCHED_IDLE is left with privilege only.
    """
    now = os_state(pid)
    for tid in saved.keys() & now.keys():
        affinity, nice, policy, priority = saved[tid]
        with contextlib.suppress(ProcessLookupError):  # it ended meanwhile
            if now[tid][2:] != (policy, priority):
                os.sched_setscheduler(tid, policy, os.sched_param(priority))
            if now[tid][1] != nice:
                os.setpriority(os.PRIO_PROCESS, tid, nice)
            if now[tid][0] != affinity:
                os.sched_setaffinity(tid, affinity)


#: The interval timers a process has (their signal's default action ends it).
_TIMERS: Final = tuple(
    getattr(signal, n)
    for n in ("ITIMER_REAL", "ITIMER_VIRTUAL", "ITIMER_PROF")
    if hasattr(signal, n)
)


def _timer_key(timers: tuple[tuple[float, float], ...]) -> Hashable:
    """Each timer armed or not, and its interval: what is left of one counts down."""
    return tuple((left > 0, interval) for left, interval in timers)


def _set_timers(saved: tuple[tuple[float, float], ...]) -> None:
    now = tuple(signal.getitimer(t) for t in _TIMERS)
    for which, then, that in zip(_TIMERS, saved, now, strict=True):
        if _timer_key((then,)) != _timer_key((that,)):
            signal.setitimer(which, *then)


def _fds() -> tuple[tuple[int, int, int] | None, ...]:
    """What fds 0, 1 and 2 refer to (device, inode, mode; None: closed)."""
    found: list[tuple[int, int, int] | None] = []
    for fd in (0, 1, 2):
        try:
            stat = os.fstat(fd)
            found.append((stat.st_dev, stat.st_ino, stat.st_mode))
        except OSError:
            found.append(None)
    return tuple(found)


def _keep_fds(stack: contextlib.ExitStack[bool | None]) -> tuple[Any, ...]:
    """:func:`_fds`, and a dup of each open one to put it back by (closed with ``stack``)."""
    dups: list[int | None] = []
    for fd in (0, 1, 2):
        try:
            dup = os.dup(fd)
        except OSError:  # closed
            dups.append(None)
            continue
        stack.callback(os.close, dup)
        dups.append(dup)
    return _fds(), tuple(dups)


def _set_fds(saved: tuple[Any, ...]) -> None:
    then, dups = saved
    for fd, was, now, dup in zip((0, 1, 2), then, _fds(), dups, strict=True):
        if was != now and dup is not None:
            os.dup2(dup, fd)
        elif was != now:  # closed before
            os.close(fd)


def _unfreeze(saved: int) -> None:
    if saved:
        raise InvalidStateError("objects frozen before it would be thawed too")
    gc.unfreeze()


def _wakeup_fd() -> int | None:
    """The signal wake-up fd: set and set back, as nothing else reads it (None off the main thread)."""
    if threading.current_thread() is not threading.main_thread():
        return None
    fd = signal.set_wakeup_fd(-1)
    with contextlib.suppress(OSError, ValueError):  # closed meanwhile: it stays off
        signal.set_wakeup_fd(fd)
    return fd


def _set_wakeup_fd(saved: int | None) -> None:
    if saved is not None:
        signal.set_wakeup_fd(saved)


def _decimal_key(context: decimal.Context) -> Hashable:
    traps = tuple(sorted(k.__name__ for k, on in context.traps.items() if on))
    return (context.prec, context.rounding, context.Emin, context.Emax, context.capitals, traps)


_LOCALES: Final = tuple(
    getattr(locale, n)
    for n in ("LC_CTYPE", "LC_COLLATE", "LC_TIME", "LC_MONETARY", "LC_NUMERIC", "LC_MESSAGES")
    if hasattr(locale, n)
)


def _set_locale(saved: tuple[str, ...]) -> None:
    for category, name in zip(_LOCALES, saved, strict=True):
        if locale.setlocale(category) != name:
            locale.setlocale(category, name)


def _started(then: tuple[threading.Thread, ...], now: tuple[threading.Thread, ...]) -> list[str]:
    """The threads started since ``then`` and still alive, by name."""
    return [t.name for t in now if t not in then and t.is_alive()]


#: How long a thread left behind is watched, and the share of it it must run to be running.
_WATCH_S, _RUNNING = 0.1, 0.01


def _running(then: tuple[threading.Thread, ...], now: tuple[threading.Thread, ...]) -> list[str]:
    """The threads started since ``then`` that ran over a short watch (one that waits does not)."""
    new = [t for t in now if t not in then and t.ident is not None]
    if not new:
        return []
    start = [_cpu_s(t) for t in new]
    time.sleep(_WATCH_S)
    ran = [(t, _cpu_s(t) - s) for t, s in zip(new, start, strict=True)]
    return [
        f"{t.name} ({used * 1e3:.0f} ms of CPU in {_WATCH_S * 1e3:.0f} ms)"
        for t, used in ran
        if used > _RUNNING * _WATCH_S
    ]


def _processes() -> tuple[tuple[int, bytes], ...]:
    """The processes below this one now, each with its start time (a pid is reused)."""
    found = []
    for pid in descendants(os.getpid()):
        with contextlib.suppress(OSError, IndexError), open(f"/proc/{pid}/stat", "rb") as stat:
            found.append((pid, stat.read().rsplit(b")", 1)[1].split()[19]))
    return tuple(found)


def _started_processes(then: tuple[Any, ...], now: tuple[Any, ...]) -> list[str]:
    """The processes started since ``then`` and still there, by pid and command."""
    return [f"pid {pid} ({_command(pid)})" for pid, at in now if (pid, at) not in then]


#: A process left behind is watched this long; over this share of a CPU, it runs.
_PROCESS_WATCH_S, _PROCESS_RUNNING = 0.2, 0.5


def _running_processes(then: tuple[Any, ...], now: tuple[Any, ...]) -> list[str]:
    """The processes started since ``then`` that ran over a watch, each killed with all below it.

    Nothing puts them back, and they take CPU from all that follows, after the tune too.
    """
    new = [pid for pid, at in now if (pid, at) not in then]
    if not new:
        return []
    start = [_process_cpu_s(pid) for pid in new]
    time.sleep(_PROCESS_WATCH_S)
    running = []
    for pid, s in zip(new, start, strict=True):
        used = _process_cpu_s(pid) - s
        if used > _PROCESS_RUNNING * _PROCESS_WATCH_S:
            running.append(f"process {pid} ({_command(pid)}), killed")
            for each in [*descendants(pid), pid]:
                with contextlib.suppress(OSError):
                    os.kill(each, signal.SIGKILL)
    return running


def _process_cpu_s(pid: int) -> float:
    try:
        return time.clock_gettime(cpu_clock(pid))
    except OSError:
        return math.nan


def _command(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()[:80]
    except OSError:
        return "?"


def _cpu_s(thread: threading.Thread) -> float:
    """A thread's CPU time so far (s); nan where it cannot be read (ended: not running)."""
    try:
        return time.clock_gettime(time.pthread_getcpuclockid(thread.ident or 0))
    except (OSError, AttributeError):
        return math.nan


def _set_streams(saved: tuple[Any, Any]) -> None:
    sys.stdout, sys.stderr = saved


#: Hooks replaced by assignment, compared by identity.
_HOOKS: Final = (
    (sys, "excepthook"),
    (threading, "excepthook"),
    (sys, "unraisablehook"),
    (sys, "displayhook"),
    (sys, "breakpointhook"),
)


def _hook(owner: Any, name: str) -> Setting:
    get, put = functools.partial(getattr, owner, name), functools.partial(setattr, owner, name)
    return Setting(f"{owner.__name__}.{name}", get, put, key=id)


def _items() -> tuple[Setting, ...]:
    items = [
        Setting("gc (enabled, thresholds)", lambda: (gc_enabled(), gc.get_threshold()), _set_gc),
        Setting("sys.getswitchinterval()", sys.getswitchinterval, sys.setswitchinterval),
        Setting("sys.getrecursionlimit()", sys.getrecursionlimit, sys.setrecursionlimit),
        Setting(
            "sys.get_int_max_str_digits()", sys.get_int_max_str_digits, sys.set_int_max_str_digits
        ),
        Setting(
            "signal handlers",
            _handlers,
            _set_handlers,
            key=lambda v: tuple((s, id(h)) for s, h in v),
        ),
        Setting("working directory", os.getcwd, os.chdir),
        Setting("sys.path", lambda: tuple(sys.path), _set_path),
        Setting(
            "os.environ",
            lambda: dict(os.environ),
            _set_environ,
            key=lambda v: tuple(sorted(v.items())),
        ),
        Setting(  # after os.environ: tzset reads TZ as put back
            "the time zone (time.tzset())",
            lambda: (time.tzname, time.timezone, time.altzone, time.daylight),
            lambda _: time.tzset(),
        ),
        Setting("locale (setlocale)", lambda: tuple(map(locale.setlocale, _LOCALES)), _set_locale),
        Setting(
            "tempfile.tempdir",
            lambda: tempfile.tempdir,
            functools.partial(setattr, tempfile, "tempdir"),
        ),
        Setting("socket.getdefaulttimeout()", socket.getdefaulttimeout, socket.setdefaulttimeout),
        Setting(
            "decimal's context (this thread)",
            lambda: decimal.getcontext().copy(),
            decimal.setcontext,
            key=_decimal_key,
        ),
        Setting("random's state", random.getstate, random.setstate),
        Setting(
            "numpy.random's state",
            *_if_loaded(
                "numpy", lambda np: np.random.get_state(), lambda np, s: np.random.set_state(s)
            ),
            key=_numpy_rng_key,
        ),
        Setting(
            "torch's CPU RNG state",
            *_if_loaded("torch", lambda t: t.get_rng_state(), lambda t, s: t.set_rng_state(s)),
            key=_rng_key,
        ),
        Setting(
            "torch's CUDA RNG states",
            *_if_loaded("torch", _cuda_rng, lambda t, s: t.cuda.set_rng_state_all(list(s))),
            key=_rng_key,
        ),
        Setting(
            "warnings.filters",
            lambda: tuple(warnings.filters),
            lambda v: setattr(warnings, "filters", list(v)),
        ),
        Setting(
            "the root logger (level, handlers, logging.disable)",
            _root_logger,
            _set_root_logger,
            key=lambda v: (v[0], tuple(map(id, v[1])), v[2]),
        ),
        Setting(
            "named loggers",
            _named_loggers,
            _set_named_loggers,
            key=lambda v: tuple(
                sorted((n, s[0], tuple(map(id, s[1])), *s[2:]) for n, s in v.items())
            ),
        ),
        Setting(
            "structlog's configuration",
            *_if_loaded("structlog", lambda m: m.get_config(), lambda m, c: m.configure(**c)),
            key=_structlog_key,
        ),
        Setting(
            "numpy.geterr()",
            *_if_loaded(
                "numpy",
                lambda np: tuple(sorted(np.geterr().items())),
                lambda np, s: np.seterr(**dict(s)),
            ),
        ),
        Setting("os.umask", _umask, os.umask),
        *(_hook(owner, name) for owner, name in _HOOKS),
        Setting("sys.gettrace()", sys.gettrace, sys.settrace, key=id),
        Setting("sys.getprofile()", sys.getprofile, sys.setprofile, key=id),
        Setting("threading.gettrace()", threading.gettrace, threading.settrace, key=id),
        Setting("threading.getprofile()", threading.getprofile, threading.setprofile, key=id),
        Setting(
            "sys.stdout, sys.stderr",
            lambda: (sys.stdout, sys.stderr),
            _set_streams,
            key=lambda v: tuple(map(id, v)),
        ),
        Setting(
            "file descriptors 0, 1 and 2",
            lambda: (_fds(), ()),
            _set_fds,
            key=lambda v: v[0],
            keep=_keep_fds,
        ),
        Setting("atexit callbacks (count)", atexit._ncallbacks, None),
        Setting(
            "gc.get_freeze_count()",
            gc.get_freeze_count,
            _unfreeze,
            diff=lambda then, now: [f"{then} -> {now}"] if now > then else [],
        ),
        Setting(
            "threads started, still alive",
            lambda: tuple(threading.enumerate()),
            None,
            diff=_started,
            rejects=_running,
        ),
        Setting(
            "processes started, still there",
            _processes,
            None,
            diff=_started_processes,
            rejects=_running_processes,
        ),
        Setting("signal wake-up fd", _wakeup_fd, _set_wakeup_fd),
        Setting(
            "interval timers",
            lambda: tuple(map(signal.getitimer, _TIMERS)),
            _set_timers,
            key=_timer_key,
        ),
    ]
    if hasattr(signal, "pthread_sigmask"):
        items.append(
            Setting(
                "blocked signals (this thread)",
                lambda: frozenset(signal.pthread_sigmask(signal.SIG_BLOCK, ())),
                lambda v: signal.pthread_sigmask(signal.SIG_SETMASK, v),
            )
        )
    if hasattr(os, "sched_getaffinity"):
        items.append(
            Setting(
                "CPU affinity, niceness and scheduling",
                os_state,
                restore_os_state,
                diff=os_state_changes,
            )
        )
    if sys.platform != "win32":
        items.append(Setting("resource limits", _rlimits, _set_rlimits))
    return tuple(items)


@attrs.frozen(eq=False)
class Hygiene:
    """The process settings of :func:`_items` as they were at :meth:`capture`."""

    _values: tuple[Any, ...]
    _held: contextlib.ExitStack[bool | None]

    @classmethod
    def capture(cls) -> Hygiene:
        """Read every setting now (holding what putting one back needs, until :meth:`restore`)."""
        held = contextlib.ExitStack()
        return cls(tuple(i.read() if i.keep is None else i.keep(held) for i in _items()), held)

    def changed(self) -> tuple[str, ...]:
        """Each setting that differs now, by name (:meth:`Setting.change`)."""
        items = zip(_items(), self._values, strict=True)
        return tuple(t for t in (i.change(then, i.read()) for i, then in items) if t is not None)

    def rejected(self) -> tuple[str, ...]:
        """The changes that reject what made them: nothing undoes them, and they change speed."""
        items = zip(_items(), self._values, strict=True)
        return tuple(t for i, then in items if i.rejects for t in i.rejects(then, i.read()))

    def restore(self) -> tuple[str, ...]:
        """Put each changed setting back; the names of those that could not be, with why."""
        failed = []
        with self._held:
            for item, then in zip(_items(), self._values, strict=True):
                if item.change(then, item.read()) is None:
                    continue
                if item.write is None:
                    failed.append(f"{item.name}: cannot be undone")
                    continue
                try:
                    item.write(then)
                except Exception as exc:
                    failed.append(f"{item.name}: {type(exc).__name__}: {exc}")
        return tuple(failed)
