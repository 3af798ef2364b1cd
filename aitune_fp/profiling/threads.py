"""The CPU side of a measurement: threads set and used, cores available, the machine's load."""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import attrs

from aitune_fp.core._checks import check_int
from aitune_fp.core.messages import counted

#: The counts of the :func:`intra_op_threads` blocks open in this process (any thread), in the
#: order they opened, and torch's count before the first: torch's count is the process's.
_THREADS_LOCK = threading.Lock()
_open_counts: list[list[int]] = []
_threads_before = [0]


@contextlib.contextmanager
def intra_op_threads(threads: int | None) -> Iterator[int]:
    """Set torch's intra-op thread count for the block (None: leave it); yields the count in effect.

    Blocks open at once in two threads (two tunes) hold the latest one's count; the last one out
    puts back the count from before the first.
    """
    import torch

    if threads is None:
        yield torch.get_num_threads()
        return
    check_int("threads", threads, minimum=1)
    mine = [threads]
    with _THREADS_LOCK:
        if not _open_counts:
            _threads_before[0] = torch.get_num_threads()
        _open_counts.append(mine)
        torch.set_num_threads(threads)
    try:
        yield threads
    finally:
        with _THREADS_LOCK:
            del _open_counts[next(i for i, c in enumerate(_open_counts) if c is mine)]
            torch.set_num_threads(_open_counts[-1][0] if _open_counts else _threads_before[0])


def user_threads() -> int:
    """The intra-op count torch has as the process means it: a timing block's own set aside."""
    import torch

    with _THREADS_LOCK:
        return _threads_before[0] if _open_counts else torch.get_num_threads()


def set_user_threads(threads: int) -> None:
    """Set torch's intra-op count; while timing blocks are open, from the last one's end."""
    import torch

    with _THREADS_LOCK:
        if _open_counts:
            _threads_before[0] = threads
        else:
            torch.set_num_threads(threads)


def set_threads(threads: int) -> None:
    """Run this process's CPU work on ``threads`` threads (``tune --threads`` and sweep tasks).

    Sets ``OMP_NUM_THREADS`` only before torch loads (OpenMP reads it once), then torch's count.
    """
    n = check_int("threads", threads, minimum=1)
    if "torch" not in sys.modules:
        os.environ["OMP_NUM_THREADS"] = str(n)
    import torch

    torch.set_num_threads(n)


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity mask; all CPUs where there is none)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - macOS, Windows
        return os.cpu_count() or 1


def too_many_threads(threads: int, name: str) -> str | None:
    """Why ``name`` ``threads`` cannot be timed here (more threads than usable CPUs); None: it can.

    ``tune`` and a sweep run here refuse it up front: the threads would wait for each other.
    """
    cpus = usable_cpus()
    if threads <= cpus:
        return None
    return (
        f"{name} {threads} is more than the {counted(cpus, 'CPU')} this process may use: the "
        f"threads would wait for each other and the timings measure that; give {name} {cpus} "
        "or fewer (docs/threads.md)"
    )


def load_average() -> float | None:
    """The 1-minute load average of the machine (None where the platform has none)."""
    try:
        return float(os.getloadavg()[0])
    except (AttributeError, OSError):
        return None


def omp_threads() -> int | None:
    """``OMP_NUM_THREADS`` as a count (None where unset or not one number)."""
    text = os.environ.get("OMP_NUM_THREADS", "").strip()
    return int(text) if text.isdigit() and int(text) > 0 else None


@attrs.frozen(kw_only=True)
class CpuEnvironment:
    """A measurement's CPU side: intra/inter-op threads, ``OMP_NUM_THREADS``, cores, load."""

    threads: int
    interop_threads: int
    omp_num_threads: int | None
    cpus: int
    load_avg_1m: float | None

    def to_fields(self) -> dict[str, Any]:
        """The values as event fields."""
        return attrs.asdict(self)


def cpu_environment(
    threads: int | None = None, load: Callable[[], float | None] | None = None
) -> CpuEnvironment:
    """The environment now; ``threads``: the intra-op count a measurement sets (None: torch's).

    ``load``: what reads the machine's load (None: this host's, :func:`load_average`).
    """
    import torch

    return CpuEnvironment(
        threads=int(threads) if threads is not None else int(torch.get_num_threads()),
        interop_threads=int(torch.get_num_interop_threads()),
        omp_num_threads=omp_threads(),
        cpus=usable_cpus(),
        load_avg_1m=(load or load_average)(),
    )


def is_oversubscribed(loads: Iterable[float | None], *, cpus: int, threads: int) -> bool:
    """Whether any 1-minute load > ``cpus`` or ``threads > cpus`` (the ``oversubscribed`` flag)."""
    if threads > cpus:
        return True
    return any(load is not None and load - threads > cpus - threads for load in loads)
