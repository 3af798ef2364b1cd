"""What runs in a worker process (its request loop) and how it starts (the fork server)."""

from __future__ import annotations

import contextlib
import ctypes
import functools
import gc
import multiprocessing
import multiprocessing.context
import os
import pickle
import signal
import sys
import traceback
from collections.abc import Callable, Mapping
from multiprocessing.connection import Connection
from typing import Any

from aitune_fp.inputs import CopyRing, Sample, copy_sample
from aitune_fp.profiling import stops
from aitune_fp.profiling.confine import blank_inherited, confine
from aitune_fp.profiling.placement import before_sample
from aitune_fp.profiling.recipe import Packed, unpack
from aitune_fp.profiling.timers import (
    ReportedClock,
    ThreadClocks,
    gc_paused,
    waited_on_others_s,
)
from aitune_fp.profiling.transport import digest_of, dump_output, load_samples

#: Makes a worker's callable in the worker: given ``say`` (send facts early), returns the callable
#: and the facts about it the parent reads (plain values and torch dtypes only).
Make = Callable[[Callable[[Mapping[str, Any]], None]], tuple[Callable[..., Any], Mapping[str, Any]]]


#: What the fork server imports once, before it starts any worker or sweep task: a child it
#: starts then takes a fraction of a second, not the 1-1.5 s a fresh interpreter takes.
PRELOAD = (
    "aitune_fp.profiling.openmp_env",  # before torch loads OpenMP
    "torch",
    "aitune_fp.pipeline.workers",
    "aitune_fp.pipeline.strategies",
    "aitune_fp.backends.registry",
    "aitune_fp.adapters.validation",
    "aitune_fp.sweep.task",
)


def fork_server() -> (
    multiprocessing.context.ForkServerContext | multiprocessing.context.SpawnContext
):
    """The ``forkserver`` context preloaded with :data:`PRELOAD` (``spawn`` where there is none).

    One fresh server per process, so its children hold no OpenMP team or CUDA context of ours.
    """
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(list(PRELOAD))
    return context


def start_fork_server() -> None:
    """Start the fork server now, where there is one: its torch preload overlaps our imports.

    A tune at ``--threads 2`` on 2 cores started its first worker 1.7 s later without it.
    """
    if "forkserver" in multiprocessing.get_all_start_methods():
        import multiprocessing.forkserver as forkserver

        fork_server()
        forkserver.ensure_running()


def fork_server_ready() -> None:
    """Wait until a fork server already started has preloaded (one child of it has run).

    Eager's up-front calls are timed next: beside its torch import they read 4-6x slow.
    """
    if fork_server_pid() is not None:
        child = fork_server().Process(target=int)
        child.start()
        child.join()


def fork_server_pid() -> int | None:
    """The fork server's process id, once it runs (its children inherit its CPU affinity)."""
    import multiprocessing.forkserver as forkserver

    pid = getattr(forkserver._forkserver, "_forkserver_pid", None)
    return pid if isinstance(pid, int) else None


def no_stage(exc: BaseException) -> str | None:
    """The default classifier: no stage of its own for any exception."""
    return None


def fork_unavailable() -> str | None:
    """Why a worker cannot be forked here, or None when it can."""
    if not hasattr(os, "fork"):
        return "this platform has no fork"
    import torch

    if torch.cuda.is_initialized():  # type: ignore[no-untyped-call]
        return "CUDA is initialised in this process, and a forked child cannot use it"
    return None


def _error_message(exc: BaseException, classify: Callable[[BaseException], str | None]) -> bytes:
    try:
        stage = classify(exc)
    except BaseException:
        stage = None
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    return pickle.dumps(("error", type(exc).__name__, str(exc), text, stage))


def _die_with_parent() -> None:
    """Ask the kernel to kill this process when its parent dies (Linux; nothing elsewhere)."""
    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def _fresh_thread_pools() -> None:
    """Drop inductor's C++ build pool, inherited without its threads: the child makes its own."""
    # a compile would wait on it forever; inductor resets only its process pool after a fork
    with contextlib.suppress(KeyError, AttributeError):  # not imported, or another inductor
        sys.modules["torch._inductor.async_compile"].AsyncCompile.pool.cache_clear()


def serve_sent(
    conn: Connection,
    packed: Packed,
    classify: Callable[[BaseException], str | None],
    threads: int,
) -> None:
    """A worker started from the fork server: unpack its recipe (and clock), then serve."""
    os.setpgid(0, 0)  # before anything can start a process: closing it kills them too
    confine()  # before the recipe's unpickling runs a candidate's code
    blank_inherited([conn.fileno()])
    # as in a forked worker: a lock made in the default context is unnamed, so it is nothing the
    # user's resource tracker (shared with the fork server's children) holds for this worker,
    # which is killed, never unregisters, and was reported leaking one at the user's exit
    with contextlib.suppress(ValueError):  # no fork here: the fork server could not be either
        multiprocessing.set_start_method("fork", force=True)
    try:
        make, clock = unpack(packed)
    except BaseException as exc:
        conn.send_bytes(_error_message(exc, classify))
        return
    with contextlib.suppress(EOFError, OSError):  # the judge closed the pipe: nothing to say
        serve(conn, make, classify, threads, clock)


def serve(
    conn: Connection,
    make: Make,
    classify: Callable[[BaseException], str | None],
    threads: int,
    clock: ReportedClock | None = None,
) -> None:
    """The worker's loop: make the callable, report, then answer requests until told to stop."""
    import torch

    from aitune_fp._tree import flatten_tensors

    with contextlib.suppress(OSError):
        os.setpgid(0, 0)  # its own group: closing the worker kills what it started too
    confine()  # and none of it leaves the group (elsewhere than Linux, it may)
    blank_inherited([conn.fileno()])  # nor reaches another process through a file of ours
    _die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides; it kills the worker
    for each in (signal.SIGTERM, signal.SIGHUP):  # not the parent's handlers (an application's)
        signal.signal(each, signal.SIG_DFL)
    torch.set_num_threads(threads)
    _fresh_thread_pools()

    def finished() -> None:
        """Wait for this process's device work: what it queued ends before it answers."""
        if torch.cuda.is_initialized():  # type: ignore[no-untyped-call]
            torch.cuda.synchronize()

    def say(facts: Mapping[str, Any]) -> None:
        conn.send_bytes(pickle.dumps(("said", dict(facts))))

    try:
        fn, info = make(say)
    except BaseException as exc:
        conn.send_bytes(_error_message(exc, classify))
        return
    conn.send_bytes(pickle.dumps(("ready", dict(info))))
    ring = CopyRing()  # each timed call's inputs: the next of the worker's own storages
    output: Any = None
    block: list[Sample] = []  # a timed block's own copies (``B``), run by ``T``
    outputs: list[Any] = []  # the last timed block's outputs, kept for ``O``
    threads_here = ThreadClocks()  # read inside each timed block: its wait for a CPU
    # as while timing in process: collected only while the judge waits (``B``); a loop served
    # in this process (a test's) leaves the collector as it found it
    with torch.no_grad(), gc_paused(), stops.counting():
        while True:
            raw = conn.recv_bytes()
            kind = raw[:1]
            try:
                if kind == b"T":  # a timed block: its outputs kept, their digests in its answer
                    output, outputs = None, []
                    continues = stops.seen()
                    start = 0 if clock is None else clock.now_ns()
                    clocks = None if clock is not None else threads_here.read()
                    for own in block:
                        outputs.append(own.call(fn))
                    finished()  # the judge's clock stops at the answer: the kernels end first
                    digests = b"".join(digest_of(o, raw[1:]) for o in outputs)  # still timed
                    ended = None if clocks is None else threads_here.read()
                    block = []
                    conn.send_bytes(b"t" + _spent(clock, start) + digests)
                    others = waited_on_others_s(clocks, ended, threads_here) if ended else None
                    waited = -1 if others is None else round(others * 1e9)
                    halted = b"s" if stops.seen() != continues else b"-"  # stopped meanwhile
                    conn.send_bytes(b"d" + waited.to_bytes(8, "little", signed=True) + halted)
                    output = outputs[-1] if outputs else None
                    continue
                if kind == b"B":  # a block's inputs, copied before the clock; ``lead``: call 1
                    sent, lead = load_samples(raw[1:])
                    got = [Sample(args, kwargs) for args, kwargs in sent]
                    output, outputs = None, []
                    before_sample(fn, functools.partial(_on_copy, fn, got[0]))
                    block = ring.fill_block(got)
                    if lead:
                        block.pop(0).call(fn)
                    if gc.get_count()[0] > gc.get_threshold()[0]:  # while the judge waits
                        gc.collect(0)
                    finished()  # the copies' (and lead's) device work, before the clock
                    threads_here.refresh()  # the threads the block will run on
                    conn.send_bytes(b"b")
                    continue
                message = pickle.loads(raw[1:])
                reply: Any
                if kind == b"O":  # the kept output (of a block's call ``message``)
                    reply = ("out", dump_output(output if message is None else outputs[message]))
                elif kind == b"C":  # an untimed call on values sent with it, in its grad mode
                    args, kwargs, grad = message
                    given = flatten_tensors((args, kwargs))  # the same tensors, after the call
                    before = [t.detach().clone() for t in given]
                    start = 0 if clock is None else clock.now_ns()
                    with torch.set_grad_enabled(grad):
                        out = fn(*args, **kwargs)
                    spent = int.from_bytes(_spent(clock, start) or bytes(8), "little")
                    reply = ("call", (dump_output((out, _changed(given, before))), spent))
                else:
                    reply = ("error", "ProtocolError", f"unknown request {kind!r}", "", None)
                conn.send_bytes(pickle.dumps(reply))
            except BaseException as exc:  # SystemExit, KeyboardInterrupt and friends too
                output = None
                conn.send_bytes(_error_message(exc, classify))


def _on_copy(fn: Callable[..., Any], sample: Sample) -> Any:
    """An untimed call of ``fn`` on a fresh copy of ``sample``."""
    return copy_sample(sample).call(fn)


def _spent(clock: ReportedClock | None, start: int) -> bytes:
    """The time a call spent on ``clock`` since ``start``, as 8 bytes (none without a clock)."""
    return b"" if clock is None else max(clock.now_ns() - start, 0).to_bytes(8, "little")


def _changed(after: list[Any], before: list[Any]) -> list[tuple[int, Any]]:
    """The input tensors a call changed in place, by position (as the caller sees them)."""
    return [
        (i, a.detach())
        for i, (a, b) in enumerate(zip(after, before, strict=False))
        if a.shape != b.shape or not bool((a.detach() == b).all())
    ]
