"""Eager's own numerical noise: float32 eager against a float64 copy of the same model."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import torch
from torch.utils import _pytree

from aitune_fp._tree import clone_inputs
from aitune_fp.core.accuracy import NoiseFloor, rel_l2
from aitune_fp.correctness._leaves import as_tensor_if_array, leaves
from aitune_fp.correctness._values import capped
from aitune_fp.correctness.failures import ReferenceFailedError
from aitune_fp.errors import InvalidTypeError, InvalidValueError
from aitune_fp.inputs import BatchSpec, Sample, as_sample


def eager_noise_floor(
    model: torch.nn.Module,
    samples: Sequence[Sample],
    *,
    graph_spec: BatchSpec | None = None,
    batch_sizes: Sequence[int] = (),
) -> NoiseFloor:
    """Eager's relative L2 error per floating output leaf, float32 against a float64 copy."""
    if not isinstance(model, torch.nn.Module):
        raise InvalidTypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    given: object = samples
    if isinstance(given, (str, bytes)) or not isinstance(given, Sequence) or not given:
        raise InvalidValueError("samples must be a non-empty sequence of samples")
    wide = copy.deepcopy(model).double()
    floor = NoiseFloor(rel_l2={})
    for args, kwargs in _calls(samples, graph_spec, batch_sizes):
        narrow_args, narrow_kwargs = clone_inputs(args, kwargs)
        wide_args, wide_kwargs = _as_float64(clone_inputs(args, kwargs))
        with torch.no_grad():
            out32 = model(*narrow_args, **narrow_kwargs)
            try:
                out64 = wide(*wide_args, **wide_kwargs)
            except Exception as exc:
                raise ReferenceFailedError(
                    f"the float64 copy of the model failed ({type(exc).__name__}: {exc}); a model "
                    "that fixes its dtypes inside forward cannot be measured against float64"
                ) from exc
        floor = floor.merge(NoiseFloor(rel_l2=_per_leaf(out32, out64), n_calls=1))
    return floor


def _calls(
    samples: Sequence[Sample], graph_spec: BatchSpec | None, batch_sizes: Sequence[int]
) -> list[tuple[tuple[Any, ...], dict[str, Any]]]:
    """The ``(args, kwargs)`` of each call: each sample as is, or batched per ``graph_spec``."""
    found = []
    for item in samples:
        sample = as_sample(item)
        if graph_spec is None:
            found.append((tuple(sample.args), dict(sample.kwargs)))
            continue
        sizes = batch_sizes or (graph_spec.min_batch_size, graph_spec.get_max_batch_size())
        for size in sorted(set(sizes)):
            batch = graph_spec.make_batch(sample, size)
            found.append((tuple(batch.args), dict(batch.kwargs)))
    return found


def _as_float64(call: tuple[Any, Any]) -> tuple[Any, Any]:
    """Every floating tensor of a call's inputs in float64 (integers, e.g. token ids, kept)."""

    def widen(value: Any) -> Any:
        if isinstance(value, torch.Tensor) and value.is_floating_point():
            return value.double()
        return value

    args, kwargs = call
    return _pytree.tree_map(widen, args), _pytree.tree_map(widen, kwargs)


def _per_leaf(out32: Any, out64: Any) -> dict[str, float]:
    """``||a - b|| / ||b||`` for each floating tensor leaf present in both outputs."""
    wide = {path: leaf for path, _, leaf in leaves(out64, "output", [])}
    found: dict[str, float] = {}
    for path, _, leaf in leaves(out32, "output", []):
        a, b = as_tensor_if_array(leaf), as_tensor_if_array(wide.get(path))
        if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
            continue
        if not (a.is_floating_point() or a.is_complex()) or a.shape != b.shape:
            continue
        exact = b.detach().to(torch.complex128 if b.is_complex() else torch.float64)
        ok = torch.isfinite(exact) & torch.isfinite(a.detach())
        diff_sq = float((a.detach().to(exact.dtype) - exact)[ok].abs().square().sum())
        ref_sq = float(exact[ok].abs().square().sum())
        found[path] = rel_l2(capped(diff_sq), capped(ref_sq))
    return found
