"""The user's model, guarded: what a tune must leave unchanged, and how to put it back.

A :class:`ModelGuard` is taken before anything runs. It holds references to every submodule,
parameter and buffer (so a candidate that swaps one, as in-place quantization does, can be
undone) and a host copy of every tensor's values (so a candidate that writes into one, or casts
it, can be found and undone). Device moves are not changes: the tune itself moves the module.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import torch

__all__ = ["ModelGuard"]


def _tensors(module: torch.nn.Module) -> list[tuple[str, torch.Tensor]]:
    """Every parameter and buffer (persistent or not) under its qualified name."""
    return list(itertools.chain(module.named_parameters(), module.named_buffers()))


def _same_bits(now: torch.Tensor, then: torch.Tensor) -> bool:
    """Whether two tensors of one dtype and shape hold the same bits (NaN equals itself).

    A byte compare through numpy: several times faster than ``torch.equal`` on CPU.
    """
    try:
        a = now.detach().reshape(-1).contiguous().view(torch.uint8).numpy()
        b = then.reshape(-1).contiguous().view(torch.uint8).numpy()
    except (RuntimeError, TypeError):  # dtypes without a byte view (quantized, sparse)
        return torch.equal(now, then)
    if a.size % 8 == 0:  # compare 8 bytes at a time
        a, b = a.view(np.uint64), b.view(np.uint64)
    return bool(np.array_equal(a, b))


def _max_abs_diff(now: torch.Tensor, then: torch.Tensor) -> str:
    try:
        diff = (now.detach().to("cpu", torch.float64) - then.to(torch.float64)).abs().max()
        return f" (max |Δ| {float(diff):.3g})"
    except (RuntimeError, TypeError):
        return ""


class ModelGuard:
    """A snapshot of a module's structure, tensors and training flags, to check and restore."""

    def __init__(self, module: torch.nn.Module) -> None:
        """Take the snapshot now (a host copy of every tensor's values)."""
        self.module = module
        self._structure = [
            (name or "<root>", m, dict(m._modules), dict(m._parameters), dict(m._buffers))
            for name, m in module.named_modules(remove_duplicate=False)
        ]
        self._training = [(m, m.training) for _, m, *_ in self._structure]
        self._values = [
            (name, tensor, tensor.detach().to("cpu", copy=True))
            for name, tensor in _tensors(module)
        ]

    def changed(self) -> str | None:
        """What differs from the snapshot (the first thing found, named), or None."""
        for name, m, modules, params, buffers in self._structure:
            for kind, now, then in (
                ("submodule", m._modules, modules),
                ("parameter", m._parameters, params),
                ("buffer", m._buffers, buffers),
            ):
                if now.keys() != then.keys():
                    added = sorted(set(now) - set(then)) or sorted(set(then) - set(now))
                    return f"{kind} {added[0]!r} of {name!r} was added or removed"
                for key, value in now.items():
                    if value is not then[key]:
                        return f"{kind} {key!r} of {name!r} was replaced"
        for m, training in self._training:
            if m.training != training:
                return f"training flag of {type(m).__name__} changed to {m.training}"
        for name, tensor, copy in self._values:
            if tensor.dtype != copy.dtype or tensor.shape != copy.shape:
                return (
                    f"tensor {name!r} changed from {copy.dtype} {tuple(copy.shape)} to "
                    f"{tensor.dtype} {tuple(tensor.shape)}"
                )
            now = tensor.detach().to("cpu")
            if not _same_bits(now, copy):
                return f"tensor {name!r} values changed{_max_abs_diff(now, copy)}"
        return None

    def restore(self) -> None:
        """Put back every submodule, tensor, value and training flag the snapshot holds."""
        for _, m, modules, params, buffers in self._structure:
            m._modules.clear()
            m._modules.update(modules)
            m._parameters.clear()
            m._parameters.update(params)
            m._buffers.clear()
            m._buffers.update(buffers)
        for m, training in self._training:
            m.training = training
        with torch.no_grad():
            for _, tensor, copy in self._values:
                if tensor.dtype != copy.dtype or tensor.shape != copy.shape:
                    tensor.data = copy.to(tensor.device)
                elif not _same_bits(tensor.detach().to("cpu"), copy):
                    tensor.copy_(copy.to(tensor.device))

    @staticmethod
    def training_modules(module: torch.nn.Module) -> list[Any]:
        """The submodules (the module included) that are in training mode."""
        return [m for m in module.modules() if m.training]
