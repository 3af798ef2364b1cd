"""A model that changes its own state on every call: what each isolation does with it.

docs/guarantees.md ("Your model and your samples are never changed by a tune") says it; these
tests hold the paragraph to the behaviour, on the default path (workers) and in process.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from aitune_fp.adapters.validation import with_performance_validation
from aitune_fp.backends.eager import TorchEagerBackend
from aitune_fp.backends.quantized import Int8DynamicBackend
from aitune_fp.core.config import ProfilingConfig
from aitune_fp.inputs import GraphSpec, Sample
from aitune_fp.pipeline.strategies import MaxThroughputStrategy

BF16 = "TorchEagerBackend(dtype=torch.bfloat16)"
INT8 = "Int8DynamicBackend()"


class Counting(torch.nn.Module):
    """Counts its calls in a buffer, or in a Python attribute; the output does not depend on it."""

    def __init__(self, where: str) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(64, 64)
        self.where = where
        self.register_buffer("steps", torch.zeros((), dtype=torch.long))
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.where == "buffer":
            self.steps += 1
        else:
            self.calls += 1
        return self.fc(x)

    def count(self) -> int:
        return int(self.steps) + self.calls


def _tune(model: Counting, isolation: str, cache: Path) -> Any:
    strategy = with_performance_validation(
        MaxThroughputStrategy([TorchEagerBackend(dtype=torch.bfloat16), Int8DynamicBackend()]),
        isolation=isolation,
        profiling_config=ProfilingConfig(max_seconds=5.0, looks=(10, 20)),
    )
    with torch.no_grad():
        strategy.tune(
            model, "counting", GraphSpec(max_batch_size=16), [Sample((torch.randn(1, 64),))],
            "cpu", cache,
        )  # fmt: skip
    return strategy


@pytest.mark.parametrize("where", ["buffer", "attribute"])
def test_with_workers_every_candidate_is_judged_and_the_model_comes_back_as_it_came(
    tmp_path: Path, where: str
) -> None:
    """Default path: eager's calls here run on a private copy and each candidate on its
    worker's, so none is blamed for eager's own changes and each is judged; the model comes
    back as it came. A chosen candidate that calls the model itself (bf16 autocast) changes it
    once rebuilt here: rejected at ``rebuild``, the model restored."""
    model = Counting(where).eval()
    strategy = _tune(model, "process", tmp_path)
    measured = sorted(r.backend_description for r in strategy.perf_validation_results)
    assert measured == sorted([BF16, INT8])
    for failure in strategy.candidate_failures:
        assert (failure.backend_description, failure.stage) == (BF16, "rebuild"), failure
    assert model.count() == 0  # as it came


def test_in_process_a_candidate_on_its_own_copy_is_judged_and_the_model_comes_back(
    tmp_path: Path,
) -> None:
    """In process eager runs on its private copy: only a candidate calling the model changes it."""
    model = Counting("buffer").eval()
    strategy = _tune(model, "in_process", tmp_path)
    (failure,) = strategy.candidate_failures
    assert failure.backend_description == BF16  # autocast around the model itself
    assert failure.stage == "correctness"
    assert failure.reason.startswith("the candidate changed the model")
    measured = [r.backend_description for r in strategy.perf_validation_results]
    assert measured == [INT8]  # quantized into a copy of its own: judged as any other
    assert model.count() == 0  # as it came
