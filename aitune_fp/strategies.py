"""Tuning strategies (selection logic only) and the helper that builds and checks one candidate.

A strategy is any object with AITune's ``tune(module, name, graph_spec, data, device, cache_dir)``.
Candidates built through :func:`try_candidate` / :func:`build_and_validate` are checked against
eager and, inside a validating tune, gated by measurement one by one.
"""

from __future__ import annotations

import copy
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs
import torch

from aitune_fp._gate import CURRENT_GATE, Stage
from aitune_fp.backends import Backend
from aitune_fp.backends.base import BUILD_LOG_NAME, BackendBase
from aitune_fp.core.results import PerformanceValidationResult
from aitune_fp.correctness import check_correctness
from aitune_fp.inputs import GraphSpec, Sample

__all__ = [
    "CandidateOutcome",
    "FirstWinsStrategy",
    "MaxThroughputStrategy",
    "NoValidBackendError",
    "OneBackendStrategy",
    "build_and_validate",
    "try_candidate",
]

PROFILING_LOG_NAME = "profiling_error.log"


@attrs.frozen
class CandidateOutcome:
    """What happened to one candidate: the ready backend, or the stage and reason it failed."""

    description: str
    backend: Any
    result: PerformanceValidationResult | None = None
    stage: Stage | None = None
    reason: str | None = None
    log_path: str | None = None

    @property
    def ok(self) -> bool:
        """True when the candidate is built, correct and (if gated) measurably faster."""
        return self.backend is not None


class NoValidBackendError(RuntimeError):
    """No candidate was built, correct and faster; lists every candidate and why it failed."""

    def __init__(self, name: str, outcomes: Sequence[CandidateOutcome]) -> None:
        self.module_name = name
        self.outcomes = tuple(outcomes)
        lines = [f"There is no valid backend for module {name!r}:"]
        lines += [f"- {o.description}: {o.stage or 'rejected'}: {o.reason}" for o in outcomes]
        if not outcomes:
            lines.append("- no candidates were given")
        super().__init__("\n".join(lines))


def append_failure_log(path: Path, title: str, exc: BaseException) -> None:
    """Append a failure block (type, message, traceback) to ``path``, creating it if needed."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as log:
        log.write(f"\n{title}\nException type: {type(exc).__name__}\n")
        log.write(f"Exception details: {exc}\nFull traceback:\n")
        log.write("".join(traceback.format_exception(type(exc), exc, exc.__traceback__)))


def one_line(exc: BaseException) -> str:
    """An exception's message on one line (lines joined), never empty, at most 1000 chars."""
    text = " ".join(line.strip() for line in str(exc).strip().splitlines() if line.strip())
    text = text or type(exc).__name__
    return text if len(text) <= 1000 else text[:999] + "…"


def _reason(exc: BaseException) -> str:
    name = type(exc).__name__
    return f"{name}: {one_line(exc)}" if str(exc).strip() else name


def release(
    backend: Any, module: torch.nn.Module, device: torch.device | str, log_path: Path | None = None
) -> None:
    """Deactivate a rejected candidate and return the module to its device, whatever happens.

    A failing ``deactivate`` never takes the tune down: it is written to ``log_path`` (the
    candidate's log) and the module still goes back to ``device``.
    """
    try:
        if getattr(backend, "is_active", False):
            backend.deactivate()
    except Exception as exc:
        if log_path is not None:
            append_failure_log(log_path, "Releasing the rejected backend failed", exc)
    finally:
        module.to(device)


def _safe_describe(backend: Any) -> str:
    try:
        return str(backend.describe())
    except Exception:
        return type(backend).__name__


def try_candidate(
    backend: Backend,
    module: torch.nn.Module,
    name: str,
    graph_spec: GraphSpec,
    data: Sequence[Sample],
    device: torch.device | str,
    cache_dir: Path | str,
) -> CandidateOutcome:
    """Build a copy of ``backend``, check it against eager and, in a validating tune, gate it.

    Never raises for a failing candidate (``KeyboardInterrupt``/``SystemExit`` propagate): the
    outcome says at which stage it failed and why; a rejected candidate is deactivated and the
    module returned to ``device`` before this returns.
    """
    gate = CURRENT_GATE.get()
    description = _safe_describe(backend)
    root = Path(cache_dir)
    try:
        folder = root / backend.key()
    except Exception:
        folder = root / "".join(ch if ch.isalnum() else "_" for ch in description)[:80]
    log_path = folder / BUILD_LOG_NAME

    def fail(stage: Stage, exc: Exception, path: Path) -> CandidateOutcome:
        if gate is not None:
            gate.record_failure(description, stage, exc, path)
        return CandidateOutcome(
            description, None, stage=stage, reason=_reason(exc), log_path=str(path)
        )

    if gate is not None:
        gate.phase(description, "build")
    try:
        candidate = copy.deepcopy(backend)  # the blueprint stays reusable, as in AITune
        built = candidate.build(module, graph_spec, list(data), device, root)
    except Exception as exc:
        if not isinstance(backend, BackendBase):  # BackendBase writes its own build.log
            append_failure_log(log_path, "Backend build failed", exc)
        module.to(device)
        return fail("build", exc, log_path)
    if gate is not None:
        gate.phase(description, "correctness")
    try:
        check_correctness(
            built, module, graph_spec, list(data), expected_dtype=built.dtype, name=name
        )
    except Exception as exc:
        append_failure_log(log_path, "Backend correctness check failed", exc)
        release(built, module, device, log_path)
        return fail("correctness", exc, log_path)
    if gate is None:  # no validating tune: built and correct is enough
        return CandidateOutcome(description, built)
    gate.phase(description, "measure")
    try:
        result = gate.measure(built, description, folder)
    except Exception as exc:
        path = folder / PROFILING_LOG_NAME
        append_failure_log(path, "Backend profiling failed", exc)
        release(built, module, device, path)
        return fail("profiling", exc, path)
    if not result.passed:
        release(built, module, device, log_path)
        return CandidateOutcome(
            description, None, result=result, stage=None, reason=result.reason or result.verdict
        )
    gate.mark_validated(built, result)
    return CandidateOutcome(description, built, result=result)


def build_and_validate(
    backend: Backend,
    module: torch.nn.Module,
    name: str,
    graph_spec: GraphSpec,
    data: Sequence[Sample],
    device: torch.device | str,
    cache_dir: Path | str,
) -> Backend | None:
    """AITune-style helper: the ready backend, or None when it failed or was rejected."""
    outcome = try_candidate(backend, module, name, graph_spec, data, device, cache_dir)
    return outcome.backend  # type: ignore[no-any-return]


def _fallback(name: str, outcomes: Sequence[CandidateOutcome]) -> Any:
    """Return the eager baseline of the validating tune, or raise when there is none."""
    gate = CURRENT_GATE.get()
    baseline = None if gate is None else gate.baseline
    if baseline is None:
        raise NoValidBackendError(name, outcomes)
    return baseline


class OneBackendStrategy:
    """Use one backend; when it fails or is not faster, fall back to the eager baseline."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend

    def describe(self) -> str:
        """Human description of the strategy."""
        return f"name: One Backend Strategy\ndescription: Use only one backend\nbackend: {self.backend.describe()}"

    def tune(
        self,
        module: torch.nn.Module,
        name: str,
        graph_spec: GraphSpec,
        data: Sequence[Sample],
        device: torch.device | str,
        cache_dir: Path | str,
    ) -> Any:
        """Return the backend if it passes, else the eager baseline (NoValidBackendError if none)."""
        outcome = try_candidate(self.backend, module, name, graph_spec, data, device, cache_dir)
        return outcome.backend if outcome.ok else _fallback(name, [outcome])


class FirstWinsStrategy:
    """Try backends in order and return the first that passes; raise when none does."""

    def __init__(self, backends: Sequence[Backend]) -> None:
        self.backends = tuple(backends)

    def describe(self) -> str:
        """Human description of the strategy."""
        names = "".join(f"\n  {b.describe()}" for b in self.backends)
        return (
            "name: First Wins Strategy\ndescription: evaluate backends in order, "
            f"return first working backend\nbackends:{names}"
        )

    def tune(
        self,
        module: torch.nn.Module,
        name: str,
        graph_spec: GraphSpec,
        data: Sequence[Sample],
        device: torch.device | str,
        cache_dir: Path | str,
    ) -> Any:
        """Return the first passing backend; NoValidBackendError lists every failure otherwise."""
        outcomes = []
        for backend in self.backends:
            outcome = try_candidate(backend, module, name, graph_spec, data, device, cache_dir)
            if outcome.ok:
                return outcome.backend
            outcomes.append(outcome)
        raise NoValidBackendError(name, outcomes)


class MaxThroughputStrategy:
    """Keep the passing backend with the highest throughput; fall back to eager when none passes.

    Inside a validating tune the throughputs are the gate's measurements; without one, each
    correct candidate is profiled on its own (AITune's point profile) and the fastest wins.
    """

    def __init__(self, backends: Sequence[Backend]) -> None:
        self.backends = tuple(backends)

    def describe(self) -> str:
        """Human description of the strategy."""
        names = "".join(f"\n  {b.describe()}" for b in self.backends)
        return f"name: Max Throughput Strategy\ndescription: select the fastest backend\nbackends:{names}"

    def tune(
        self,
        module: torch.nn.Module,
        name: str,
        graph_spec: GraphSpec,
        data: Sequence[Sample],
        device: torch.device | str,
        cache_dir: Path | str,
    ) -> Any:
        """Return the fastest passing backend; losers are deactivated."""
        outcomes = [
            try_candidate(b, module, name, graph_spec, data, device, cache_dir)
            for b in self.backends
        ]
        scored: list[tuple[float, int, CandidateOutcome]] = []
        for i, outcome in enumerate(o for o in outcomes if o.ok):
            score = self._score(outcome, module, graph_spec, data, device, cache_dir)
            if score is not None:
                scored.append((score, i, outcome))
        if not scored:
            return _fallback(name, outcomes)
        best = max(scored, key=lambda item: (item[0], -item[1]))[2]
        for _, _, other in scored:
            if other is not best:
                release(other.backend, module, device)
        best.backend.activate()
        return best.backend

    @staticmethod
    def _score(
        outcome: CandidateOutcome,
        module: torch.nn.Module,
        graph_spec: GraphSpec,
        data: Sequence[Sample],
        device: torch.device | str,
        cache_dir: Path | str,
    ) -> float | None:
        """How good a passing candidate is; None when it cannot be measured (it is released).

        Gated candidates rank by their speedup over eager timed in the same window (robust
        to the machine changing speed between candidates); without a gate, by throughput.
        """
        result = outcome.result
        if result is not None:
            return result.estimate if result.estimate is not None else result.speedup
        from aitune_fp.core.config import ProfilingConfig
        from aitune_fp.inputs import as_sample
        from aitune_fp.measure import measure_throughput_steady

        try:
            batch_size = graph_spec.get_max_batch_size()
            batch = graph_spec.make_batch(as_sample(data[0]), batch_size)
            throughput, _ = measure_throughput_steady(
                outcome.backend, batch, batch_size, ProfilingConfig()
            )
        except Exception as exc:
            key = getattr(outcome.backend, "key", None)
            folder = Path(cache_dir) / (key() if callable(key) else "max_throughput")
            append_failure_log(folder / PROFILING_LOG_NAME, "Backend profiling failed", exc)
            release(outcome.backend, module, device)
            return None
        return throughput
