"""Worker processes and what crosses from them: plain data in, plain data out, never code.

The judging process believes nothing a worker sends but data: messages are read with a
restricted unpickler, outputs as tensors and plain containers, objects remade only of the types
eager's own outputs use (no ``__reduce__``, ``__init__`` or ``__setstate__`` of the worker's
choosing runs). A worker that raises, dies or stops answering is named, and killed.
"""

from __future__ import annotations

import collections
import contextlib
import errno
import os
import pickle
import signal
import threading
import time
from pathlib import Path
from typing import Any, NamedTuple

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from aitune_fp.cli import terminate_as_interrupt
from aitune_fp.errors import CandidateHungError
from aitune_fp.inputs import CopyRing, Sample
from aitune_fp.isolation.hygiene import os_state, os_state_changes, restore_os_state
from aitune_fp.profiling.calls import ProfilingError, call_arm, timed_block
from aitune_fp.profiling.interference import InterferenceError, WorkerGroup
from aitune_fp.profiling.timers import CpuTimer
from aitune_fp.profiling.transport import (
    dump_output,
    dump_samples,
    load_output,
    load_samples,
    loads,
)
from aitune_fp.profiling.workers import Worker, WorkerDiedError, WorkerError

RAN: list[str] = []


class Pair(NamedTuple):
    left: torch.Tensor
    right: torch.Tensor


class Holder:
    """An output object of its own (as a model's cache is)."""

    def __init__(self, value: torch.Tensor) -> None:
        self.value = value
        self.layers = [value * 2]


class Evil:
    """Runs code wherever it is unpickled or remade."""

    def __reduce__(self) -> Any:
        return (RAN.append, ("reduced",))

    def __setstate__(self, state: Any) -> None:
        RAN.append("setstate")


class Output(collections.OrderedDict):  # type: ignore[type-arg]
    """A dict subclass whose own ``__setitem__`` must not run in the judge."""

    def __setitem__(self, key: Any, value: Any) -> None:
        RAN.append("setitem")
        super().__setitem__(key, value)


leaves = st.one_of(
    st.integers(-5, 5),
    st.floats(allow_nan=False, width=32),
    st.text(max_size=3),
    st.none(),
    st.booleans(),
    st.integers(1, 4).map(lambda n: torch.arange(n, dtype=torch.float32)),
)
trees = st.recursive(
    leaves,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.lists(inner, max_size=3).map(tuple),
        st.dictionaries(st.text(max_size=3), inner, max_size=3),
    ),
    max_leaves=10,
)


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and torch.equal(a, b)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(map(_same, a, b))
    if isinstance(a, dict):
        return type(a) is type(b) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


@settings(max_examples=60, deadline=None)
@given(trees)
def test_plain_outputs_round_trip_unchanged(tree: Any) -> None:
    assert _same(load_output(dump_output(tree), ()), tree)


def test_objects_are_remade_only_of_eagers_types_and_without_their_code() -> None:
    out = Output(a=torch.ones(2))
    out["b"] = Pair(torch.zeros(1), torch.ones(1))
    out.extra = Holder(torch.full((2,), 3.0))  # type: ignore[attr-defined]
    RAN.clear()
    back = load_output(dump_output(out), (Output, Pair, Holder))
    assert RAN == []  # no __setitem__ of the class ran while it was remade
    assert type(back) is Output and list(back) == ["a", "b"]
    assert type(back["b"]) is Pair and torch.equal(back["b"].right, torch.ones(1))
    assert torch.equal(back.extra.layers[0], torch.full((2,), 6.0))


@pytest.mark.parametrize("allowed", [(), (Pair,)])
def test_a_type_eager_does_not_use_is_refused_by_name(allowed: tuple[type, ...]) -> None:
    with pytest.raises(pickle.UnpicklingError, match="Holder is not among eager's outputs"):
        load_output(dump_output([Holder(torch.ones(1))]), allowed)


def test_a_message_holding_code_is_refused_and_the_code_never_runs() -> None:
    RAN.clear()
    with pytest.raises(pickle.UnpicklingError, match="plain values only"):
        loads(pickle.dumps(("ready", {"x": Evil()})))
    assert RAN == []
    assert loads(pickle.dumps(("ready", {"dtype": torch.bfloat16}))) == (
        "ready",
        {"dtype": torch.bfloat16},
    )


def _worker(fn: Any, **kwargs: Any) -> Worker:
    kwargs.setdefault("timeout_s", 20)
    return Worker(lambda say: (fn, {"pid": os.getpid()}), name="w", **kwargs)


def _tensor_of(dtype: torch.dtype, shape: tuple[int, ...], layout: str) -> torch.Tensor:
    made = (torch.arange(int(torch.Size(shape).numel())) % 7).reshape(shape).to(dtype)
    if layout == "transposed" and len(shape) == 2:
        return made.t()  # not contiguous: pickled the usual way, strides kept
    if layout == "grad" and dtype.is_floating_point:
        return made.requires_grad_(True)
    return made


tensors = st.builds(
    _tensor_of,
    st.sampled_from([torch.float32, torch.bfloat16, torch.float16, torch.int64, torch.bool]),
    st.lists(st.integers(0, 3), min_size=0, max_size=3).map(tuple),
    st.sampled_from(["plain", "transposed", "grad"]),
)


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(st.lists(tensors, max_size=3), tensors), max_size=3), st.booleans())
def test_a_blocks_inputs_cross_to_a_worker_unchanged(
    parts: list[tuple[list[torch.Tensor], torch.Tensor]], lead: bool
) -> None:
    """Every dtype, shape (empty too), layout and grad flag arrives as sent, with kwargs."""
    samples = [Sample((*args, 3), {"x": kw, "n": None}) for args, kw in parts]
    given_back, led = load_samples(dump_samples(samples, lead))
    assert led is lead and len(given_back) == len(samples)
    for sample, (args, kwargs) in zip(samples, given_back, strict=True):
        for sent, got in zip(
            [*sample.args, *sample.kwargs.values()], [*args, *kwargs.values()], strict=True
        ):
            if isinstance(sent, torch.Tensor):
                assert got.dtype == sent.dtype and got.shape == sent.shape
                assert got.stride() == sent.stride() and got.requires_grad == sent.requires_grad
                assert torch.equal(got.detach(), sent.detach())
            else:
                assert got == sent


def test_a_worker_runs_in_its_own_process_and_answers_with_data() -> None:
    worker = _worker(lambda x: x * 2)
    try:
        assert worker.ready()["pid"] == worker.pid != os.getpid()
        assert torch.equal(worker(torch.ones(3)), torch.full((3,), 2.0))
        worker.prepare_block([Sample((torch.ones(2),)), Sample((torch.zeros(2),))], lead=False)
        worker.run_block(2)
        assert torch.equal(worker.output(0), torch.full((2,), 2.0))
        assert torch.equal(worker.output(), torch.zeros(2))
    finally:
        worker.close()
    assert not worker.alive


def test_an_error_in_the_worker_is_named_as_raised_there() -> None:
    def fail(x: Any) -> Any:
        raise SystemExit("bye")

    worker = _worker(fail)
    worker.ready()
    with pytest.raises(WorkerError) as caught:
        worker(torch.ones(1))
    assert caught.value.error_type == "SystemExit" and "fail" in caught.value.details
    assert worker.alive  # the worker serves on: SystemExit stayed in it
    worker.close()


def test_a_worker_that_dies_is_named() -> None:
    worker = _worker(lambda x: os._exit(3))
    worker.ready()
    with pytest.raises(WorkerDiedError, match="ended without answering"):
        worker(torch.ones(1))
    assert not worker.alive


def test_a_worker_dies_of_sigterm_whatever_handler_its_parent_had() -> None:
    """The command line's SIGTERM handler (raise an interrupt) is not the worker's: it dies.

    Inherited, it would turn a SIGTERM mid-call into an error the worker reports and serves on.
    """
    with terminate_as_interrupt():
        worker = _worker(lambda x: time.sleep(600))
    worker.ready()
    killer = threading.Timer(0.5, os.kill, (worker.pid, signal.SIGTERM))
    killer.start()
    try:
        with pytest.raises(WorkerDiedError, match="ended without answering"):
            worker(torch.ones(1))
    finally:
        killer.join()
        worker.close()


def test_a_worker_that_does_not_answer_is_killed_at_its_deadline() -> None:
    worker = _worker(lambda x: time.sleep(600), timeout_s=0.5)
    worker.ready()
    start = time.monotonic()
    with pytest.raises(CandidateHungError, match="did not answer within"):
        worker(torch.ones(1))
    assert time.monotonic() - start < 5
    assert not worker.alive
    with pytest.raises(ProcessLookupError):
        os.kill(worker.pid, 0)


def test_cpu_spent_by_a_suspect_while_another_worker_is_timed_is_interference() -> None:
    group = WorkerGroup()
    timed = _worker(lambda x: x + 1, group=group)
    idle = _worker(lambda x: x, group=group)
    group.suspect(idle)
    sample = Sample((torch.ones(4),))
    timed.ready()
    idle.ready()
    for _ in range(20):  # an idle suspect is not interference
        timed_block(timed, [sample], CpuTimer(), "baseline", {}, ring=CopyRing(), lead=False)
    assert group.tally(timed).suffered_ns < 2_000_000

    def spin(say: Any) -> Any:
        import threading

        def run() -> None:
            while True:
                pass

        threading.Thread(target=run, daemon=True).start()
        return (lambda x: x), {}

    spinner = Worker(spin, name="spinner", timeout_s=20, group=group)
    group.suspect(spinner)
    spinner.ready()

    def time_many() -> None:
        for _ in range(2000):
            timed_block(timed, [sample], CpuTimer(), "baseline", {}, ring=CopyRing(), lead=False)

    with pytest.raises(InterferenceError, match="spinner used"):
        time_many()
    for worker in (timed, idle, spinner):
        worker.close()


def _busy(seconds: float) -> None:
    """Burn ``seconds`` of CPU (work the kernel counts, as a model's would be)."""
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def _ahead(say: Any) -> Any:
    """A candidate that does each call's work while its block's inputs are copied, untimed, and
    answers its timed calls from what it made there (its own rebinding of the copy step)."""
    from aitune_fp.inputs import CopyRing as Ring

    made: list[torch.Tensor] = []
    fill = Ring.fill_block

    def fill_ahead(self: Any, samples: Any) -> Any:
        block = fill(self, samples)
        for own in block:
            _busy(0.002)
            made.append(own.args[0] + 1)
        return block

    Ring.fill_block = fill_ahead  # type: ignore[method-assign]
    return (lambda x: made.pop(0)), {}


def _ahead_in_a_child(orphan: bool, say: Any) -> Any:
    """As :func:`_ahead`, but the work is done by a child: forked after a timed answer, while the
    judge reads its wait (no tally's window), told to work while the next block is prepared,
    and reaped before the worker answers (its CPU is then the worker's children's). ``orphan``:
    by a grandchild whose parent exits at once, so that no process of the worker's would reap it
    (the kernel's init would, its CPU counted nowhere), and which tells when it is done."""
    import aitune_fp.profiling.serving as serving
    from aitune_fp.inputs import CopyRing as Ring

    fill, wait = Ring.fill_block, serving.waited_on_others_s
    helper: list[tuple[int, int]] = []

    def fork_after_the_answer(*args: Any) -> Any:
        go_r, go_w = os.pipe()
        done_r, done_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            if orphan and os.fork() != 0:
                os._exit(0)
            calls = os.read(go_r, 1)[0]
            _busy(0.002 * calls)
            os.write(done_w, b"d")
            os._exit(0)
        helper.append((pid, go_w, done_r))
        return wait(*args)

    def fill_ahead(self: Any, samples: Any) -> Any:
        block = fill(self, samples)
        if helper:
            pid, go, done = helper.pop()
            os.write(go, bytes([len(block)]))
            os.read(done, 1)
            os.waitpid(pid, 0)
        return block

    serving.waited_on_others_s = fork_after_the_answer
    Ring.fill_block = fill_ahead  # type: ignore[method-assign]
    return (lambda x: x + 1), {}


@pytest.mark.parametrize("orphan", [False, True], ids=["child", "orphan"])
def test_work_ahead_of_the_clock_in_a_child_process_is_counted(orphan: bool) -> None:
    """A child that does the block's work while it is prepared, reaped before the worker answers,
    read 2.8-3x faster, accepted: what a worker's reaped children used counts as its own, and
    the worker is its descendants' subreaper, so an orphan's CPU is its too."""
    import functools

    eager, candidate = _ahead_pair(functools.partial(_ahead_in_a_child, orphan))
    # the orphan's forks, made while eager is timed, may be caught first as running meanwhile
    with pytest.raises(InterferenceError, match=r"ahead of the clock|while others") as raised:
        _blocks(eager, candidate)
    assert raised.value.culprit is candidate


def _ahead_pair(make: Any) -> tuple[Worker, Worker]:
    """Eager (2 ms of CPU a call) and a suspect made by ``make``, in one group, both ready."""
    group = WorkerGroup()
    eager = _worker(lambda x: _busy(0.002) or x + 1, group=group)
    candidate = Worker(make, name="ahead", timeout_s=20, group=group)
    group.suspect(candidate)
    eager.ready()
    candidate.ready()
    return eager, candidate


def _blocks(eager: Worker, candidate: Worker) -> None:
    sample = Sample((torch.ones(4),))
    try:
        for _ in range(40):
            for worker in (eager, candidate):
                timed_block(worker, [sample] * 5, CpuTimer(), None, {}, ring=CopyRing(), lead=True)
    finally:
        eager.close()
        candidate.close()


def test_a_candidate_that_works_ahead_of_the_clock_is_interference() -> None:
    """Its calls' work done while its block is prepared (untimed) would read as a candidate many
    times faster: the CPU its process spends preparing is held to a share of what it spends timed
    (or twice eager's share). An honest candidate doing the same work in its calls passes."""
    eager, candidate = _ahead_pair(_ahead)
    with pytest.raises(InterferenceError, match="ahead of the clock") as raised:
        _blocks(eager, candidate)
    assert raised.value.culprit is candidate
    _blocks(*_ahead_pair(lambda say: ((lambda x: _busy(0.002) or x + 1), {})))


def _waker(say: Any) -> Any:
    """A suspect with a thread that wakes every millisecond: almost no CPU, but the time to
    stop and resume another process (``SIGSTOP``/``SIGCONT`` bursts read eager 1.95x slow)."""
    import threading

    def run() -> None:
        while True:
            time.sleep(0.001)

    threading.Thread(target=run, daemon=True).start()
    return (lambda x: x), {}


def test_a_suspect_that_keeps_waking_while_another_is_timed_is_interference() -> None:
    """A thread of a candidate's process that wakes while eager is timed (a stop-and-resume loop
    against eager's worker uses 1-2 % of a CPU, under the CPU share) is interference; an idle
    suspect wakes no thread there."""
    group = WorkerGroup()
    timed = _worker(lambda x: _busy(0.002) or x + 1, group=group)
    idle = _worker(lambda x: x, group=group)
    group.suspect(idle)
    timed.ready()
    idle.ready()
    sample = Sample((torch.ones(4),))
    for _ in range(30):
        timed_block(timed, [sample] * 5, CpuTimer(), None, {}, ring=CopyRing(), lead=True)
    waker = Worker(_waker, name="waker", timeout_s=20, group=group)
    group.suspect(waker)
    waker.ready()

    def time_many() -> None:
        for _ in range(200):
            timed_block(timed, [sample] * 5, CpuTimer(), None, {}, ring=CopyRing(), lead=True)

    try:
        with pytest.raises(InterferenceError, match="woke") as raised:
            time_many()
        assert raised.value.culprit is waker
    finally:
        for worker in (timed, idle, waker):
            worker.close()


def _claims_waits(say: Any) -> Any:
    """A candidate that says each block's threads waited 5 ms for a CPU (so it is timed again)."""
    import aitune_fp.profiling.serving as serving

    serving.waited_on_others_s = lambda *args: 0.005
    return (lambda x: _busy(0.002) or x + 1), {}


def test_a_wait_the_kernel_did_not_count_is_interference() -> None:
    """A block a worker says waited is timed again on its word: one that claims waits for its
    slow blocks keeps its fast ones. The kernel's own count of its threads' run-queue wait
    around the block bounds the claim; an honest worker's stays within it."""
    sample = Sample((torch.ones(4),))
    liar = Worker(_claims_waits, name="liar", timeout_s=20)
    honest = _worker(lambda x: _busy(0.002) or x + 1)
    liar.ready()
    honest.ready()
    try:
        for _ in range(20):
            timed_block(honest, [sample] * 5, CpuTimer(), None, {}, ring=CopyRing(), lead=True)
        with pytest.raises(InterferenceError, match="kernel") as raised:
            timed_block(liar, [sample] * 5, CpuTimer(), None, {}, ring=CopyRing(), lead=True)
        assert raised.value.culprit is liar
    finally:
        liar.close()
        honest.close()


def test_each_arm_is_timed_alone_eager_included() -> None:
    """Before a timed call every other worker of the group has gone idle, eager's too.

    Eager is never a suspect (its CPU time is not blamed on anyone), but a candidate timed while
    eager's worker still digests its last output would run beside it, while eager's own calls,
    made after the suspects settle, never do: an identical candidate read ~3 % faster.
    """
    group = WorkerGroup()
    eager = _worker(lambda x: torch.ones(2_000_000) * x.sum(), group=group)  # ~15 ms to digest
    candidate = _worker(lambda x: x + 1, group=group)
    group.suspect(candidate)
    eager.ready()
    candidate.ready()
    sample = Sample((torch.ones(4),))
    busy_after = []
    for _ in range(5):
        timed_block(eager, [sample], CpuTimer(), "baseline", {}, ring=CopyRing(), lead=False)
        timed_block(candidate, [sample], CpuTimer(), "candidate", {}, ring=CopyRing(), lead=False)
        before = eager.cpu_ns()
        time.sleep(0.005)
        busy_after.append(eager.cpu_ns() - before)
    assert max(busy_after) < 1_000_000, busy_after  # eager was done before the candidate's clock
    assert group.tally(candidate).suffered_ns == 0  # and eager's CPU time is blamed on no one
    for worker in (eager, candidate):
        worker.close()


@pytest.mark.parametrize(("runnable", "spins"), [(1, True), (2, False)], ids=["core-spare", "busy"])
def test_the_judge_spins_on_a_timed_answer_only_with_a_core_spare(
    runnable: int, spins: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Waking a sleeping judge costs 50-400 us on a virtual machine, enough to triple the noise
    of a 1 ms call: on a timed call's answer the judge spins for up to ``SPIN_S``, but only with
    a core spare beside the worker (``runnable``: the tasks the kernel reports runnable, the
    judge included; 2 cores here), or it would slow the worker it times."""
    import aitune_fp.profiling.interference as interference
    import aitune_fp.profiling.workers as workers

    monkeypatch.setattr(interference, "runnable_tasks", lambda: runnable)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    worker = _worker(lambda x: x)
    worker.ready()
    asked: list[float] = []
    receive = worker._receive
    monkeypatch.setattr(
        worker, "_receive", lambda spin_s=0.0, calls=1: asked.append(spin_s) or receive(calls=calls)
    )
    sample = Sample((torch.ones(4),))
    for _ in range(3):
        worker.watch(during=lambda: worker.prepare_block([sample], lead=False))
        asked.clear()
        worker.run_block(1)
        assert asked == [workers.SPIN_S if spins else 0.0]
    worker.close()


def test_a_spin_on_an_answer_ends_after_spin_s_and_the_wait_sleeps() -> None:
    """A call longer than ``SPIN_S``: the judge spins that long, then sleeps (its CPU time stays
    near ``SPIN_S`` a call; a busy machine only lowers it)."""
    import aitune_fp.profiling.workers as workers

    worker = _worker(lambda x: time.sleep(0.1) or x)
    worker.ready()
    sample = Sample((torch.ones(4),))
    cpu = 0.0
    for _ in range(3):
        worker.prepare_block([sample], lead=False)
        worker.spins = True
        start = time.process_time()
        worker.run_block(1)
        cpu += time.process_time() - start
    worker.close()
    assert cpu < 3 * (workers.SPIN_S + 0.01), cpu


def test_a_failure_met_while_another_arm_is_timed_is_raised_at_its_own_next_request() -> None:
    """What a block owes after its answer (its wait) is read before eager's timed call; if the
    candidate's worker raised instead, the error is its own, raised at its next request, not lost
    or eager's. Its digests are made inside its block: a failure there is that block's."""

    def make(say: Any) -> Any:
        import aitune_fp.profiling.serving as serving

        def broken(*args: Any) -> Any:
            raise RuntimeError("no digest for you")

        serving.waited_on_others_s = broken  # its own process: the judge's is untouched
        return (lambda x: x + 1), {}

    group = WorkerGroup()
    eager = _worker(lambda x: x + 1, group=group)
    candidate = Worker(make, name="broken", timeout_s=20, group=group)
    group.suspect(candidate)
    eager.ready()
    candidate.ready()
    sample = Sample((torch.ones(4),))
    call_arm(candidate, sample, "candidate")
    timed_block(
        eager, [sample], CpuTimer(), "baseline", {}, ring=CopyRing(), lead=False
    )  # settles it
    with pytest.raises(WorkerError, match="no digest for you"):
        candidate.prepare_block([sample], lead=False)
    timed_block(
        eager, [sample], CpuTimer(), "baseline", {}, ring=CopyRing(), lead=False
    )  # eager unharmed
    with pytest.raises(ProfilingError, match="no digest for you") as raised:
        timed_block(candidate, [sample], CpuTimer(), "candidate", {}, ring=CopyRing(), lead=False)
    assert raised.value.arm == "candidate"
    timed_block(eager, [sample], CpuTimer(), "baseline", {}, ring=CopyRing(), lead=False)
    for worker in (eager, candidate):
        worker.close()

    def no_digest(say: Any) -> Any:
        import aitune_fp.profiling.serving as serving

        serving.digest_of = broken_digest
        return (lambda x: x + 1), {}

    digestless = Worker(no_digest, name="digestless", timeout_s=20)
    digestless.ready()
    with pytest.raises(ProfilingError, match="no digest for you"):  # inside its block: at once
        call_arm(digestless, sample, "candidate")
    digestless.close()


def broken_digest(*args: Any) -> Any:
    """A digest step that fails (a worker's own rebinding)."""
    raise RuntimeError("no digest for you")


def test_os_state_reads_every_threads_affinity_niceness_and_scheduling() -> None:
    """Each thread's, not the main thread's alone (torch's pool is threads of their own): a
    change to another thread is named and put back; a thread that ended is passed over."""
    done = threading.Event()
    other = threading.Thread(target=done.wait, name="other")
    other.start()
    try:
        tid = other.native_id
        assert tid is not None
        before = os_state(os.getpid())
        assert before[os.getpid()] == (
            frozenset(os.sched_getaffinity(0)),
            os.getpriority(os.PRIO_PROCESS, 0),
            os.sched_getscheduler(0),
            os.sched_getparam(0).sched_priority,
        )
        os.sched_setaffinity(tid, {min(os.sched_getaffinity(tid))})
        os.sched_setscheduler(tid, os.SCHED_BATCH, os.sched_param(0))
        (text,) = os_state_changes(before, os_state(os.getpid()))
        assert f"thread {tid}" in text and "CPU affinity" in text, text
        assert "scheduling policy: SCHED_OTHER -> SCHED_BATCH" in text, text
        restore_os_state(before, os.getpid())
        assert os_state_changes(before, os_state(os.getpid())) == []
    finally:
        done.set()
        other.join()
    restore_os_state(before, os.getpid())  # its thread is gone: nothing to put back


def test_a_timed_answer_binds_the_output_that_a_check_reads_afterwards() -> None:
    """A worker that answers before computing and computes when asked is caught at the check."""
    import aitune_fp.profiling.transport as transport

    def make(say: Any) -> Any:
        import aitune_fp.profiling.serving as serving

        real = transport.digest_of
        state = {"calls": 0}

        def lazy(output: Any, nonce: bytes) -> bytes:  # answers with another output's digest
            state["calls"] += 1
            return real(torch.zeros(2), nonce)

        serving.digest_of = lazy  # its own process: the judge's function is untouched
        return (lambda x: x + state["calls"]), {}

    worker = Worker(make, name="lazy", timeout_s=20)
    worker.ready()
    worker.prepare_block([Sample((torch.ones(2),))], lead=False)
    worker.run_block(1)
    with pytest.raises(WorkerError, match="other than the one it answered"):
        worker.output()
    worker.close()
    honest = _worker(lambda x: x * 3)
    honest.ready()
    honest.prepare_block([Sample((torch.ones(2),))], lead=False)
    honest.run_block(1)
    assert torch.equal(honest.output(), torch.full((2,), 3.0))
    honest.close()


def test_work_a_worker_defers_past_its_timed_answer_is_timed_or_caught() -> None:
    """A candidate whose calls return an empty output at once, then compute the real one in
    the worker's digest step (its own rebinding), can answer a timed block before doing its work.
    That work is timed: each output's digest is made before the answer, inside the clock (an
    independent probe read 35-80x this way)."""

    def make(say: Any) -> Any:
        import aitune_fp.profiling.serving as serving
        import aitune_fp.profiling.transport as transport

        pending: list[torch.Tensor] = []

        def fill() -> None:
            for out in pending:
                time.sleep(0.05)  # the real work, 50 ms a call
                out.fill_(3.0)
            pending.clear()

        def call(x: torch.Tensor) -> torch.Tensor:
            out = torch.empty_like(x)
            pending.append(out)
            return out

        real_digest, real_dump = transport.digest_of, transport.dump_output
        serving.digest_of = lambda out, *a: (fill(), real_digest(out, *a))[1]
        serving.dump_output = lambda out: (fill(), real_dump(out))[1]
        return call, {}

    worker = Worker(make, name="deferring", timeout_s=20)
    worker.ready()
    sample, checked = Sample((torch.ones(8),)), []
    try:
        timed = timed_block(
            worker, [sample] * 3, CpuTimer(), None, {1: checked.append}, ring=CopyRing(), lead=False
        )
    finally:
        worker.close()
    assert timed.wall_s >= 0.045, timed  # its work inside the clock
    assert torch.equal(checked[0], torch.full((8,), 3.0))


def test_a_digest_inside_the_clock_reads_every_value_of_an_output() -> None:
    """A candidate whose timed calls return a lazy output, and whose digest step computes only
    the values a digest of a few places reads, would time a fraction of the work (an
    independent probe read an LM head 14.6x): the digest reads every value, so the whole output
    is made inside the clock. Its cost is the output's size in one vectorised pass."""
    from aitune_fp.profiling.transport import digest_of

    nonce = os.urandom(8)
    out = torch.randn(8, 4096)
    sent = digest_of(out, nonce)
    assert digest_of(out.clone().t().contiguous().t(), nonce) == sent  # its values, any layout
    for i in range(0, out.numel(), 997):  # one value anywhere changes it, by one bit too
        wrong = out.clone().reshape(-1)
        wrong[i] = torch.nextafter(wrong[i], torch.tensor(1e9))
        assert digest_of(wrong.reshape(8, 4096), nonce) != sent, i
    assert digest_of(out, os.urandom(8)) != sent  # keyed by the block's nonce
    assert digest_of(out.reshape(4096, 8), nonce) != sent  # its shape
    for dtype in (torch.bfloat16, torch.int64, torch.bool, torch.complex64, torch.uint8):
        odd = torch.ones(3, 5, dtype=dtype)  # 2-byte and odd sizes too
        assert digest_of(odd, nonce) == digest_of(odd.clone(), nonce)


def test_a_compile_in_a_worker_does_not_wait_on_the_parents_compile_threads() -> None:
    """torch.compile's C++ builds go to a thread pool; a parent that used it forks a child
    holding the pool but none of its threads. A worker must not wait on it forever (a cold
    inductor cache hung README's compile-tier example this way)."""
    from torch._inductor.async_compile import AsyncCompile

    if AsyncCompile.pool().submit(lambda: 1).result(timeout=30) != 1:  # the parent's threads
        pytest.fail("the parent's compile pool did not run")

    def make(say: Any) -> tuple[Any, dict[str, Any]]:
        done = AsyncCompile.pool().submit(lambda: 2).result()  # what inductor's build does
        return (lambda x: x), {"done": done}

    worker = Worker(make, name="compiles", timeout_s=10.0)
    try:
        assert worker.ready() == {"done": 2}
    finally:
        worker.close()


class _Neg:
    """A recipe a fork-server worker can be sent (a lambda does not pickle)."""

    def __call__(self, say: Any) -> tuple[Any, dict[str, Any]]:
        return torch.neg, {}


@pytest.mark.parametrize("threads", [None, 2], ids=["fork", "forkserver"])
def test_the_judge_runs_one_thread_while_workers_are_timed_and_records_theirs(
    threads: int | None,
) -> None:
    """Workers run their own teams; a team here, spinning after a spot check, took their cores."""
    from aitune_fp.profiling.interleaved import InterleavedRun

    group = WorkerGroup()
    arms = [Worker(_Neg(), name="w", timeout_s=60, group=group, threads=threads) for _ in "ab"]
    group.suspect(arms[1])
    for arm in arms:
        arm.ready()
    seen: list[int] = []
    here = torch.get_num_threads()
    try:
        with (
            torch.no_grad(),
            InterleavedRun(
                *arms,
                Sample((torch.ones(4),)),
                threads=3,
                spot_check=lambda _out: seen.append(torch.get_num_threads()),
                spot_rate=1.0,
            ) as run,
        ):
            run.extend(2)
            timings = run.timings()
    finally:
        for arm in arms:
            arm.close()
    assert seen and set(seen) == {1}
    assert timings.threads == (threads or 1)  # what the arms ran, not the judge's one
    assert torch.get_num_threads() == here  # put back


def _on_a_slow_device(say: Any) -> tuple[Any, dict[str, Any]]:
    """In the worker: a device whose queued work takes 50 ms to end (``synchronize`` waits)."""
    torch.cuda.is_initialized = lambda: True  # type: ignore[assignment]
    torch.cuda.synchronize = lambda device=None: time.sleep(0.05)  # type: ignore[assignment]
    return torch.neg, {}


@pytest.mark.parametrize("block", [False, True], ids=["call", "block"])
def test_a_timed_call_on_a_device_lasts_until_its_queued_work_ends(block: bool) -> None:
    """A worker answers once its kernels ended: the judge's clock stops at the answer."""
    worker = Worker(_on_a_slow_device, name="w", timeout_s=20)
    try:
        worker.ready()
        sample = Sample((torch.ones(3),))
        if block:
            wall, _, _ = timed_block(
                worker, [sample] * 2, CpuTimer(), "candidate", {}, ring=CopyRing(), lead=False
            )
            wall *= 2  # the block's two calls share one wait
        else:
            wall, _, _ = timed_block(
                worker, [sample], CpuTimer(), "candidate", {}, ring=CopyRing(), lead=False
            )
    finally:
        worker.close()
    assert 0.05 <= wall < 0.1  # its own work's wait, not the copies' (made before the clock)


def test_the_fork_server_starts_ahead_for_cpu_workers_of_several_threads_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from aitune_fp.cli import tune
    from aitune_fp.cli.tune import forks_from_server

    assert forks_from_server(None, "auto", 2) and forks_from_server("process", "cpu", 4)
    assert not forks_from_server(None, "cpu", 1)  # one thread: forked from this process
    # without --threads, torch's own count: OMP_NUM_THREADS where set, else the usable CPUs
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert not forks_from_server(None, "auto", None)
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert forks_from_server(None, "auto", None)
    monkeypatch.delenv("OMP_NUM_THREADS")
    for cpus in (1, 2):
        monkeypatch.setattr(tune, "usable_cpus", lambda cpus=cpus: cpus)
        assert forks_from_server(None, "auto", None) is (cpus > 1)
    assert not forks_from_server("in_process", "cpu", 2)
    assert not forks_from_server(None, "cuda:0", 2)


def test_a_fork_server_started_ahead_is_the_one_workers_come_from() -> None:
    from aitune_fp.profiling.serving import fork_server_pid, start_fork_server

    start_fork_server()
    server = fork_server_pid()
    assert server is not None
    from aitune_fp.pipeline.workers import EagerRecipe

    worker = Worker(EagerRecipe(torch.nn.Identity()), name="w", timeout_s=60, threads=2)
    try:
        worker.ready()
        with open(f"/proc/{worker.pid}/stat", "rb") as stat:
            parent = int(stat.read().rsplit(b")", 1)[1].split()[1])
        assert parent == server and fork_server_pid() == server
    finally:
        worker.close()


def test_the_fork_server_has_preloaded_once_it_is_ready() -> None:
    """Eager's up-front calls are timed once it is: its preload importing torch beside them made
    them read 4-6x slow on 2 cores (the budget line's 5.7 ms a call against 1 ms in blocks)."""
    import subprocess
    import sys

    code = (
        "import time\n"
        "from aitune_fp.profiling.serving import fork_server_pid, fork_server_ready, "
        "start_fork_server\n"
        "from aitune_fp.profiling.interference import cpu_clock\n"
        "start_fork_server()\n"
        "fork_server_ready()\n"
        "clock = cpu_clock(fork_server_pid())\n"
        "before = time.clock_gettime_ns(clock)\n"
        "time.sleep(0.3)\n"
        "print(time.clock_gettime_ns(clock) - before)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert int(done.stdout.strip().splitlines()[-1]) < 30_000_000  # idle: its imports are done


class _AlwaysWaiting:
    """A worker's thread clocks as if its threads waited for a CPU all the time, running none:
    the wait a window reports is its length."""

    def refresh(self) -> None:
        return None

    def read(self) -> tuple[int, int, int]:
        now = time.perf_counter_ns()
        return (now, 0, now)


def _waiting_sleeper(say: Any) -> tuple[Any, dict[str, Any]]:
    import aitune_fp.profiling.serving as serving

    serving.ThreadClocks = _AlwaysWaiting  # type: ignore[misc,assignment]

    def call(x: torch.Tensor) -> torch.Tensor:
        time.sleep(0.005)
        return x

    return call, {}


def test_a_blocks_wait_for_a_cpu_is_read_over_the_block_alone() -> None:
    """The wait a worker reports is its threads' from the block's first call to its answer:
    not the judge's settling of the others before the clock, nor its reading after the answer
    (a spinning thread waited there for the judge's own work, and the block was timed again)."""
    worker = Worker(_waiting_sleeper, name="sleeper", timeout_s=20)
    try:
        worker.ready()
        batch = Sample((torch.zeros(2),))
        for pause in (0.3, 0.0):
            worker.prepare_block([batch] * 3, lead=False)
            time.sleep(pause)  # the judge settles the others, untimed
            start = time.perf_counter()
            worker.run_block(3)
            block = time.perf_counter() - start
            time.sleep(pause)  # the judge reads the answer
            waited = worker.waited_s()
            assert waited is not None and 0.015 <= waited <= block, (pause, waited, block)
    finally:
        worker.close()


def _makes_a_lock(say: Any) -> tuple[Any, dict[str, Any]]:
    import multiprocessing

    lock = multiprocessing.RLock()  # as tqdm's write lock, made by a cold compile's FX pass
    return (lambda: None), {"named": lock._semlock.name}  # type: ignore[attr-defined]


@pytest.mark.parametrize("threads", [None, 2], ids=["forked", "fork-server"])
def test_a_lock_a_worker_makes_is_nothing_the_users_resource_tracker_holds(
    threads: int | None,
) -> None:
    """A worker is killed, so a named semaphore it made is never unregistered: the user's
    resource tracker, which fork-server workers share, said at exit that one leaked. A worker's
    locks are its own process's (unnamed), as in a forked worker."""
    worker = Worker(_makes_a_lock, name="w", timeout_s=60, threads=threads)
    try:
        assert worker.ready() == {"named": None}
    finally:
        worker.close()


def _leaves_its_group(say: Any) -> tuple[Any, dict[str, Any]]:
    """Start a process in a session of its own (``start_new_session``), and one that asks for a
    group of its own (``setpgid``), as a daemon would; say their process ids."""
    import subprocess
    import sys

    spin = "import os, time\ntry:\n    os.setpgid(0, 0)\nexcept OSError:\n    pass\ntime.sleep(600)"
    alone = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True
    )
    grouped = subprocess.Popen([sys.executable, "-c", spin])
    time.sleep(0.5)  # the second has asked by now
    return (lambda x: x), {"started": [alone.pid, grouped.pid]}


@pytest.mark.parametrize("threads", [None, 2], ids=["fork", "forkserver"])
def test_what_a_worker_starts_stays_in_its_group_and_dies_with_it(threads: int | None) -> None:
    """A process that left the worker's process group was out of the CPU accounting that finds
    interference and outlived the worker's close: ``setsid`` and ``setpgid`` are answered there
    without effect (Linux), so each stays in the group, counted and killed with the worker."""
    worker = Worker(_leaves_its_group, name="w", timeout_s=60, threads=threads)
    started = worker.ready()["started"]
    try:
        assert [os.getpgid(pid) for pid in started] == [worker.pid, worker.pid]
    finally:
        worker.close()
    deadline = time.monotonic() + 5
    while any(_alive(pid) for pid in started) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(_alive(pid) for pid in started), started


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, reaped by no one here, does not)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return stat.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except OSError:
        return False


def test_the_group_filter_is_named_where_it_cannot_be_installed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On a machine without a seccomp table the worker runs all the same, and the reason names it
    (nothing is installed here: this process is the test runner's)."""
    import platform

    from aitune_fp.profiling import confine

    monkeypatch.setattr(platform, "machine", lambda: "sparc64")
    reason = confine.confine()
    assert reason is not None and "sparc64" in reason
    assert not confine._installed


def _holds(say: Any) -> tuple[Any, dict[str, Any]]:
    """What each of this process's file descriptors points at."""
    held = []
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            held.append(os.readlink(f"/proc/self/fd/{fd}"))
    return (lambda x: x), {"held": held}


@pytest.mark.parametrize("threads", [None, 2], ids=["fork", "forkserver"])
def test_a_worker_holds_none_of_its_parents_files(tmp_path: Path, threads: int | None) -> None:
    """A forked worker inherited every file of the user's process: another worker's connection
    (a candidate could send eager's worker requests while it is timed), the JSON log (forged
    events). Each one is blank (``/dev/null``) there; its own connection and stdio stay."""
    other = _worker(lambda x: x)
    other.ready()
    assert other._conn is not None
    theirs = os.readlink(f"/proc/self/fd/{other._conn.fileno()}")
    with open(tmp_path / "events.jsonl", "w") as log:
        worker = Worker(_holds, name="w", timeout_s=60, threads=threads)
        try:
            held = worker.ready()["held"]
        finally:
            worker.close()
            other.close()
    assert log.name not in held and theirs not in held, held


def _through_a_fork_server(say: Any) -> tuple[Any, dict[str, Any]]:
    """Start a process through multiprocessing's fork server, as the parent had it running."""
    import multiprocessing

    process = multiprocessing.get_context("forkserver").Process(target=time.sleep, args=(600,))
    try:
        process.start()
    except OSError as exc:  # a server of its own needs a Unix socket (Linux: refused)
        return (lambda x: x), {"refused": exc.errno}
    return (lambda x: x), {"started": process.pid}


def test_a_forked_worker_cannot_start_a_process_through_the_users_fork_server() -> None:
    """A forked worker knew the address of the user's fork server (the tune's own): a process
    started through it was the server's child, outside the worker's group. The worker forgets it
    and starts a server of its own, inside (Linux: it cannot, having no Unix socket)."""
    from aitune_fp.profiling.serving import fork_server_pid, start_fork_server

    start_fork_server()
    assert fork_server_pid() is not None
    worker = Worker(_through_a_fork_server, name="w", timeout_s=60)
    said = worker.ready()
    try:
        if "refused" in said:  # where the worker has no Unix socket, it has no server either
            assert said["refused"] == errno.EAFNOSUPPORT
            return
        started = said["started"]
        assert os.getpgid(started) == worker.pid
    finally:
        worker.close()
    deadline = time.monotonic() + 5
    while _alive(started) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(started)


def _asks_a_server(say: Any) -> tuple[Any, dict[str, Any]]:
    """Ask a fork server of this user, through its socket, for a process that sleeps: what the
    server starts is its child, in its group, out of the worker's reach and accounting."""
    import io
    import socket
    from multiprocessing import reduction

    class Sleeps:
        def __reduce__(self) -> tuple[Any, tuple[str]]:
            return (exec, ("import time; time.sleep(600)",))

    with open("/proc/net/unix") as table:  # every bound socket's path, wherever it lies
        paths = {line.split()[-1] for line in table if "/listener-" in line}
    answers = []
    for path in sorted(paths):
        try:
            server = socket.socket(socket.AF_UNIX)
        except OSError as exc:
            return (lambda x: x), {"refused": exc.errno}
        try:
            server.connect(path)
        except OSError:
            continue
        child_r, to_child = os.pipe()
        from_child, child_w = os.pipe()
        reduction.sendfds(server, [child_r, child_w, child_r, child_r])
        server.close()
        data = io.BytesIO()
        reduction.dump({}, data)
        reduction.dump(Sleeps(), data)
        os.write(to_child, data.getvalue())
        answers.append(int.from_bytes(os.read(from_child, 4), "little", signed=True))
    return (lambda x: x), {"started": answers}


def test_a_worker_cannot_ask_the_fork_server_for_a_process() -> None:
    """Multiprocessing's fork server forks whatever any process of the user asks through its
    socket (Python 3.11 asks for no key): a worker found it under /tmp and had it start a process
    outside its group. A worker cannot open a Unix-domain socket (Linux: refused as an address
    family not supported), so no local server can be asked to start one for it."""
    from aitune_fp.profiling.serving import start_fork_server

    start_fork_server()
    worker = Worker(_asks_a_server, name="w", timeout_s=60, threads=2)
    try:
        said = worker.ready()
    finally:
        worker.close()
    for pid in said.get("started", []):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    assert said == {"refused": errno.EAFNOSUPPORT}, said


def _reads_another(pid: int, say: Any) -> tuple[Any, dict[str, Any]]:
    """Try to read another worker's memory and to trace it."""
    import ctypes

    tried: dict[str, Any] = {}
    try:
        with open(f"/proc/{pid}/mem", "rb"):
            tried["mem"] = "opened"
    except OSError as exc:
        tried["mem"] = exc.errno
    libc = ctypes.CDLL(None, use_errno=True)
    tried["ptrace"] = "attached" if libc.ptrace(16, pid, 0, 0) == 0 else ctypes.get_errno()
    return (lambda x: x), tried


@pytest.mark.parametrize("threads", [None, 2], ids=["fork", "forkserver"])
def test_a_worker_cannot_trace_or_read_another_workers_memory(threads: int | None) -> None:
    """Workers run as the user, and a process of the user may trace another or write its memory
    (``/proc/PID/mem``) where the kernel has no Yama: a candidate could have rewritten eager's
    worker. A worker is not dumpable, which the kernel requires of a process traced by a peer."""
    import functools

    eager = Worker(_holds, name="eager", timeout_s=60, threads=threads)
    eager.ready()
    worker = Worker(
        functools.partial(_reads_another, eager.pid), name="w", timeout_s=60, threads=threads
    )
    try:
        tried = worker.ready()
    finally:
        worker.close()
        eager.close()
    assert tried == {"mem": errno.EACCES, "ptrace": errno.EPERM}, tried


@pytest.mark.parametrize("stopped", ["judge", "eager"])
def test_a_block_while_the_judge_or_eager_was_stopped_is_timed_again(stopped: str) -> None:
    """Another process (a candidate's thread) that stops the judge, or eager's worker, for a
    few milliseconds now and then, only while eager is timed, read an identical candidate 1.2x
    faster, accepted, waking too rarely for the wake-up rule. A block during which either was
    stopped (a ``SIGCONT`` seen by it) is disturbed: timed again, like one that waited for a CPU.
    """
    import subprocess
    import sys

    from aitune_fp.profiling import stops
    from aitune_fp.profiling.layout import disturbed

    eager = _worker(lambda x: time.sleep(0.005) or x)
    eager.ready()
    pid = os.getpid() if stopped == "judge" else eager.pid
    stop = f"import os, signal, time; time.sleep(0.1); os.kill({pid}, signal.SIGSTOP); "
    stop += f"time.sleep(0.05); os.kill({pid}, signal.SIGCONT)"
    sample = Sample((torch.ones(4),))
    slow: list[Any] = []
    try:
        with stops.counting():
            for _ in range(5):  # a stop between two blocks delays none: until one lands in one
                stopper = subprocess.Popen([sys.executable, "-c", stop])
                timed = []
                while stopper.poll() is None or not timed:
                    timed.append(
                        timed_block(
                            eager, [sample] * 4, CpuTimer(), None, {}, ring=CopyRing(), lead=False
                        )
                    )
                slow = [t for t in timed if t.wall_s * 4 > 0.04]  # 20 ms blocks: a stop in it
                if slow:
                    break
    finally:
        eager.close()
    assert slow and all(disturbed(t.waited_s, t.wall_s * 4) for t in slow), slow
