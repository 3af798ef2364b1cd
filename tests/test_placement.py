"""Eager's weights move to fresh memory every few timed samples, in process and in its worker."""

from __future__ import annotations

from typing import Any

import torch

from aitune_fp.inputs import CopyRing, Sample
from aitune_fp.profiling.calls import timed_block
from aitune_fp.profiling.placement import MOVE_BYTES_MAX, MOVE_EVERY, Moving, move_weights, moving
from aitune_fp.profiling.timers import CpuTimer
from aitune_fp.profiling.workers import Worker


class _Where(torch.nn.Module):
    """Answers with the address of its weight, and counts its calls."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(4))
        self.register_buffer("scale", torch.full((4,), 2.0))
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        return torch.tensor([self.weight.data_ptr()], dtype=torch.int64)


def test_moving_keeps_values_and_parameters_and_changes_the_memory() -> None:
    module = _Where()
    weight, before = module.weight, (module.weight.data_ptr(), module.scale.data_ptr())
    move_weights(module)
    assert module.weight is weight  # the same Parameter: optimisers and hooks keep it
    assert (module.weight.data_ptr(), module.scale.data_ptr()) != before
    assert torch.equal(module.weight, torch.ones(4)) and torch.equal(
        module.scale, torch.full((4,), 2.0)
    )


def test_only_a_module_with_weights_moves() -> None:
    assert isinstance(moving(_Where(), _Where()), Moving)
    assert not isinstance(moving(torch.nn.ReLU(), torch.nn.ReLU()), Moving)
    assert not isinstance(moving(abs, object()), Moving)
    big = torch.nn.Linear(1, MOVE_BYTES_MAX // 4 + 1, bias=False)  # just over the cap
    assert not isinstance(moving(big, big), Moving)


def _addresses(arm: Any, samples: int) -> list[int]:
    seen = []
    for _ in range(samples):
        sample = Sample((torch.ones(1),))
        checks = {0: seen.append}
        timed_block(arm, [sample], CpuTimer(), "baseline", checks, ring=CopyRing(), lead=False)
    return [int(out[0]) for out in seen]


def test_in_process_the_weights_move_every_so_many_samples_and_the_first_call_after_is_untimed() -> (
    None
):
    module = _Where()
    addresses = _addresses(moving(module, module), 2 * MOVE_EVERY)
    # moved before sample MOVE_EVERY and 2 * MOVE_EVERY, and nowhere else (the second move may
    # land where the first left: the allocator decides, the random pad only makes it unlikely)
    changes = [i for i in range(1, len(addresses)) if addresses[i] != addresses[i - 1]]
    assert changes == [MOVE_EVERY - 1, 2 * MOVE_EVERY - 1]
    assert module.calls == 2 * MOVE_EVERY + 2  # one untimed warm call after each move


def _moving_where(say: Any) -> tuple[Any, dict[str, Any]]:
    module = _Where()
    return moving(module, module), {}


def test_in_its_worker_eagers_weights_move_too() -> None:
    worker = Worker(_moving_where, name="eager", timeout_s=20)
    try:
        worker.ready()
        addresses = _addresses(worker, MOVE_EVERY + 1)
    finally:
        worker.close()
    assert len(set(addresses[: MOVE_EVERY - 1])) == 1
    assert addresses[MOVE_EVERY - 1] != addresses[0]
