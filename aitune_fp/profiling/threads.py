"""The CPU side of a measurement: threads set and used, cores available, the machine's load."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterable, Iterator
from typing import Any

import attrs

from aitune_fp.core._checks import check_int


@contextlib.contextmanager
def intra_op_threads(threads: int | None) -> Iterator[int]:
    """Set torch's intra-op thread count for the block (None: leave it); yields the count in effect."""
    import torch

    if threads is None:
        yield torch.get_num_threads()
        return
    check_int("threads", threads, minimum=1)
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield threads
    finally:
        torch.set_num_threads(previous)


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


def cpu_environment(threads: int | None = None) -> CpuEnvironment:
    """The environment now; ``threads``: the intra-op count a measurement sets (None: torch's)."""
    import torch

    return CpuEnvironment(
        threads=int(threads) if threads is not None else int(torch.get_num_threads()),
        interop_threads=int(torch.get_num_interop_threads()),
        omp_num_threads=omp_threads(),
        cpus=usable_cpus(),
        load_avg_1m=load_average(),
    )


def is_oversubscribed(loads: Iterable[float | None], *, cpus: int, threads: int) -> bool:
    """Whether any 1-minute load > ``cpus`` or ``threads > cpus`` (the ``oversubscribed`` flag)."""
    if threads > cpus:
        return True
    return any(load is not None and load - threads > cpus - threads for load in loads)
