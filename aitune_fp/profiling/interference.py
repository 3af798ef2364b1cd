"""Interference: CPU time another candidate's process spends while a worker is timed.

Read from the kernel (each process's CPU-time clock, its process group included), never from
the process itself; a share of the timed wall time above :data:`FOREIGN_SHARE` (plus
:data:`FOREIGN_SLACK_NS`) is a candidate's own work running beside another's timing.
"""

from __future__ import annotations

import os
from typing import Any

from aitune_fp.errors import AitunefpError

__all__ = [
    "FOREIGN_SHARE",
    "FOREIGN_SLACK_NS",
    "QUIET_NS",
    "QUIET_STEP_S",
    "QUIET_WAIT_S",
    "InterferenceError",
    "WorkerGroup",
    "cpu_clock",
    "group_members",
]

#: Interference: CPU time of suspects while a worker is timed, allowed as a share of its timed
#: wall time plus a fixed slack (a freed output, the kernel's own accounting).
FOREIGN_SHARE = 0.1
FOREIGN_SLACK_NS = 2_000_000
#: Before a worker is timed, the suspects settle: a step of ``QUIET_STEP_S`` in which none used
#: ``QUIET_NS`` of CPU, waited for at most ``QUIET_WAIT_S`` (untimed).
QUIET_NS = 20_000
QUIET_STEP_S = 0.0002
QUIET_WAIT_S = 0.05


class InterferenceError(AitunefpError, RuntimeError):
    """Another candidate's process ran while a worker was timed (a thread left spinning).

    ``culprit``: the worker whose process ran (the blame is its, not the timed one's).
    """

    def __init__(self, message: str, *, culprit: Any = None) -> None:
        """Keep the worker to blame."""
        super().__init__(message)
        self.culprit = culprit


def cpu_clock(pid: int) -> int:
    """The id of ``pid``'s process CPU-time clock (Linux's ``MAKE_PROCESS_CPUCLOCK(pid, SCHED)``)."""
    return ((~pid) << 3) | 2


def group_members(pgid: int) -> list[int]:
    """The processes in process group ``pgid`` (Linux ``/proc``; none elsewhere)."""
    found: list[int] = []
    try:
        names = os.listdir("/proc")
    except OSError:
        return found
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as stat:
                fields = stat.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        if len(fields) > 3 and int(fields[2]) == pgid:
            found.append(int(name))
    return found


class WorkerGroup:
    """The workers of one tune, and which of them are suspects (candidates, not eager).

    While a worker is timed, the CPU time of every other live suspect is read before and after
    (:meth:`Worker.watch`, :meth:`Worker.account`).
    """

    def __init__(self) -> None:
        """No worker yet."""
        self._workers: list[Any] = []
        self._suspects: list[Any] = []

    def join(self, worker: Any) -> None:
        """Count ``worker`` among the group's (a worker joins its group when it starts)."""
        self._workers.append(worker)

    def suspect(self, worker: Any) -> None:
        """Watch ``worker``'s CPU time while every other worker of the group is timed."""
        self._suspects.append(worker)

    def others(self, worker: Any) -> list[Any]:
        """The live suspects other than ``worker``."""
        self._suspects = [w for w in self._suspects if w.alive]
        return [w for w in self._suspects if w is not worker]

    def live(self) -> list[Any]:
        """Every worker of the group not closed yet."""
        self._workers = [w for w in self._workers if w.alive]
        return list(self._workers)
