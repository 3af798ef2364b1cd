"""AITune's MaxThroughput, MinLatency and LatencyBudget, gated; their fallbacks stay."""

from __future__ import annotations

import contextlib
import dataclasses
import re
from pathlib import Path
from typing import Any, Final

import attrs

from aitune_fp.adapters.aitune._names import PROFILING_MODULE, PROFILING_STATE, aitune
from aitune_fp.adapters.aitune._names import log as log_line
from aitune_fp.adapters.aitune._names import mode as mode_of
from aitune_fp.adapters.aitune._pipeline import (
    AituneBuild,
    key,
    per_call_ms,
    record,
    session_of,
    speedup_text,
)
from aitune_fp.adapters.aitune.gate import AituneGate, defined_in
from aitune_fp.core.quantiles import DEFAULT_QUANTILE
from aitune_fp.core.results import PerformanceValidationResult
from aitune_fp.errors import InvalidTypeError
from aitune_fp.pipeline.choosing import choose, latency_check
from aitune_fp.pipeline.stages import release
from aitune_fp.pipeline.tune import TuneSession
from aitune_fp.pipeline.values import CandidateOutcome, append_failure_log

_STRATEGIES: Final = "aitune.torch.tune_strategy."


@attrs.frozen
class Kind:
    """One of AITune's profiling strategies by class name; its module and metric class follow it."""

    name: str
    batch_one: bool = False  # compared at batch size 1 (MinLatency)
    budget: bool = False  # candidates held to ``latency_budget_ms`` (LatencyBudget)

    @property
    def module(self) -> str:
        """``MaxThroughputStrategy``'s is ``aitune.torch.tune_strategy.max_throughput_strategy``."""
        return _STRATEGIES + re.sub(r"(?<!^)(?=[A-Z])", "_", self.name).lower()

    @property
    def result(self) -> str:
        """The class of its metric object: ``MaxThroughputProfilingResult``."""
        return self.name.replace("Strategy", "ProfilingResult")


KINDS: Final = (
    Kind("MaxThroughputStrategy"),
    Kind("MinLatencyStrategy", batch_one=True),
    Kind("LatencyBudgetStrategy", budget=True),
)
#: The methods that say how a profiling strategy measures and picks: a subclass may not change one.
_MEASURING: Final = (
    "_measure",
    "_is_better",
    "_speedup",
    "_get_profiling_config",
    "_run_backends",
    "_resolve_winner",
    "_record_perf_result",
    "_aggregate_result",
    "_measure_distributed",
)


def kind_of(cls: type) -> Kind:
    """``cls``'s kind; InvalidTypeError naming it when it changes how its kind measures."""
    owner = defined_in(cls, "_measure")
    where = None if owner is None else (owner.__module__, owner.__name__)
    kind = next((k for k in KINDS if (k.module, k.name) == where), None)
    mro = () if owner is None else owner.__mro__
    changed = next((n for n in _MEASURING if defined_in(cls, n) not in mro), None)
    if kind is None or changed is not None:
        why = "its own _measure" if changed is None else f"its own {changed}"
        raise InvalidTypeError(
            f"{cls.__name__} is not supported: aitune_fp gates AITune's OneBackendStrategy, "
            "FirstWinsStrategy, MaxThroughputStrategy, MinLatencyStrategy, LatencyBudgetStrategy "
            f"and their subclasses that keep how they measure ({cls.__name__} has {why}; "
            "see docs/aitune.md)"
        )
    aitune(kind.module, kind.result)
    return kind


def _metric(kind: Kind, result: PerformanceValidationResult) -> Any:
    """AITune's metric object of ``result``: throughput and/or latency of one call in ms."""
    cls = aitune(kind.module, kind.result)
    size = result.batch_size or 1
    values = {"throughput": result.throughput, "latency": per_call_ms(result.throughput, size)}
    fields = {f.name for f in dataclasses.fields(cls)}
    return cls(selected_batch_size=size, **{k: v for k, v in values.items() if k in fields})


class ProfilingGate(AituneGate):
    """MaxThroughput, MinLatency, LatencyBudget: ``_run_backends`` gates; ``choose`` picks."""

    _aitune_fp_state = PROFILING_STATE

    def _aitune_fp_operating_point(self, graph_spec: Any) -> tuple[int, bool]:
        if kind_of(type(self)).batch_one:  # MinLatency profiles at batch size 1
            return 1, bool(graph_spec.input_spec.has_batch_axis())
        return super()._aitune_fp_operating_point(graph_spec)

    def _run_backends(
        self,
        module: Any,
        name: Any,
        graph_spec: Any,
        samples: Any,
        device: Any,
        cache_dir: Any,
        batching: bool,
        max_batch_size: int,
    ) -> Any:
        """Every backend through the session's pipeline; ``choose`` picks among those passed."""
        target = (module, name, graph_spec, samples, device, cache_dir)
        if mode_of(self) == "disabled":
            return super()._run_backends(*target, batching, max_batch_size)  # type: ignore[misc]
        session = session_of(self, module)
        if mode_of(self) == "diagnostic" and session.baseline is None:
            # AITune's own: nothing to compare with, and nothing the comparison may change
            return super()._run_backends(*target, batching, max_batch_size)  # type: ignore[misc]
        this: Any = self
        kind = kind_of(type(self))
        latency = this._metric_label == "latency"
        perf_record = aitune(PROFILING_MODULE, "BackendPerfResult")
        passing: list[tuple[CandidateOutcome, Any]] = []
        measured = shown_faster = False
        for backend in this._backends:
            outcome = session.try_candidate(backend, build=AituneBuild(self, target))
            log_file = this._log_file(Path(cache_dir) / key(backend), "build.log")
            if outcome.stage is not None:
                if outcome.stage != "build":  # AITune logged its own build failures
                    log_line(this, "❌ backend failed (log file: %s)", log_file, depth=2)
                continue
            result = outcome.result
            if result is None or this._baseline_result is None:
                if outcome.backend is not None:
                    release(session.target, outcome.backend)
                continue
            measured = True
            metric = _metric(kind, result)
            if this.backend_results:
                this.backend_results[-1].update(metric.to_json_dict(this._metric_label))
            record(this, result, perf_record, latency=latency)
            log_line(
                this,
                "✅ backend profiled - %s: %s, speedup=%s, batch size: %s",
                this._metric_label,
                this._fmt(metric.metric),
                speedup_text(result),
                result.batch_size,
                depth=2,
            )
            if outcome.backend is None:  # not shown faster: released already
                continue
            shown_faster = True
            if kind.budget and not self._aitune_fp_within_budget(session, outcome, log_file):
                continue
            passing.append((outcome, metric))
        # none shown faster than eager: AITune's fallback to eager, even under a budget
        this._aitune_fp_eager_ok = measured and not shown_faster
        chosen = choose(session.arena(), [o for o, _ in passing], activate=False)
        if chosen is None:
            return None
        metric = next(m for o, m in passing if o is chosen)
        assert chosen.result is not None
        log_line(
            this,
            "🎯 new best %s for %s is %s, speedup=%s, batch size: %s",
            this._metric_label,
            chosen.description,
            this._fmt(metric.metric),
            speedup_text(chosen.result),
            chosen.result.batch_size,
            depth=2,
        )
        return aitune(PROFILING_MODULE, "_TuneCandidate")(backend=chosen.backend, result=metric)

    def _aitune_fp_within_budget(
        self, session: TuneSession, outcome: CandidateOutcome, log_file: Path
    ) -> bool:
        """Whether ``outcome``'s p90 latency is shown within the budget; else it is released."""
        this: Any = self
        try:
            check = latency_check(
                session.arena(),
                outcome,
                budget_ms=float(this.latency_budget_ms),
                quantile=DEFAULT_QUANTILE,
            )
        except Exception as exc:  # it failed while timed on its own
            path = append_failure_log(log_file, "Backend latency check failed", exc)
            session.record_failure(outcome.description, "profiling", exc, path)
            within = False
        else:
            within = check.within
            if not within:
                with contextlib.suppress(OSError), log_file.open("a", encoding="utf-8") as out:
                    out.write(f"\nLatency budget not met\n{check.reason}\n")
        if not within:
            release(session.target, outcome.backend, log_file)
            log_line(this, "❌ backend failed (log file: %s)", log_file, depth=2)
        return within

    def _resolve_winner(self, best: Any) -> Any:
        """The gate's winner as it is; else AITune's fallbacks (eager, or LatencyBudget's error)."""
        eager_ok = vars(self).pop("_aitune_fp_eager_ok", False)
        if mode_of(self) == "enabled" and best is not None:
            return best
        if best is None and eager_ok:
            fallback = aitune(PROFILING_MODULE, "ProfilingTuneStrategy")._resolve_winner
            return fallback(self, None)
        return super()._resolve_winner(best)  # type: ignore[misc]
