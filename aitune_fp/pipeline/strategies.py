"""Tuning strategies (selection logic only) and the helper that builds and checks one candidate."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs
import torch

from aitune_fp.backends.protocol import Backend
from aitune_fp.core._checks import check_finite, check_open_interval
from aitune_fp.core.quantiles import DEFAULT_QUANTILE
from aitune_fp.inputs import GraphSpec, Sample
from aitune_fp.pipeline.choosing import choose, latency_check
from aitune_fp.pipeline.stages import release
from aitune_fp.pipeline.tune import TuneSession, active_session
from aitune_fp.pipeline.values import CandidateOutcome, NoValidBackendError, TuneTarget

__all__ = [
    "FirstWinsStrategy",
    "LatencyBudgetStrategy",
    "MaxThroughputStrategy",
    "MinLatencyStrategy",
    "OneBackendStrategy",
    "SessionStrategy",
    "build_and_validate",
    "try_candidate",
]


def _session(
    module: torch.nn.Module,
    name: str,
    graph_spec: GraphSpec,
    data: Sequence[Sample],
    device: torch.device | str,
    cache_dir: Path | str,
    strategy: str = "",
) -> TuneSession:
    """The validating session tuning ``module`` here (compatibility shim), else a plain one."""
    session = active_session(module)
    if session is not None:
        return session
    target = TuneTarget.of(module, name, graph_spec, data, device, cache_dir)
    return TuneSession(target, None, strategy=strategy)  # builds and checks, times nothing


def try_candidate(
    backend: Backend,
    module: torch.nn.Module,
    name: str,
    graph_spec: GraphSpec,
    data: Sequence[Sample],
    device: torch.device | str,
    cache_dir: Path | str,
) -> CandidateOutcome:
    """Build a copy of ``backend``, check it and, in a validating tune, gate it; never raises."""
    session = _session(module, name, graph_spec, data, device, cache_dir)
    return session.try_candidate(backend)


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


class SessionStrategy:
    """Base of the built-in strategies: selection logic over a :class:`TuneSession`."""

    #: The batch size the validating wrapper opens the tune at (None: the graph spec's max).
    operating_batch_size: int | None = None
    #: ``describe()``'s name and description lines (AITune's wording).
    title = ""
    summary = ""
    backends: tuple[Backend, ...] = ()

    def __init__(self, backends: Sequence[Backend] = ()) -> None:
        """Keep the candidates in the order they are tried (a tie goes to the earlier one)."""
        self.backends = tuple(backends)

    def describe(self) -> str:
        """Human description of the strategy: its name, what it keeps and its candidates."""
        names = "".join(f"\n  {b.describe()}" for b in self.backends)
        return f"name: {self.title}\ndescription: {self.summary}\nbackends:{names}"

    def tune_session(self, session: TuneSession) -> Any:
        """Choose a backend through ``session``'s candidate pipeline."""
        raise NotImplementedError

    def tune(
        self,
        module: torch.nn.Module,
        name: str,
        graph_spec: GraphSpec,
        data: Sequence[Sample],
        device: torch.device | str,
        cache_dir: Path | str,
    ) -> Any:
        """AITune's entry point: the strategy's choice for ``module``."""
        session = _session(
            module, name, graph_spec, data, device, cache_dir, strategy=type(self).__name__
        )
        return self.tune_session(session)


class OneBackendStrategy(SessionStrategy):
    """Use one backend; when it fails or is not faster, fall back to the eager baseline."""

    def __init__(self, backend: Backend) -> None:
        """Keep the one candidate (a blueprint: each tune builds a copy)."""
        self.backend = backend

    def describe(self) -> str:
        """Human description of the strategy."""
        return f"name: One Backend Strategy\ndescription: Use only one backend\nbackend: {self.backend.describe()}"

    def tune_session(self, session: TuneSession) -> Any:
        """The backend if it passes, else the eager baseline (NoValidBackendError if none)."""
        outcome = session.try_candidate(self.backend)
        return outcome.backend if outcome.ok else session.fallback([outcome])


class FirstWinsStrategy(SessionStrategy):
    """Try backends in order and return the first that passes; raise when none does."""

    title = "First Wins Strategy"
    summary = "evaluate backends in order, return first working backend"

    def tune_session(self, session: TuneSession) -> Any:
        """The first passing backend; NoValidBackendError lists every failure otherwise."""
        outcomes = []
        for backend in self.backends:
            outcome = session.try_candidate(backend)
            if outcome.ok:
                return outcome.backend
            outcomes.append(outcome)
        raise NoValidBackendError(session.target.name, outcomes)


class MaxThroughputStrategy(SessionStrategy):
    """Keep the fastest passing backend (head-to-head when statistical), else eager."""

    title = "Max Throughput Strategy"
    summary = "select the fastest backend"

    def tune_session(self, session: TuneSession) -> Any:
        """The chosen passing backend; the others are released."""
        return _pick(session, [session.try_candidate(b) for b in self.backends])


def _pick(session: TuneSession, outcomes: list[CandidateOutcome]) -> Any:
    """The chosen passing backend, else the eager baseline (NoValidBackendError if none)."""
    best = choose(session.arena(), outcomes)
    return session.fallback(outcomes) if best is None else best.backend


class MinLatencyStrategy(MaxThroughputStrategy):
    """Keep the passing backend with the lowest latency: the throughput choice at batch size 1."""

    #: The batch size the validating wrapper opens the tune at.
    operating_batch_size: int | None = 1
    title = "Min Latency Strategy"
    summary = "select the lowest-latency backend"


class LatencyBudgetStrategy(MaxThroughputStrategy):
    """Keep the fastest passing backend whose latency quantile is shown within ``budget_ms``.

    None faster than eager: eager; some faster, none in budget: :class:`NoValidBackendError`.
    """

    def __init__(
        self, backends: Sequence[Backend], *, budget_ms: float, quantile: float = DEFAULT_QUANTILE
    ) -> None:
        """Keep the candidates, the budget (ms, > 0) and the quantile (0 < q < 1)."""
        super().__init__(backends)
        self.budget_ms = check_finite("budget_ms", budget_ms, minimum=0.0, strict=True)
        self.quantile = check_open_interval("quantile", quantile, 0.0, 1.0)
        self.title = "Latency Budget Strategy"
        self.summary = (
            f"select the fastest backend whose p{self.quantile * 100:g} latency is within "
            f"{self.budget_ms:g} ms"
        )

    def tune_session(self, session: TuneSession) -> Any:
        """The chosen backend among those within the budget; NoValidBackendError when none is."""
        outcomes = [session.try_candidate(b) for b in self.backends]
        # a plain session times nothing (the budget cannot be shown); none faster: eager it is
        if not session.gated or not any(o.ok for o in outcomes):
            return _pick(session, outcomes)
        kept: list[CandidateOutcome] = []
        for outcome in outcomes:
            check = outcome.ok and latency_check(
                session.arena(), outcome, budget_ms=self.budget_ms, quantile=self.quantile
            )
            if not check or check.within:
                kept.append(outcome)
            else:
                release(session.target, outcome.backend)
                kept.append(attrs.evolve(outcome, backend=None, stage=None, reason=check.reason))
        best = choose(session.arena(), kept)
        if best is None:
            raise NoValidBackendError(session.target.name, kept)
        return best.backend
