"""Interference: CPU time another candidate's process group spends while a worker is timed.

Read from the kernel, never from the process; over :data:`FOREIGN_SHARE` it rejects the candidate.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterable
from typing import Any

import attrs

from aitune_fp.errors import AitunefpError

#: Interference: CPU time of suspects while a worker is timed, allowed as a share of its timed
#: wall time plus a fixed slack (a freed output, the kernel's own accounting).
FOREIGN_SHARE = 0.1
FOREIGN_SLACK_NS = 2_000_000
#: Before a worker is timed, the suspects settle: a step of ``QUIET_STEP_S`` in which none used
#: ``QUIET_NS`` of CPU, waited for at most ``QUIET_WAIT_S`` (untimed).
QUIET_NS = 20_000
QUIET_STEP_S = 0.0002
QUIET_WAIT_S = 0.05
#: A suspect's CPU time preparing its timed blocks (copies, the lead call) is held to this share
#: of its CPU time inside them, or twice eager's share where that is more, plus the slack: more
#: is its calls' work done ahead of the clock. Judged from ``AHEAD_FROM_NS`` of CPU in all: a
#: first block's one-off costs (the copies' storages, a lazy start) read 47 ms against 53 ms.
AHEAD_SHARE = 0.5
AHEAD_SLACK_NS = 50_000_000
AHEAD_FROM_NS = 200_000_000
#: A suspect's threads may wake this often per block another worker runs (plus the slack): an
#: idle one wakes none, one that stops and resumes another process wakes at each step.
WAKES_PER_BLOCK = 0.5
WAKES_SLACK = 20


#: A worker's word on its block's wait for a CPU is held to the kernel's count around it, plus this.
CLAIM_SLACK_NS = 500_000


#: A suspect's CPU clock and wake-ups as read before a block: (worker, CPU ns, wake-ups).
Watched = list[tuple[Any, int, int]]


class InterferenceError(AitunefpError, RuntimeError):
    """Another candidate's process ran while a worker was timed; ``culprit``: the one to blame."""

    def __init__(self, message: str, *, culprit: Any = None) -> None:
        """Keep the worker to blame."""
        super().__init__(message)
        self.culprit = culprit


def cpu_clock(pid: int) -> int:
    """The id of ``pid``'s process CPU-time clock (Linux's ``MAKE_PROCESS_CPUCLOCK(pid, SCHED)``)."""
    return ((~pid) << 3) | 2


def runnable_tasks() -> int | None:
    """Tasks the kernel counts runnable now, the caller too (``/proc/loadavg``; else None)."""
    try:
        with open("/proc/loadavg", "rb") as stat:
            return int(stat.read().split()[3].split(b"/")[0])
    except (OSError, ValueError, IndexError):
        return None


def spare_core(earlier: int | None, threads: int = 1) -> bool:
    """Whether a core is free for the judge to spin on beside a worker of ``threads`` threads.

    Runnable tasks are read at ``earlier`` and now (a settling worker is runnable for a moment).
    """
    now = runnable_tasks()
    if earlier is None or now is None:
        return False
    return min(earlier, now) + threads <= len(os.sched_getaffinity(0))  # the judge is counted


def spare_after(during: Callable[[], object], threads: int = 1) -> bool:
    """Run ``during`` (a timed call's input copy); say whether a core is spare for ``threads``."""
    runnable = runnable_tasks()
    during()
    return spare_core(runnable, threads)


def _thread_sum(pids: Iterable[int], name: str, parse: Callable[[bytes], int]) -> int | None:
    """``parse`` of each thread's ``/proc/PID/task/TID/NAME`` of ``pids``, summed (None: none read)."""
    total, read = 0, False
    for pid in pids:
        with contextlib.suppress(OSError):
            for tid in os.listdir(f"/proc/{pid}/task"):
                with contextlib.suppress(OSError, ValueError, IndexError):
                    with open(f"/proc/{pid}/task/{tid}/{name}", "rb") as f:
                        total += parse(f.read())
                    read = True
    return total if read else None


def wakeups(pids: Iterable[int]) -> int:
    """Times the threads of ``pids`` were switched out so far (Linux ``/proc``; 0 elsewhere)."""
    switches = _thread_sum(
        pids, "status", lambda t: sum(int(x.split()[1]) for x in t.splitlines() if b"ctxt_sw" in x)
    )
    return switches or 0


def queued_ns(pids: Iterable[int]) -> int | None:
    """Nanoseconds the threads of ``pids`` waited on a run queue so far (schedstat; else None)."""
    return _thread_sum(pids, "schedstat", lambda t: int(t.split()[1]))


def descendants(pid: int) -> list[int]:
    """The processes below ``pid`` now, zombies too (each thread's ``children``; Linux)."""
    found: list[int] = []
    todo = [pid]
    while todo:
        parent = todo.pop()
        with contextlib.suppress(OSError):
            for tid in os.listdir(f"/proc/{parent}/task"):
                with contextlib.suppress(OSError, ValueError):
                    with open(f"/proc/{parent}/task/{tid}/children", "rb") as f:
                        kids = [int(k) for k in f.read().split()]
                    found += kids
                    todo += kids
    return found


def reaped_ns(pids: Iterable[int]) -> int:
    """CPU time of the children ``pids`` have reaped (``cutime``, ``cstime``: clock ticks)."""
    tick = 1_000_000_000 // os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        with contextlib.suppress(OSError, ValueError, IndexError):
            with open(f"/proc/{pid}/stat", "rb") as stat:
                fields = stat.read().rsplit(b")", 1)[1].split()
            total += (int(fields[13]) + int(fields[14])) * tick
    return total


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


@attrs.define
class Tally:
    """What the group counted of one worker so far, for the interference rules (its own values)."""

    timed_ns: int = 0  #: wall time of its timed blocks
    suffered_ns: int = 0  #: suspects' CPU time while it was timed
    blamed_ns: int = 0  #: its own CPU time while another worker was timed, where it ran most
    wakes: int = 0  #: its threads' wake-ups while other workers were timed
    watched: int = 0  #: blocks of other workers it was watched through
    ahead_ns: int = 0  #: its CPU time preparing its timed blocks (copies, the lead call)
    in_clock_ns: int = 0  #: its CPU time inside them


class WorkerGroup:
    """The workers of one tune, which of them are suspects (candidates, not eager), and their tallies."""

    def __init__(self) -> None:
        """No worker yet."""
        self._workers: list[Any] = []
        self._suspects: list[Any] = []
        self._tallies: dict[Any, Tally] = {}

    def join(self, worker: Any) -> None:
        """Count ``worker`` among the group's (a worker joins its group when it starts)."""
        self._workers.append(worker)
        self._tallies[worker] = Tally()

    def suspect(self, worker: Any) -> None:
        """Watch ``worker``'s CPU time while every other worker of the group is timed."""
        self._suspects.append(worker)

    def trusts(self, worker: Any) -> bool:
        """Whether ``worker``'s word on its own blocks is believed: it is no suspect (eager's)."""
        return worker not in self._suspects

    def tally(self, worker: Any) -> Tally:
        """A copy of what the group counted of ``worker`` so far."""
        return attrs.evolve(self._tallies[worker])

    def others(self, worker: Any) -> list[Any]:
        """The live suspects other than ``worker``."""
        self._suspects = [w for w in self._suspects if w.alive]
        return [w for w in self._suspects if w is not worker]

    def live(self) -> list[Any]:
        """Every worker of the group not closed yet."""
        self._workers = [w for w in self._workers if w.alive]
        return list(self._workers)

    def watch(self, worker: Any, during: Callable[[], object]) -> tuple[Watched, bool]:
        """Wait until every worker but ``worker`` is idle, then read the suspects' CPU clocks.

        ``during`` (the timed worker's input copy) runs in the wait; docs/architecture.md: why.
        Returns the readings and whether a core is spare for the judge to spin on.
        """
        others = [w for w in self.live() if w is not worker]
        for other in others:
            other.settle_quietly()
        others = [w for w in others if w.alive]
        before = [w.cpu_ns() for w in others]
        read_at = time.monotonic()
        spin = spare_after(during, worker.threads)
        give_up = time.monotonic() + QUIET_WAIT_S  # at least one read after ``during``
        while others and time.monotonic() < give_up:
            while spin and time.monotonic() < read_at + QUIET_STEP_S:
                pass
            if not spin:
                time.sleep(QUIET_STEP_S)
            read_at = time.monotonic()
            now = [w.cpu_ns() for w in others]
            quiet = all(b - a < QUIET_NS for a, b in zip(before, now, strict=True))
            before = now
            if quiet:
                break
        suspects = self.others(worker)
        readings = [
            (w, at, w.wakeups()) for w, at in zip(others, before, strict=True) if w in suspects
        ]
        return readings, spin

    def account(
        self, worker: Any, before: Watched, wall_ns: int, ahead_ns: int, in_ns: int
    ) -> None:
        """Count ``worker``'s timed block and the suspects' CPU time since ``before``; raise past a rule.

        The rules: the suspects' share of its wall time, their wake-ups, its own work ahead of the clock.
        """
        mine = self._tallies[worker]
        mine.timed_ns += wall_ns
        mine.ahead_ns += ahead_ns
        mine.in_clock_ns += in_ns
        if before:
            self._wakes(before)
            spent = [(w, max(w.cpu_ns() - at, 0)) for w, at, _ in before]
            busiest, most = max(spent, key=lambda pair: pair[1])
            blamed = self._tallies[busiest]
            blamed.blamed_ns += most
            mine.suffered_ns += sum(ns for _, ns in spent)
            if mine.suffered_ns > FOREIGN_SHARE * mine.timed_ns + FOREIGN_SLACK_NS:
                raise InterferenceError(
                    f"the process of {busiest.name} used {blamed.blamed_ns / 1e6:.1f} ms of CPU "
                    f"while others were timed ({worker.name}'s {mine.timed_ns / 1e6:.1f} ms saw "
                    f"{mine.suffered_ns / 1e6:.1f} ms of it): it runs work of its own between "
                    "its calls (a thread left running, a background job)",
                    culprit=busiest,
                )
        if worker in self._suspects:
            self._ahead(worker, mine)

    def _wakes(self, before: Watched) -> None:
        for w, _, woke in before:
            tally = self._tallies[w]
            tally.wakes += w.wakeups() - woke
            tally.watched += 1
            if tally.wakes > WAKES_PER_BLOCK * tally.watched + WAKES_SLACK:
                raise InterferenceError(
                    f"the threads of {w.name} woke {tally.wakes} times in the {tally.watched} "
                    "blocks other workers ran: it acts while they are timed (a thread polling, "
                    "or stopping and resuming another process)",
                    culprit=w,
                )

    def _ahead(self, worker: Any, mine: Tally) -> None:
        if mine.ahead_ns + mine.in_clock_ns < AHEAD_FROM_NS:
            return
        eager = [
            t.ahead_ns / t.in_clock_ns
            for w in self.live()
            if w not in self._suspects and (t := self._tallies[w]).in_clock_ns
        ]
        share = max([AHEAD_SHARE, *(2 * r for r in eager)])
        if mine.ahead_ns > share * mine.in_clock_ns + AHEAD_SLACK_NS:
            raise InterferenceError(
                f"the process of {worker.name} used {mine.ahead_ns / 1e6:.1f} ms of CPU "
                f"preparing its timed blocks against {mine.in_clock_ns / 1e6:.1f} ms inside "
                f"them (at most {share:.0%} allowed): it works ahead of the clock",
                culprit=worker,
            )
