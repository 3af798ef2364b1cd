"""Candidates in processes of their own until one is chosen, then rebuilt and rechecked here."""

from __future__ import annotations

import contextlib
import copy
import os
import random
import sys
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import attrs
import torch

from aitune_fp.backends.base import BUILD_LOG_NAME, ArtefactChangedError, artefact_digest
from aitune_fp.core.results import IsolationMode
from aitune_fp.correctness.tolerances import Tolerances
from aitune_fp.inputs import as_sample, copy_sample
from aitune_fp.isolation.flags import settings_changed, settings_now
from aitune_fp.isolation.heldout import heldout_samples
from aitune_fp.isolation.hygiene import (
    Hygiene,
    OsState,
    os_state,
    os_state_changes,
    restore_os_state,
)
from aitune_fp.isolation.snapshot import torch_as_is
from aitune_fp.pipeline.stages import (
    Arena,
    build_failure,
    build_here,
    call_deadline,
    check_closeness,
    checked_inputs,
    folder_of,
    held_out,
    spot_check_of,
)
from aitune_fp.pipeline.values import (
    CandidateOutcome,
    ProcessChangedError,
    TuneTarget,
    ValidationOptions,
    candidate_folder,
    declared_dtype,
    describe,
    failure_reason,
    infer_of,
)
from aitune_fp.pipeline.vetting import per_call_step
from aitune_fp.profiling.calls import SpotCheckError
from aitune_fp.profiling.interference import InterferenceError, WorkerGroup
from aitune_fp.profiling.placement import moving
from aitune_fp.profiling.recipe import UnpicklableError
from aitune_fp.profiling.serving import fork_server_pid, fork_unavailable
from aitune_fp.profiling.timers import ReportedClock
from aitune_fp.profiling.watchdog import progress
from aitune_fp.profiling.workers import Worker

#: Types an output may be read back as without naming them (``torch.load``'s own list).
_PLAIN = (torch.Tensor, tuple, list, dict, str, bytes, int, float, bool, type(None), torch.Size)


def isolation_of(
    options: ValidationOptions | None, target: TuneTarget
) -> tuple[IsolationMode, str | None]:
    """Where this tune's candidates run, and why in process when they do not get workers."""
    if options is None or not options.enabled:
        return "in_process", "validation is off: nothing is timed"
    if options.isolation == "in_process":
        return "in_process", options.in_process_why or "asked for (isolation='in_process')"
    if options.timer is not None and not isinstance(options.timer, ReportedClock):
        return "in_process", (
            "an injected timer that cannot time another process (it has no spend_ns: "
            "aitune_fp.profiling.timers.ReportedClock)"
        )
    device = torch.device(target.device)
    if device.type == "cpu":
        return "process", None
    if device.type != "cuda":
        return "in_process", f"device {device}: workers run on CPU and CUDA only"
    if options.isolation != "process":
        return (
            "in_process",
            "CUDA workers are not yet proven on a GPU: isolation='process' runs them",
        )
    if options.profiling_config.clock == "device":
        return "in_process", "clock='device' reads CUDA events, which time this process's work only"
    short = device_short(torch.cuda.mem_get_info(device)[0], model_bytes(target.module))
    return ("process", None) if short is None else ("in_process", short)


#: Device memory a CUDA worker needs besides its copy of the model: its context and workspace.
WORKER_DEVICE_BYTES = 1 << 30


def device_short(free: int, model: int) -> str | None:
    """Why two workers (eager's and a candidate's) do not fit in ``free`` bytes; None if they do.

    Each holds a copy of the model (``model`` bytes) and a context of its own.
    """
    need = 2 * (model + WORKER_DEVICE_BYTES)
    if free >= need:
        return None
    return (
        f"device memory: {free / 2**30:.1f} GiB free, and two workers need about "
        f"{need / 2**30:.1f} GiB (a copy of the model and a context each)"
    )


def model_bytes(module: torch.nn.Module) -> int:
    """Bytes of ``module``'s parameters and buffers (each storage once)."""
    seen = {
        t.untyped_storage().data_ptr(): t.untyped_storage().nbytes()
        for t in (*module.parameters(), *module.buffers())
    }
    return sum(seen.values())


def worker_threads(threads: int) -> int | None:
    """None forks a worker of one thread; else the fork server's (a fork has no OpenMP team)."""
    return None if threads == 1 and fork_unavailable() is None else threads


@attrs.frozen
class EagerRecipe:
    """Eager's worker: call the baseline it is sent (or, forked, inherits).

    The baseline as built on the user's model, as a candidate's is: not eager's copy here,
    which may run slower or faster than the model for where its weights sit.
    """

    baseline: Any

    def __call__(self, say: Callable[[Mapping[str, Any]], None]) -> tuple[Any, dict[str, Any]]:
        """Eager's callable, and no facts."""
        return moving(infer_of(self.baseline), self.baseline), {}


@attrs.frozen
class CandidateRecipe:
    """A candidate's worker: build ``backend`` on ``target`` (the driver's ``build``, if any)."""

    target: TuneTarget
    backend: Any
    build: Callable[[Any], Any] | None

    def __call__(self, say: Callable[[Mapping[str, Any]], None]) -> tuple[Any, dict[str, Any]]:
        """Say the description and folder, build, then the built candidate and its facts."""
        description = describe(self.backend)
        folder = candidate_folder(self.target.cache_dir, self.backend, description)
        say({"description": description, "folder": str(folder)})
        before = settings_now(), os_state()
        record = getattr(self.build, "record", None)  # what the build teaches its driver
        taught: list[Any] = []
        try:
            with contextlib.nullcontext(taught) if record is None else record() as taught:
                built = build_here(self.target, self.backend, self.build)
        finally:  # taught once the block closed, failed or not
            if record is not None:
                say({"taught": taught})
        async_compile = sys.modules.get("torch._inductor.async_compile")
        if async_compile is not None:  # its pool's semaphores would be reported leaked
            with contextlib.suppress(Exception):
                async_compile.shutdown_compile_workers()
        changed = settings_changed(before[0], settings_now())
        changed += os_state_changes(before[1], os_state())
        if changed:
            raise ProcessChangedError(
                f"the build of {description} changed process-wide settings that its speed and "
                f"outputs would rest on, and that would change every other model in your "
                f"process: {'; '.join(changed)}"
            )
        own = getattr(built, "tolerances", None)
        tolerances = attrs.asdict(own) if isinstance(own, Tolerances) else None
        artefact = getattr(built, "artefact", None)
        digest = artefact_digest(artefact()) if callable(artefact) else ""
        facts = {"dtype": declared_dtype(built), "tolerances": tolerances, "artefact": digest}
        return infer_of(built), facts


def output_types(references: tuple[Any, ...]) -> frozenset[type]:
    """The container types eager's outputs use: the only ones a worker's output may hold."""
    found: set[type] = set()
    seen: set[int] = set()

    def walk(value: Any) -> None:
        if id(value) in seen or isinstance(value, torch.Tensor):
            return
        seen.add(id(value))
        if type(value) not in _PLAIN:
            found.add(type(value))
        if isinstance(value, (tuple, list)):
            items: Any = value
        elif isinstance(value, Mapping):
            items = value.values()
        else:  # an object of its own (a cache of layers): what it holds
            items = getattr(value, "__dict__", {}).values()
        for item in items:
            walk(item)

    for reference in references:
        walk(reference)
    return frozenset(found)


@attrs.define(eq=False, slots=False)
class WorkerBackend:
    """A candidate that lives in its worker: called there, timed from here, closed with it.

    ``blueprint`` and ``build`` rebuild it; ``artefact``: the digest of what its build saved
    ("": none), loaded by :func:`adopt`.
    """

    worker: Worker
    description: str
    blueprint: Any
    build: Callable[[Any], Any] | None
    dtype: torch.dtype | None
    tolerances: Tolerances | None
    artefact: str = ""

    @property
    def infer(self) -> Worker:
        """The callable the pipeline calls and times: the worker."""
        return self.worker

    @property
    def is_active(self) -> bool:
        """Whether the worker still runs."""
        return self.worker.alive

    def describe(self) -> str:
        """The description the candidate gave in its worker."""
        return self.description

    def activate(self) -> None:
        """Nothing: a worker's candidate is active while its worker runs (adoption activates)."""

    def deactivate(self) -> None:
        """Close the worker (and everything it started)."""
        self.worker.close()


def _classify(exc: BaseException) -> str | None:
    """In the worker: the stage a build's exception belongs to."""
    stage: str = build_failure(exc)[0]
    return stage


@attrs.frozen
class EagerStart:
    """Eager's worker (None: it could not start, ``failed`` says why) and the processes' states.

    ``os_states``: each thread's affinity, niceness and scheduling of this process, eager's
    worker and the fork server.
    """

    worker: Worker | None
    os_states: dict[int, OsState] = attrs.field(factory=dict)
    failed: str | None = None


def start_eager(arena: Arena, group: WorkerGroup) -> EagerStart:
    """Start eager's worker (before any candidate ran) and read back what outputs may hold."""
    config, opened = arena.config, arena.opened
    assert config.threads is not None and opened is not None
    try:
        worker = Worker(
            EagerRecipe(opened.baseline),
            name="eager",
            # its start: from the fork server, a fresh interpreter loads torch first (seconds
            # on a loaded machine), bounded as a candidate's build is
            timeout_s=max(config.max_seconds + config.hang_grace_s, config.build_timeout_s),
            group=group,
            allowed=output_types(opened.references),
            threads=worker_threads(config.threads),
            # the injected clock workers report their calls' time on (a test's), if any
            clock=arena.clock if isinstance(arena.clock, ReportedClock) else None,
        )
        worker.ready()
    except Exception as exc:
        return EagerStart(None, failed=f"eager's worker failed: {exc}")
    worker.timeout_s, worker.deadline_note = call_deadline(config, arena.latencies)
    server = fork_server_pid() if worker.threads > 1 else None  # later workers' parent
    pids = [os.getpid(), worker.pid, *([] if server is None else [server])]
    return EagerStart(worker, {pid: os_state(pid) for pid in pids})


def _os_changed(os_states: dict[int, OsState]) -> str | None:
    """An outside change to a thread of ours or eager's worker (put back); None if none.

    A thread born since is held to the niceness and scheduling of the thread that starts them:
    this process's tune thread (the watchdog, torch's pool), a worker's main thread.
    """
    changed: list[str] = []
    for pid, before in os_states.items():
        try:
            now = os_state(pid)
        except OSError:
            continue
        expected = dict(before)
        born = before.get(threading.get_native_id() if pid == os.getpid() else pid)
        if born is not None:  # one born since: niceness and scheduling as the thread starting
            # them; its CPU affinity its own (OpenMP's binding pins each thread of its team)
            expected.update((t, (now[t][0], *born[1:])) for t in now.keys() - before.keys())
        texts = os_state_changes(expected, now)
        if texts:
            who = {os.getpid(): "this process", fork_server_pid(): "the fork server"}.get(
                pid, "eager's worker"
            )
            try:
                restore_os_state(expected, pid)
            except OSError as exc:
                texts.append(f"not put back ({exc})")
            changed.append(f"{who}: {'; '.join(texts)}")
        os_states[pid] = expected
    return "; ".join(changed) or None


class WorkerArm:
    """A candidate built, checked and timed in a worker of its own (an :class:`~.stages.Arm`)."""

    def __init__(
        self,
        arena: Arena,
        eager: EagerStart,
        group: WorkerGroup,
        backend: Any,
        build: Callable[[Any], Any] | None,
    ):
        """Nothing starts until :meth:`open`; ``eager``: eager's worker, started."""
        self.arena, self.eager, self.group = arena, eager, group
        self.backend, self.build_step = backend, build
        self.description = type(backend).__name__
        self.folder = folder_of(arena.target, self.description)
        self.worker: Worker | None = None

    def open(self) -> None:
        """Start the worker; it says the candidate's description and folder first."""
        eager, group = self.eager.worker, self.group
        assert eager is not None
        try:
            self.worker = worker = Worker(
                CandidateRecipe(self.arena.target, self.backend, self.build_step),
                name=self.description,
                timeout_s=self.arena.config.build_timeout_s,
                classify=_classify,
                group=group,
                allowed=eager.allowed,
                threads=worker_threads(eager.threads),
                clock=eager.clock,
            )
        except UnpicklableError:
            self.description = describe(self.backend)
            raise
        group.suspect(worker)
        said = worker.hear()
        self.description = worker.name = str(said.get("description", self.description))
        self.folder = Path(str(said.get("folder", self.folder)))

    def build(self) -> WorkerBackend:
        """Wait for the worker's build; its driver taught what it taught the worker's copy."""
        worker, arena = self.worker, self.arena
        assert worker is not None
        try:
            info = worker.ready()
        finally:  # its driver learns what its build taught the worker's copy (AITune's records)
            learn = getattr(self.build_step, "learn", None)
            if learn is not None and "taught" in worker.said:
                learn(worker.said["taught"])
        tolerances = info.get("tolerances")
        worker.timeout_s, worker.deadline_note = call_deadline(arena.config, arena.latencies)
        return WorkerBackend(
            worker,
            description=self.description,
            blueprint=self.backend,
            build=self.build_step,
            dtype=info.get("dtype") if isinstance(info.get("dtype"), torch.dtype) else None,
            tolerances=Tolerances(**tolerances) if isinstance(tolerances, dict) else None,
            artefact=str(info.get("artefact") or ""),
        )

    def abandon(self) -> None:
        """Close the worker of a build that failed."""
        if self.worker is not None:
            self.worker.close()

    def settle(self, outcome: CandidateOutcome) -> CandidateOutcome:
        """A candidate whose process changed another process (from outside) fails here."""
        changed = _os_changed(self.eager.os_states)
        if changed is None:
            return outcome
        reached = InterferenceError(f"the candidate's process changed another process: {changed}")
        log, heading = self.folder / BUILD_LOG_NAME, "Backend reached another process"
        return self.arena.failed(
            self.description, "interference", reached, log, heading=heading, built=outcome.backend
        )


def adopt(arena: Arena, chosen: WorkerBackend) -> tuple[Any | None, tuple[str, ...], str]:
    """The chosen candidate loaded (or rebuilt) here, checked on fresh inputs; None if it fails.

    Also returns what its hand-back changed in the process (put back, named even when it
    failed) and how it came back.
    """
    chosen.deactivate()
    log = folder_of(arena.target, chosen.description) / BUILD_LOG_NAME
    hygiene = Hygiene.capture()
    built: Any = None
    left: BaseException | None = None
    how = ""
    restored: tuple[str, ...] = ()
    try:
        try:
            with arena.watchdog.step(
                f"the rebuild of {chosen.description}", arena.config.build_timeout_s
            ):
                built, how = _handed_back(arena.target, chosen)
            _rechecked(arena, chosen, built)
        finally:  # what it left active comes off before any setting is read: none runs under it
            left = None if arena.guards is None else arena.guards.changed()
            with torch_as_is():
                restored = hygiene.changed()  # put back, and what could not be said so
                restored += tuple(f"not put back: {text}" for text in hygiene.restore())
                running = hygiene.rejected()
        if left is not None:
            raise left
        if running:
            raise ProcessChangedError(
                "its rebuild left threads running that nothing can stop, taking CPU from all "
                f"that follows: {'; '.join(running)}"
            )
    except KeyboardInterrupt:  # an interrupt (or a terminating signal) ends the tune
        raise
    except BaseException as exc:  # SystemExit too: the backend's, not the user's program's
        heading = "The chosen backend failed when rebuilt in this process"
        arena.failed(chosen.description, "rebuild", exc, log, heading=heading, built=built)
        also = () if left is None or left is exc else (failure_reason(left),)
        return None, also + restored, how
    return built, restored, how


def _handed_back(t: TuneTarget, chosen: WorkerBackend) -> tuple[Any, str]:
    """Load what the worker built and timed where it saved it; else build it again here."""
    if chosen.artefact and chosen.build is None:
        try:
            built = copy.deepcopy(chosen.blueprint).build(
                t.module, t.graph_spec, list(t.data), t.device, t.cache_dir, load=chosen.artefact
            )
            return built, f"loaded from {built.artefact()}, the artefact its worker built and timed"
        except ArtefactChangedError as exc:
            note = f"rebuilt: {exc}"
    else:
        note = "rebuilt: it saves no artefact" if chosen.build is None else "rebuilt by its driver"
    record = getattr(chosen.build, "record", None)  # its driver learned it already
    with contextlib.nullcontext() if record is None else record():
        return build_here(t, chosen.blueprint, chosen.build), note


def _rechecked(arena: Arena, chosen: WorkerBackend, built: Any) -> None:
    """The hand-back's checks (:func:`adopt`): unchanged process, fresh inputs, soak; raises."""
    arena.unchanged()  # before eager runs on the model it may have changed
    seed = random.SystemRandom().randrange(2**32)
    held = checked_inputs(arena, seed, arena.opened.id_limits if arena.opened else {})
    fresh = attrs.evolve(arena, heldout=lambda: held, seed=seed)  # inputs no worker saw
    with per_call_step(arena, f"the re-check of {chosen.description}"):
        check_closeness(fresh, built, f"{arena.target.name} (rebuilt in this process)")
        _soak(arena, built, arena.config.soak)
    arena.unchanged()


def _soak(arena: Arena, built: Any, n: int) -> None:
    """``n`` more calls of ``built`` on fresh held-out batches, spot-checked; a wrong one raises."""
    t = arena.target
    draw = random.SystemRandom()
    candidate, eager = infer_of(built), infer_of(arena.opened and arena.opened.eager)
    check = spot_check_of(arena.closeness, built)
    size = arena.batch_size or t.graph_spec.get_max_batch_size()
    for call in range(1, n + 1):
        seed = draw.randrange(2**32)
        held = held_out(heldout_samples, t.data, seed=seed, graph_spec=t.graph_spec) or t.data
        batch = t.graph_spec.make_batch(as_sample(held[call % len(held)]), size)
        with torch.no_grad():
            reference = copy_sample(batch).call(eager)
            output = copy_sample(batch).call(candidate)
        progress()
        try:
            check(output, reference)
        except Exception as exc:
            raise SpotCheckError(f"soak call {call} of {n}: {exc}", call=call) from exc


def soaked(arena: Arena, chosen: Any) -> bool:
    """Soak a chosen candidate in process; False (recorded, released) if it failed."""
    if not arena.config.soak:
        return True
    description = describe(chosen)
    try:
        with per_call_step(arena, f"the soak of {description}"):
            _soak(arena, chosen, arena.config.soak)
    except Exception as exc:
        log = folder_of(arena.target, description) / BUILD_LOG_NAME
        heading = "The chosen backend failed its soak"
        arena.failed(description, "correctness", exc, log, heading=heading, built=chosen)
        return False
    return True
