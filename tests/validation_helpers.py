"""Small real modules and backends for the validation tests: slower, faster, broken, wrong.

Their cost is real (a small matmul chain) and also spent on :data:`CLOCK`, a
:class:`~aitune_fp.testing.FakeClock` (each thread its own time, ±2 % jitter): tests
that pass ``timer=CLOCK`` get deterministic timings (Pruned ~11x eager, Slower ~0.5x), tests
marked ``slow`` time the real work.
"""

from __future__ import annotations

import json
import time
from importlib.resources import files
from typing import Any, ClassVar

import torch

from aitune_fp.backends.base import BackendBase, Build
from aitune_fp.core.config import ProfilingConfig
from aitune_fp.inputs import GraphSpec, Sample
from aitune_fp.testing import FakeClock

#: A budget small enough for tests, real timings all the same.
FAST_CONFIG = ProfilingConfig(
    looks=(10, 20), max_seconds=10.0, warmup_max_calls=10, point_warmup_calls=3, point_steps=8
)


#: The fake clock the helpers' modules and backends spend on.
CLOCK = FakeClock(jitter=0.02)
#: Fake cost of the useful work and of the wasted work, per call.
USEFUL_NS = 20_000
WASTE_NS = 200_000


class Wasteful(torch.nn.Module):
    """Eager does its useful work plus wasted work a good backend can skip.

    The waste is fake time on :data:`CLOCK`; with ``waste > 0`` it is also a real matmul chain
    of that length, for tests that time real calls.
    """

    def __init__(self, waste: int = 0) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.useful = torch.nn.Linear(16, 8)
        self.register_buffer("w", torch.randn(192, 192))
        self.waste = waste

    def useful_forward(self, x: torch.Tensor) -> torch.Tensor:
        CLOCK.advance(USEFUL_NS / 1e9)
        return self.useful(x)

    def wasted(self) -> None:
        CLOCK.advance(WASTE_NS / 1e9)
        y = self.w
        for _ in range(self.waste):
            y = torch.tanh(y @ self.w)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.wasted()
        return self.useful_forward(x)


def make_case(batch: int = 4, waste: int = 0) -> tuple[Wasteful, GraphSpec, list[Sample]]:
    """The module (real waste ``waste``), a spec allowing batch 1..``batch``, one sample."""
    torch.manual_seed(1)
    return Wasteful(waste).eval(), GraphSpec(max_batch_size=batch), [Sample((torch.randn(1, 16),))]


class TinyNet(torch.nn.Module):
    """``tanh(fc(x))`` on ``width`` features; each call first sleeps ``sleep_s`` of real time
    (work a faster candidate skips) and, with ``mutate``, doubles its input in place."""

    def __init__(self, width: int, *, sleep_s: float = 0.0, mutate: bool = False) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.fc = torch.nn.Linear(width, width)
        self.sleep_s = sleep_s
        self.mutate = mutate

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.sleep_s:
            time.sleep(self.sleep_s)
        if self.mutate:
            x.mul_(2)
        return torch.tanh(self.fc(x))


class _ModuleBackend(BackendBase):
    """A user-style backend holding the module it was built for."""

    def __init__(self, tag: str = "") -> None:
        self.tag = tag
        self.module: Any = None

    def _config(self) -> dict[str, Any]:
        return {"tag": self.tag}

    def _build(self, given: Build) -> None:
        self.module = given.module


class Pruned(_ModuleBackend):
    """Faster and correct: skips the wasted work."""

    def _infer(self, *args: Any, **kwargs: Any) -> Any:
        with torch.no_grad():
            return self.module.useful_forward(*args)


class Slower(_ModuleBackend):
    """Correct but slower: eager plus as much wasted work again."""

    def _infer(self, *args: Any, **kwargs: Any) -> Any:
        with torch.no_grad():
            self.module.wasted()
            return self.module(*args)


class BrokenBuild(_ModuleBackend):
    """Fails to build."""

    def _build(self, given: Any) -> None:
        raise RuntimeError("compiler exploded")


class Wrong(_ModuleBackend):
    """Fast but wrong values."""

    def _infer(self, *args: Any, **kwargs: Any) -> Any:
        with torch.no_grad():
            return self.module.useful_forward(*args) + 1.0


class FailsWhenTimed(_ModuleBackend):
    """Correct for the correctness check, then raises once profiling starts."""

    calls = 0

    def _infer(self, *args: Any, **kwargs: Any) -> Any:
        type(self).calls += 1
        if type(self).calls > 16:  # past the correctness check's 14 calls at batch sizes 1..4
            raise RuntimeError("device lost")
        with torch.no_grad():
            return self.module(*args)


def event_schema() -> dict[str, Any]:
    """The shipped JSON Schema of events."""
    return json.loads(files("aitune_fp").joinpath("events.schema.json").read_text("utf-8"))  # type: ignore[no-any-return]


class RecordingSlower(Slower):
    """Slower, and records each release so tests can see a rejected candidate let go."""

    released: ClassVar[list[str]] = []

    def _deactivate(self) -> None:
        type(self).released.append(self.describe())


def gated(strategy: Any, **kwargs: Any) -> Any:
    """``strategy`` wrapped to validate on the fake clock with the small test budget."""
    from aitune_fp.adapters.validation import with_performance_validation

    kwargs.setdefault("profiling_config", FAST_CONFIG)
    return with_performance_validation(strategy, timer=CLOCK, **kwargs)


def tune_args(**overrides: Any) -> Any:
    """The parsed ``aitune-fp tune`` flags that build the ProfilingConfig (all unset by default)."""
    import argparse

    values: dict[str, Any] = {
        "looks": None,
        "max_pairs": None,
        "max_seconds": None,
        "confidence": None,
        "futility_margin": None,
        "futility_error": None,
        "warmup_calls": None,
        "steps": None,
        "decision": "statistical",
        "threads": None,
        "clock": None,
    }
    values.update(overrides)
    return argparse.Namespace(**values)
