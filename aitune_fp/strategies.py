"""Tuning strategies (selection logic only) and the helper that builds and checks one candidate.

A strategy is any object with AITune's ``tune(module, name, graph_spec, data, device, cache_dir)``.
Candidates built through :func:`try_candidate` / :func:`build_and_validate` are checked against
eager and, inside a validating tune, gated by measurement one by one.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from aitune_fp.backends import Backend
from aitune_fp.core.config import STRATEGY_NAMES
from aitune_fp.errors import InvalidValueError
from aitune_fp.inputs import GraphSpec, Sample
from aitune_fp.session import (
    CandidateOutcome,
    NoValidBackendError,
    TuneSession,
    TuneTarget,
    active_session,
)

__all__ = [
    "CandidateOutcome",
    "FirstWinsStrategy",
    "MaxThroughputStrategy",
    "NoValidBackendError",
    "OneBackendStrategy",
    "SessionStrategy",
    "build_and_validate",
    "make_strategy",
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
    return TuneSession.plain(
        TuneTarget.of(module, name, graph_spec, data, device, cache_dir), strategy=strategy
    )


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

    For third-party strategies: inside a validating tune of ``module`` this runs that tune's
    pipeline (``session.try_candidate``); outside one, the candidate is built and checked only.
    Never raises for a failing candidate (``KeyboardInterrupt``/``SystemExit`` propagate).
    """
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
    """Base of the built-in strategies: selection logic over an explicit :class:`TuneSession`.

    The validating wrapper calls :meth:`tune_session` with its session; ``tune`` (AITune's
    signature) runs the same logic in a plain session when called without the wrapper.
    """

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

    def __init__(self, backends: Sequence[Backend]) -> None:
        """Keep the candidates in the order they are tried."""
        self.backends = tuple(backends)

    def describe(self) -> str:
        """Human description of the strategy."""
        names = "".join(f"\n  {b.describe()}" for b in self.backends)
        return (
            "name: First Wins Strategy\ndescription: evaluate backends in order, "
            f"return first working backend\nbackends:{names}"
        )

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
    """Keep the passing backend that ranks best; fall back to eager when none passes.

    Validating, candidates rank by their speedup over eager timed alongside them; without the
    wrapper, each correct candidate is profiled on its own (AITune's point profile).
    """

    def __init__(self, backends: Sequence[Backend]) -> None:
        """Keep the candidates (ties go to the earlier one)."""
        self.backends = tuple(backends)

    def describe(self) -> str:
        """Human description of the strategy."""
        names = "".join(f"\n  {b.describe()}" for b in self.backends)
        return f"name: Max Throughput Strategy\ndescription: select the fastest backend\nbackends:{names}"

    def tune_session(self, session: TuneSession) -> Any:
        """The best-ranked passing backend; the others are released."""
        outcomes = [session.try_candidate(b) for b in self.backends]
        scored: list[tuple[float, int, CandidateOutcome]] = []
        for i, outcome in enumerate(o for o in outcomes if o.ok):
            score = session.rank(outcome)
            if score is not None:
                scored.append((score, i, outcome))
        if not scored:
            return session.fallback(outcomes)
        best = max(scored, key=lambda item: (item[0], -item[1]))[2]
        for _, _, other in scored:
            if other is not best:
                session.release(other.backend)
        best.backend.activate()
        return best.backend


def make_strategy(name: str, backends: Sequence[Backend]) -> SessionStrategy:
    """The built-in strategy ``name`` (one of ``STRATEGY_NAMES``) over ``backends``.

    ``one`` needs exactly one backend; anything else is an :class:`InvalidValueError`.
    """
    if name == "one":
        if len(backends) != 1:
            raise InvalidValueError(
                f"strategy 'one' needs exactly one backend, got {len(backends)}"
            )
        return OneBackendStrategy(backends[0])
    if name == "first-wins":
        return FirstWinsStrategy(backends)
    if name == "max-throughput":
        return MaxThroughputStrategy(backends)
    raise InvalidValueError(f"strategy must be one of {', '.join(STRATEGY_NAMES)}, got {name!r}")
