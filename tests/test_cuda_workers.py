"""CUDA workers: run only when asked until a GPU proves them, and only where two fit.

The CPU tests hold the choice (``isolation_of``) with the device's free memory faked; the
``gpu`` test runs a tune of workers on a real device.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from aitune_fp.adapters.validation import with_performance_validation
from aitune_fp.core.config import ProfilingConfig
from aitune_fp.inputs import GraphSpec
from aitune_fp.pipeline.strategies import FirstWinsStrategy
from aitune_fp.pipeline.values import TuneTarget, ValidationOptions
from aitune_fp.pipeline.workers import (
    WORKER_DEVICE_BYTES,
    device_short,
    isolation_of,
    model_bytes,
)
from tests.validation_helpers import CLOCK, FAST_CONFIG, Pruned, Slower, make_case

GIB = 1 << 30


def _target(device: str, module: torch.nn.Module | None = None) -> TuneTarget:
    """A target on ``device`` (built directly: no tensor is moved there)."""
    module = torch.nn.Linear(1024, 1024) if module is None else module
    return TuneTarget(module, "m", GraphSpec(max_batch_size=1), (), device, Path("."))


@pytest.fixture
def free(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The device's free bytes, as ``torch.cuda.mem_get_info`` will read them (set [0])."""
    room = [64 * GIB]
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (room[0], 80 * GIB))
    return room


def test_on_cuda_workers_run_only_when_asked(free: list[int]) -> None:
    where, why = isolation_of(ValidationOptions(), _target("cuda:0"))
    assert where == "in_process" and why is not None and "not yet proven on a GPU" in why
    assert isolation_of(ValidationOptions(isolation="process"), _target("cuda:0")) == (
        "process",
        None,
    )
    assert isolation_of(ValidationOptions(), _target("cpu")) == ("process", None)


def test_cuda_workers_that_do_not_fit_fall_back_naming_the_memory(free: list[int]) -> None:
    free[0] = GIB
    where, why = isolation_of(ValidationOptions(isolation="process"), _target("cuda"))
    assert where == "in_process"
    assert why is not None and "1.0 GiB free" in why and "two workers need" in why


def test_the_device_clock_keeps_a_cuda_tune_in_process(free: list[int]) -> None:
    """CUDA events time this process's work only: a worker's kernels are not on them."""
    options = ValidationOptions(
        isolation="process", profiling_config=ProfilingConfig(clock="device")
    )
    where, why = isolation_of(options, _target("cuda"))
    assert where == "in_process" and why is not None and "CUDA events" in why


@given(st.integers(0, 1 << 40), st.integers(0, 1 << 38))
def test_two_workers_fit_when_two_copies_and_contexts_do(free: int, model: int) -> None:
    short = device_short(free, model)
    assert (short is None) == (free >= 2 * (model + WORKER_DEVICE_BYTES))
    if short is not None:
        assert short.startswith("device memory:")


def test_a_storage_shared_by_two_parameters_counts_once() -> None:
    tied = torch.nn.Sequential(torch.nn.Linear(8, 8, bias=False), torch.nn.Linear(8, 8, bias=False))
    tied[1].weight = tied[0].weight
    assert model_bytes(tied) == 8 * 8 * 4
    assert model_bytes(torch.nn.Linear(8, 8)) == (64 + 8) * 4


@pytest.mark.gpu
def test_a_cuda_tune_asked_for_workers_times_them_there(tmp_path: Path) -> None:
    """On a real device: each candidate built, checked and timed in a worker; verdicts hold."""
    module, spec, data = make_case()
    strategy: Any = with_performance_validation(
        FirstWinsStrategy([Slower(), Pruned()]),
        profiling_config=FAST_CONFIG,
        timer=CLOCK,
        isolation="process",
    )
    strategy.tune(module.cuda(), "wasteful", spec, data, "cuda", tmp_path)
    results = {r.backend_description: r for r in strategy.perf_validation_results}
    assert {r.isolation for r in results.values()} == {"process"}
    assert [name for name, r in results.items() if r.passed] == ["Pruned()"]
