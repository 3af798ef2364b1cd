"""Specs of the local executor's child processes: forked from a preloaded fork server."""

from __future__ import annotations

import json
import multiprocessing
import subprocess
import sys

import pytest

from aitune_fp.profiling.serving import PRELOAD, fork_server

_PROBE = """
import importlib, json, sys
import torch
asked = []
for name in ("is_available", "device_count", "init", "current_device"):
    real = getattr(torch.cuda, name)
    setattr(torch.cuda, name, lambda *a, _n=name, _r=real, **k: (asked.append(_n), _r(*a, **k))[1])
for module in sys.argv[1:]:
    importlib.import_module(module)
print(json.dumps({"asked": asked, "initialized": torch.cuda.is_initialized()}))
"""


def test_the_fork_server_preloads_what_every_task_imports() -> None:
    """On Linux the context is ``forkserver`` with torch and the tuning code preloaded, the
    OpenMP wait settings first (they must be set before torch loads OpenMP)."""
    context = fork_server()
    assert "forkserver" in multiprocessing.get_all_start_methods()
    assert context.get_start_method() == "forkserver"
    assert {"torch", "aitune_fp.sweep.task", "aitune_fp.pipeline.workers"} <= set(PRELOAD)
    assert PRELOAD.index("aitune_fp.profiling.openmp_env") < PRELOAD.index("torch")


@pytest.mark.slow  # a real deadline or process: seconds of waiting
def test_the_preload_never_touches_cuda() -> None:
    """Importing the preloaded modules asks nothing of CUDA: no context is ever forked."""
    out = subprocess.run(
        [sys.executable, "-c", _PROBE, *PRELOAD],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    seen = json.loads(out.strip().splitlines()[-1])
    assert seen == {"asked": [], "initialized": False}
