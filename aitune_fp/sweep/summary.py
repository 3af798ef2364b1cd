"""The sweep's summary as values: one cell per model × backend (verdict, estimate, interval)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from aitune_fp.core.messages import headline_speedup
from aitune_fp.core.report import TuneReport
from aitune_fp.sweep.run import ModelStatus


@attrs.frozen(kw_only=True)
class SummaryCell:
    """One model × backend: the verdict, the headline estimate and its interval (None: none)."""

    model: str
    backend: str
    verdict: str
    estimate: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    note: str = ""


@attrs.frozen(kw_only=True)
class SweepSummary:
    """Models (rows, sweep order), backends (columns, first-seen order), cells, failed models."""

    models: tuple[str, ...]
    backends: tuple[str, ...]
    cells: tuple[SummaryCell, ...]
    failed: tuple[ModelStatus, ...]

    def cell(self, model: str, backend: str) -> SummaryCell | None:
        """The cell for ``model`` × ``backend`` (None when that pair has none)."""
        return next((c for c in self.cells if c.model == model and c.backend == backend), None)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return {
            "models": list(self.models),
            "backends": list(self.backends),
            "cells": [attrs.asdict(c) for c in self.cells],
            "failed": [attrs.asdict(s) for s in self.failed],
        }


def _cells(model: str, report: TuneReport) -> list[SummaryCell]:
    cells = []
    for r in report.results:
        verdict = r.verdict or ("faster" if r.passed else "not_faster")
        cells.append(
            SummaryCell(
                model=model,
                backend=r.backend_description,
                verdict=verdict,
                estimate=headline_speedup(r),
                ci_low=r.ci_low,
                ci_high=r.ci_high,
            )
        )
    for f in report.candidate_failures:
        cells.append(
            SummaryCell(
                model=model,
                backend=f.backend_description,
                verdict="failed",
                note=f"{f.stage}: {f.error_type}",
            )
        )
    return cells


def summarize_sweep(
    statuses: Sequence[ModelStatus], reports: Mapping[str, TuneReport]
) -> SweepSummary:
    """The summary of ``statuses``, verdicts from ``reports`` by run id (none: failed)."""
    cells: list[SummaryCell] = []
    failed: list[ModelStatus] = []
    for status in statuses:
        report = reports.get(status.tune_run_id or "")
        if status.state == "failed":
            failed.append(status)
        elif report is None:
            failed.append(
                attrs.evolve(
                    status,
                    state="failed",
                    error_type="MissingRun",
                    reason=f"run {status.tune_run_id} is not in the log",
                )
            )
        elif report.baseline_error:
            failed.append(
                attrs.evolve(
                    status,
                    state="failed",
                    error_type="BaselineFailed",
                    reason=report.baseline_error,
                )
            )
        else:
            cells += _cells(status.model, report)
    backends = tuple(dict.fromkeys(c.backend for c in cells))
    return SweepSummary(
        models=tuple(s.model for s in statuses),
        backends=backends,
        cells=tuple(cells),
        failed=tuple(failed),
    )
