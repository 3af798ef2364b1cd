"""The gate before an AITune strategy class: AITune's ``tune`` inside a TuneSession."""

from __future__ import annotations

from typing import Any

import attrs
import torch

from aitune_fp.adapters.aitune._names import MIXIN_MODULE, MIXIN_STATE, aitune, check_state
from aitune_fp.adapters.aitune._names import log as log_line
from aitune_fp.adapters.aitune._names import mode as mode_of
from aitune_fp.adapters.aitune._pipeline import (
    BUILDING,
    AituneBuild,
    AituneSpec,
    mark_failed,
    record,
    session_of,
    speedup_text,
)
from aitune_fp.adapters.reports import DecoratorOptions, LastReport, last_report_of
from aitune_fp.isolation.model import exclusive_module
from aitune_fp.pipeline.stages import Guards
from aitune_fp.pipeline.tune import TuneSession
from aitune_fp.pipeline.values import StageError, TuneTarget, ValidationOptions
from aitune_fp.pipeline.workers import isolation_of, worker_threads
from aitune_fp.profiling.recipe import UnpicklableError, pack


class AituneGate:
    """Placed before an AITune strategy class: ``tune`` runs AITune's inside a TuneSession."""

    _aitune_fp_options: DecoratorOptions = DecoratorOptions()
    __aitune_fp_base__: type
    _aitune_fp_state: tuple[str, ...] = ()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        """AITune's constructor; the decorator's ``enabled=False`` then disables validation."""
        super().__init__(*args, **kwargs)
        if not self._aitune_fp_options.enabled:
            self.enable_performance_validation(False)  # type: ignore[attr-defined]

    def tune(
        self,
        module: Any,
        name: Any,
        graph_spec: Any,
        samples: Any,
        device: Any,
        cache_dir: Any,
    ) -> Any:
        """AITune's ``tune`` with every candidate gated by aitune_fp (``docs/aitune.md``)."""
        check_state(self, self._aitune_fp_state)
        target = TuneTarget.of(module, name, AituneSpec(graph_spec), samples, device, cache_dir)
        options = self._aitune_fp_session_options()
        guards = Guards.take(target) if options.enabled else None  # before a pickling hook runs
        why = distributed() or unpicklable((self, graph_spec, samples), options, target)
        self._aitune_fp_options.check_isolation(options, target, why)
        if why is not None and options.isolation is None:  # left unset: in process, saying why
            options = attrs.evolve(options, isolation="in_process", in_process_why=why)
        session = TuneSession(
            target,
            options,
            strategy=type(self).__name__,
            decides=mode_of(self) != "diagnostic",
            guards=guards,
        )
        aitune_tune = super().tune  # type: ignore[misc]
        try:
            with exclusive_module(module):  # one tune per module object at a time
                return session.run(
                    lambda: aitune_tune(module, name, graph_spec, samples, device, cache_dir),
                    open_first=False,
                )
        finally:
            self._aitune_fp_last().keep(session.report(), session.baseline)

    def _pre_tune(self, *target: Any) -> None:
        """AITune's ``_pre_tune`` (its eager baseline), then the session adopts that baseline."""
        super()._pre_tune(*target)  # type: ignore[misc]
        if mode_of(self) == "disabled":
            return
        session = session_of(self, target[0])
        size, batching = self._aitune_fp_operating_point(target[2])
        spec = session.target.graph_spec
        assert isinstance(spec, AituneSpec)
        spec.at(size, batching)
        session.open(
            baseline=getattr(self, "_baseline_backend", None),
            batch_size=size if batching else 1,
        )

    def _aitune_fp_operating_point(self, graph_spec: Any) -> tuple[int, bool]:
        """AITune's batch size for the comparison and whether inputs are batched at it."""
        size = int(graph_spec.get_max_batch_size())
        return size, bool(graph_spec.input_spec.has_batch_axis()) and size > 1

    def check_correctness(self, backend: Any, *args: Any) -> Any:
        """AITune's correctness check; while the session builds, a failure names its stage."""
        try:
            return super().check_correctness(backend, *args)  # type: ignore[misc]
        except Exception as exc:
            if BUILDING.get():
                raise StageError("correctness", exc) from exc
            raise

    def _aitune_fp_last(self) -> LastReport:
        """The last report (``validation_of`` reads it; AITune's own names stay AITune's)."""
        return last_report_of(self)

    def _aitune_fp_session_options(self) -> ValidationOptions:
        """The session's options now: AITune's own threshold and mode fill what was not given."""
        options = self._aitune_fp_options
        session = options.session_options(
            own_threshold=getattr(self, "min_speedup_threshold_percent", None),
            enabled=mode_of(self) != "disabled",
        )
        why = distributed() if options.isolation is None else None
        if why is not None:
            return attrs.evolve(session, isolation="in_process", in_process_why=why)
        return session


def distributed() -> str | None:
    """Why a worker cannot build here: one rank of several (it could not join the collectives)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        return f"a distributed run of {dist.get_world_size()} ranks (a worker cannot join them)"
    return None


def unpicklable(
    build: tuple[Any, ...], options: ValidationOptions, target: TuneTarget
) -> str | None:
    """Why ``build`` (the strategy, its graph spec and samples) cannot go to a candidate's worker.

    None if it can, or need not: only a worker from the fork server (several threads) is sent it.
    """
    if isolation_of(options, target)[0] != "process":
        return None
    if worker_threads(options.profiling_config.threads or torch.get_num_threads()) is None:
        return None
    try:
        pack(build, f"{type(build[0]).__name__} with its graph spec and samples")
    except UnpicklableError as exc:
        return str(exc)
    return None


def defined_in(cls: type, name: str) -> type | None:
    """The class of ``cls``'s MRO (gates left out) that defines ``name``; None when none does."""
    for klass in cls.__mro__:
        if name in vars(klass) and not issubclass(klass, AituneGate):
            return klass
    return None


class MixinGate(AituneGate):
    """OneBackend / FirstWins: each candidate's ``_build_validate_and_check_perf`` is the gate."""

    _aitune_fp_state = MIXIN_STATE

    def _aitune_fp_operating_point(self, graph_spec: Any) -> tuple[int, bool]:
        size = getattr(self, "_resolved_batch_size", None)
        if size is None:
            size = graph_spec.get_max_batch_size(normalized=True)
        return int(size), True

    def _build_validate_and_check_perf(
        self,
        backend: Any,
        module: Any,
        name: Any,
        graph_spec: Any,
        samples: Any,
        device: Any,
        cache_dir: Any,
        *,
        raise_on_failure: bool = False,
    ) -> Any:
        """The session's pipeline for one candidate: the built backend, or None (AITune's)."""
        target = (module, name, graph_spec, samples, device, cache_dir)
        if mode_of(self) == "disabled":  # AITune's own method: with validation off it only builds
            return super()._build_validate_and_check_perf(  # type: ignore[misc]
                backend, *target, raise_on_failure=raise_on_failure
            )
        session = session_of(self, module)
        outcome = session.try_candidate(backend, build=AituneBuild(self, target))
        if outcome.stage is not None:
            if outcome.stage == "correctness":
                mark_failed(self, outcome.description)
            if raise_on_failure and outcome.stage != "profiling" and outcome.error is not None:
                raise outcome.error
            return None
        result = outcome.result
        if result is not None:
            record(self, result, aitune(MIXIN_MODULE, "PerformanceValidationMixinResult"))
            log_line(
                self,
                "📊 %s: batch size=%s, throughput=%.2f samples/s, speedup=%s",
                outcome.description,
                result.batch_size,
                result.throughput,
                speedup_text(result),
            )
        return outcome.backend
