"""``aitune-fp sweep``: many models × backends from one TOML file, locally or on a Ray cluster.

Importing this package imports neither torch nor Ray.
"""

from __future__ import annotations

from aitune_fp.sweep.local_executor import LocalExecutor
from aitune_fp.sweep.run import ModelStatus, SweepResult, run_sweep
from aitune_fp.sweep.spec import BackendChoice, ModelEntry, SweepSpec, load_sweep, parse_sweep
from aitune_fp.sweep.summary import SummaryCell, SweepSummary, summarize_sweep
from aitune_fp.sweep.task import SweepTask, TaskOutcome, run_task

__all__ = [
    "BackendChoice",
    "LocalExecutor",
    "ModelEntry",
    "ModelStatus",
    "SummaryCell",
    "SweepResult",
    "SweepSpec",
    "SweepSummary",
    "SweepTask",
    "TaskOutcome",
    "load_sweep",
    "parse_sweep",
    "run_sweep",
    "run_task",
    "summarize_sweep",
]
