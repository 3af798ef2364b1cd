"""The judge's side of a worker: a callable in a process of its own, timed from here, killed with it.

What it guarantees, and how it starts (forked, or from the fork server): ``docs/guarantees.md``.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import multiprocessing.context
import multiprocessing.process
import os
import pickle
import signal
import sys
import time
import types
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from multiprocessing.connection import Connection, Pipe
from typing import Any

from aitune_fp.core.messages import one_line
from aitune_fp.errors import AitunefpError, CandidateHungError, InvalidStateError
from aitune_fp.inputs import Sample
from aitune_fp.profiling.interference import (
    Watched,
    WorkerGroup,
    cpu_clock,
    descendants,
    group_members,
    queued_ns,
    reaped_ns,
    spare_after,
    wakeups,
)
from aitune_fp.profiling.recipe import pack
from aitune_fp.profiling.serving import (
    Make,
    fork_server,
    fork_unavailable,
    no_stage,
    serve,
    serve_sent,
)
from aitune_fp.profiling.timers import ReportedClock
from aitune_fp.profiling.transport import digest_of, dump_samples, load_output, loads

#: How long one wait on a worker blocks before it looks again (a watchdog's interrupt lands then).
_POLL_S = 0.05
#: How long the judge spins, not sleeps, on a timed call's answer when a core is spare: waking a
#: sleeping process costs 50-400 us on a virtual machine, which tripled the noise of a 1 ms call.
SPIN_S = 0.02


class WorkerError(AitunefpError, RuntimeError):
    """Code in a worker raised (``error_type``: its class name); the worker holds the traceback.

    ``stage``: where the worker's own classifier placed it (a build's ``unavailable``), if any.
    """

    def __init__(
        self, message: str, *, error_type: str = "", details: str = "", stage: str | None = None
    ) -> None:
        """Keep what the worker said: the error's class name, its traceback text, its stage."""
        super().__init__(message)
        self.error_type = error_type or type(self).__name__
        self.details = details
        self.stage = stage


class WorkerDiedError(WorkerError):
    """The worker's process ended without answering (killed, crashed or ``os._exit``)."""


@contextlib.contextmanager
def _main_hidden() -> Iterator[None]:
    """While a worker starts: a main module that names no script, so the worker re-imports none."""
    main = sys.modules["__main__"]
    sys.modules["__main__"] = types.ModuleType("__main__")
    try:
        yield
    finally:
        sys.modules["__main__"] = main


def _kill(pid: int, process: multiprocessing.process.BaseProcess | None) -> None:
    """Kill a worker's process group (or the process) and reap it; nothing if it is gone."""
    try:
        os.killpg(pid, signal.SIGKILL)  # the worker leads its own group: what it started too
    except (ProcessLookupError, PermissionError):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    if process is not None:
        with contextlib.suppress(Exception):
            process.join(5.0)
        return
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, 0)


class Worker:
    """A process holding one callable; the parent times its calls from outside.

    ``make(say)`` (in the child) returns the callable and its facts (:meth:`ready`; what it says
    first: :meth:`hear`); ``classify`` names an error's stage; ``timeout_s`` bounds every wait;
    ``allowed``: an output's other types; ``threads`` None forks, a count uses the fork server.
    """

    def __init__(
        self,
        make: Make,
        *,
        name: str,
        timeout_s: float,
        classify: Callable[[BaseException], str | None] = no_stage,
        group: WorkerGroup | None = None,
        allowed: Iterable[type] = (),
        threads: int | None = None,
        clock: ReportedClock | None = None,
    ) -> None:
        """Start the worker, making its callable at once; ``clock``: a test's ReportedClock."""
        if threads is None:
            reason = fork_unavailable()
            if reason is not None:
                raise InvalidStateError(f"cannot start a worker for {name}: {reason}")
        self.name = name
        self.threads = 1 if threads is None else threads
        self.clock = clock
        self.said: dict[str, Any] = {}  # every fact ``make`` said so far
        self.timeout_s = timeout_s
        self.deadline_note = ""  # what set ``timeout_s``, for the message of a missed one
        self.allowed = tuple(allowed)
        self._group = group
        self.last_digest = b""  # of the last timed call's output, as sent
        self.nonce = b""  # the last timed block's: the places its digests read
        self.digests: tuple[bytes, ...] = ()  # of each output of the last timed block, as sent
        self._waited_ns = -1  # its threads' wait for a CPU in the last timed block (-1: unknown)
        self._halted = False  # its process was stopped in the last timed block, by its word
        self._digest_due = False
        self._lost: Exception | None = None  # a failure met while another worker was timed
        self.spins = False  # the judge spins on its next timed call: a core is spare (watch)
        process: multiprocessing.process.BaseProcess | None = None
        if threads is not None:  # packed before anything starts: what cannot pickle raises here
            packed = pack((make, clock), f"the recipe of {name}")
            parent, child = Pipe()
            process = fork_server().Process(
                target=serve_sent, args=(child, packed, classify, threads), name=f"aitune_fp {name}"
            )
            with contextlib.nullcontext() if packed.needs_main else _main_hidden():
                process.start()
            child.close()
            assert process.pid is not None
            pid = process.pid
        else:
            parent, child = Pipe()
            pid = os.fork()
            if pid == 0:  # the worker: never returns into the caller's code
                code = 0
                try:
                    parent.close()
                    serve(child, make, classify, 1, clock)
                except BaseException:
                    code = 1
                finally:
                    os._exit(code)
            child.close()
        self.pid = pid
        self._conn: Connection | None = parent
        self._clock = cpu_clock(pid)
        self._family: list[tuple[int, int]] = []  # (pid, CPU clock) of all it started
        self._grouped: list[int] = []  # the other members of its process group, read each 0.5 s
        self._family_at = 0.0
        self._finalizer = weakref.finalize(self, _kill, pid, process)
        if group is not None:
            group.join(self)

    @property
    def alive(self) -> bool:
        """Whether the worker has not been closed."""
        return self._conn is not None

    def cpu_ns(self) -> int:
        """CPU time so far of the worker and all it started, every thread, what they reaped too.

        Its descendants are read each time (zombies too); its group each 0.5 s (one whose parent
        exited, where the worker is no subreaper, counts while it runs).
        """
        now = time.monotonic()
        if now - self._family_at > 0.5:
            self._grouped = [p for p in group_members(self.pid) if p != self.pid]
            self._family_at = now
        members = {self.pid, *descendants(self.pid), *self._grouped}
        self._family = [(p, cpu_clock(p)) for p in sorted(members - {self.pid})]
        total = reaped_ns(members)
        for clock in [self._clock, *(c for _, c in self._family)]:
            with contextlib.suppress(OSError):
                total += time.clock_gettime_ns(clock)
        return total

    def queued(self) -> tuple[int | None, tuple[int, ...]]:
        """Its processes' threads' run-queue wait so far (:func:`queued_ns`), and those processes."""
        pids = (self.pid, *(p for p, _ in self._family))
        return queued_ns(pids), pids

    def wakeups(self) -> int:
        """Times its process group's threads were switched out so far (:func:`wakeups`)."""
        return wakeups([self.pid, *(p for p, _ in self._family)])

    def close(self) -> None:
        """Kill the worker and everything it started; later requests raise."""
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()
        self._finalizer()

    def _receive(self, spin_s: float = 0.0, calls: int = 1) -> bytes:
        """The worker's next message (spun ``spin_s``, then blocked); killed on timeout or death."""
        conn = self._conn
        if conn is None:
            raise InvalidStateError(f"the worker of {self.name} was closed")
        start = time.monotonic()
        deadline = start + self.timeout_s * max(calls, 1)
        try:
            while not conn.poll(0) and time.monotonic() - start < spin_s:
                pass
            while not conn.poll(_POLL_S):
                if time.monotonic() >= deadline:
                    why = f" ({self.deadline_note})" if self.deadline_note else ""
                    raise CandidateHungError(
                        f"{self.name} did not answer within {self.timeout_s:.3g} s{why}; "
                        "its process was killed"
                    )
            return conn.recv_bytes()
        except EOFError:
            self.close()
            raise WorkerDiedError(
                f"the process of {self.name} ended without answering", error_type="exit"
            ) from None
        except BaseException:
            self.close()
            raise

    def _reply_of(self, raw: bytes, expected: str) -> Any:
        """The payload of a message of kind ``expected``; the worker's error raised as one."""
        try:
            message = loads(raw)
        except Exception as exc:
            self.close()
            raise WorkerError(f"{self.name} sent something that is not data: {exc}") from None
        if not isinstance(message, tuple) or not message:
            self.close()
            raise WorkerError(f"{self.name} sent a malformed message")
        if message[0] == "error" and len(message) == 5:
            _, error_type, text, details, stage = message
            raise WorkerError(
                str(text),
                error_type=str(error_type),
                details=str(details),
                stage=None if stage is None else str(stage),
            )
        if message[0] != expected or len(message) != 2:
            self.close()
            raise WorkerError(f"{self.name} answered {message[0]!r} where {expected!r} was due")
        return message[1]

    def _send(self, data: bytes) -> None:
        if self._lost is not None:  # met while another worker was timed: this worker's own
            lost, self._lost = self._lost, None
            raise lost
        if self._conn is None:
            raise InvalidStateError(f"the worker of {self.name} was closed")
        self._settle()
        self._conn.send_bytes(data)

    def _settle(self) -> None:
        """Read what the last timed block owes after its answer, before anything else is asked.

        That is what its threads waited for a CPU (8 bytes, -1: unknown).
        """
        if self._digest_due:
            self._digest_due = False
            raw = self._receive()
            if raw[:1] != b"d" or len(raw) != 10:
                self._reply_of(raw, "d")
            self._waited_ns = int.from_bytes(raw[1:9], "little", signed=True)
            self._halted = raw[9:] == b"s"

    def stopped(self) -> bool:
        """Whether the last timed block's process was stopped meanwhile, by its own word.

        Believed of a worker that is not a suspect (eager's): a candidate's would pick its blocks.
        """
        self._settle()
        return self._halted and (self._group is None or self._group.trusts(self))

    def waited_s(self) -> float | None:
        """Seconds the last timed block's threads waited for a CPU (None: not measured)."""
        self._settle()
        return None if self._waited_ns < 0 else self._waited_ns / 1e9

    def settle_quietly(self) -> None:
        """Read the digest owed before another is timed; a failure is raised at its next request."""
        try:
            self._settle()
        except Exception as exc:
            self._lost = exc

    def _request(self, kind: bytes, payload: Any, expected: str) -> Any:
        self._send(kind + pickle.dumps(payload))
        return self._reply_of(self._receive(), expected)

    def hear(self) -> dict[str, Any]:
        """The facts ``make`` said first (its error raised, if it failed before saying any)."""
        return self._facts("said")

    def ready(self) -> dict[str, Any]:
        """Wait until the callable is made: the facts ``make`` returned (said: :attr:`said`)."""
        while True:
            raw = self._receive()
            try:
                message = loads(raw)
            except Exception:
                message = None  # not data: the check below says so
            if isinstance(message, tuple) and len(message) == 2 and message[0] == "said":
                if isinstance(message[1], dict):
                    self.said.update(message[1])
                continue
            self._family_at = float("-inf")  # what its build started is read at its first call
            return self._facts("ready", raw)

    def _facts(self, kind: str, raw: bytes | None = None) -> dict[str, Any]:
        info = self._reply_of(self._receive() if raw is None else raw, kind)
        if not isinstance(info, dict):
            self.close()
            raise WorkerError(f"{self.name} sent facts that are not a mapping")
        if kind == "said":
            self.said.update(info)
        return info

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """An untimed call on these values; its output, read back as data."""
        import torch

        asked = (args, kwargs, torch.is_grad_enabled())
        reply = self._request(b"C", asked, "call")
        if not (isinstance(reply, tuple) and len(reply) == 2 and isinstance(reply[1], int)):
            self.close()
            raise WorkerError(f"{self.name} sent a malformed answer to a call")
        out, changed = self._load(reply[0])
        if self.clock is not None:
            self.clock.spend_ns(reply[1])
        from aitune_fp._tree import flatten_tensors

        mine = flatten_tensors((args, kwargs))
        with torch.no_grad():  # the call changed its copies there: change the caller's here
            for index, value in changed:
                if 0 <= index < len(mine):
                    if mine[index].shape != value.shape:  # a leaf requiring grad refuses it
                        mine[index].resize_(value.shape)
                    mine[index].copy_(value)
        return out

    def prepare_block(self, samples: Sequence[Sample], lead: bool) -> None:
        """Send a block's inputs, untimed; the worker copies each before the clock."""
        self._send(b"B" + dump_samples(samples, lead))
        raw = self._receive(calls=len(samples))
        if raw != b"b":
            self._reply_of(raw, "b")

    def run_block(self, calls: int) -> None:
        """The ``calls`` prepared calls of a block: the hand-over the parent times.

        The same request every block, with a fresh nonce: the answer carries each output's
        digest at places the nonce picks, made inside the clock (no work put off past it).
        """
        self.nonce = os.urandom(8)
        self._send(b"T" + self.nonce)
        raw = self._receive(spin_s=SPIN_S if self.spins else 0.0, calls=calls)
        spent = 0 if self.clock is None else 8
        if raw[:1] != b"t" or len(raw) != 1 + spent + 16 * calls:
            self._reply_of(raw, "t")  # raises the worker's error, or says it was no answer
        self._digest_due = True
        if self.clock is not None:
            self.clock.spend_ns(int.from_bytes(raw[1:9], "little"))
        self.digests = tuple(raw[i : i + 16] for i in range(1 + spent, len(raw), 16))
        self.last_digest = self.digests[-1]

    def outputs_on(self, samples: Sequence[Sample]) -> list[Any]:
        """Untimed: the outputs on ``samples``, run as one block (one hand-over, not one each)."""
        self.prepare_block(samples, lead=False)
        self.run_block(len(samples))
        return [self.output(j) for j in range(len(samples))]

    def output(self, index: int | None = None) -> Any:
        """The last timed call's output (or call ``index``'s), as data, with the digest it sent."""
        output = self._load(self._request(b"O", index, "out"))  # the digest is read first
        sent = self.last_digest if index is None else self.digests[index]
        if digest_of(output, self.nonce) != sent:
            raise WorkerError(
                f"{self.name} showed an output other than the one it answered with while "
                "timed (computed after its answer, or changed since)",
                error_type="OutputChanged",
            )
        return output

    def _load(self, data: Any) -> Any:
        if not isinstance(data, bytes):
            raise WorkerError(f"{self.name} sent an output that is not bytes")
        try:
            return load_output(data, self.allowed)
        except Exception as exc:
            found = [line for line in str(exc).splitlines() if "Unsupported global" in line]
            what = found[0].strip() if found else one_line(exc)
            raise WorkerError(
                f"the output of {self.name} holds something other than tensors and the "
                f"containers eager's outputs use ({what})",
                error_type=type(exc).__name__,
            ) from None

    def watch(self, during: Callable[[], object]) -> Watched:
        """Before a timed call, ``during`` it: the others settle (:meth:`WorkerGroup.watch`)."""
        if self._group is None:
            self.spins = spare_after(during, self.threads)
            return []
        readings, self.spins = self._group.watch(self, during)
        return readings

    def account(self, before: Watched, wall_ns: int, ahead_ns: int = 0, in_ns: int = 0) -> None:
        """After a timed call: its wall time, its own CPU time before and inside the clock.

        The group counts them with the suspects' CPU time since ``before`` (:meth:`WorkerGroup.account`).
        """
        if self._group is not None:
            self._group.account(self, before, wall_ns, ahead_ns, in_ns)
