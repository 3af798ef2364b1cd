"""User-model factories for the sweep tests: tiny, broken, one killing its worker, one that hangs."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import torch


def tiny() -> tuple[torch.nn.Module, torch.Tensor]:
    """A small Linear stack and its batch of 8 (calls take microseconds)."""
    gen = torch.Generator().manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    return module.eval(), torch.randn(8, 32, generator=gen)


def broken() -> torch.nn.Module:
    """A factory that raises: the sweep must record the model as failed and go on."""
    raise RuntimeError("this factory is broken on purpose")


def killer() -> torch.nn.Module:
    """Kill the calling process with SIGKILL, as an OOM killer would (only in a Ray worker)."""
    if str(os.getpid()) == os.environ.get("AITUNE_FP_TEST_DRIVER_PID"):
        raise RuntimeError("killer() refuses to kill the test process itself")
    os.kill(os.getpid(), signal.SIGKILL)
    raise AssertionError("unreachable: SIGKILL cannot be caught")


def interrupter() -> torch.nn.Module:
    """A Ctrl-C that surfaces while this model loads (in the process that runs the sweep)."""
    raise KeyboardInterrupt


#: Where ``napper`` says it has started (a file per process), when the test sets it.
NAP_DIR_ENV = "AITUNE_FP_TEST_NAP_DIR"


def napper() -> tuple[torch.nn.Module, torch.Tensor]:
    """``tiny`` after a nap, time to take its node away while it loads.

    With ``NAP_DIR_ENV`` set it says it started (a file) and naps until two nappers have
    (at most 60 s), then 3 s more; otherwise 15 s.
    """
    import os
    import time

    folder = os.environ.get(NAP_DIR_ENV)
    if not folder:
        time.sleep(15.0)
        return tiny()
    Path(folder, f"napper-{os.getpid()}").touch()
    give_up = time.monotonic() + 60.0
    while len(list(Path(folder).glob("napper-*"))) < 2 and time.monotonic() < give_up:
        time.sleep(0.05)
    time.sleep(3.0)
    return tiny()


def hanger() -> tuple[torch.nn.Module, torch.Tensor]:
    """A factory stuck in native code (``time.sleep`` in C): only killing its process ends it."""
    import time

    time.sleep(1000.0)
    return tiny()


def tiny_and_broken_toml(name: str) -> str:
    """A sweep file of two models, ``tiny`` and ``broken``, with a budget small enough for tests."""
    here = Path(__file__).resolve()
    return f"""
name = "{name}"
backends = ["eager"]
[budget]
looks = [10, 20]
max_seconds = 5.0
warmup_max_calls = 10
[[models]]
model = "{here}:tiny"
[[models]]
model = "{here}:broken"
"""
