"""Eager's own outputs: its noise (float32 against a float64 copy) and whether they are degenerate."""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from typing import Any

import torch
from torch.utils import _pytree

from aitune_fp._tree import clone_inputs
from aitune_fp.core.accuracy import NoiseFloor, capped, rel_l2
from aitune_fp.correctness._leaves import as_tensor_if_array, leaves
from aitune_fp.correctness.failures import ReferenceFailedError
from aitune_fp.correctness.tolerances import Tolerances
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
    wide = dict(leaves(out64))
    found: dict[str, float] = {}
    for path, leaf in leaves(out32):
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


#: How many near-zero leaves a reason names before it counts the rest.
_NAMED = 3


def _floating_leaves(output: Any) -> list[tuple[str, torch.Tensor]]:
    """The floating (or complex) tensors in one output, with their paths, as the check walks it."""
    found = []
    for path, leaf in leaves(output):
        leaf = as_tensor_if_array(leaf)
        if isinstance(leaf, torch.Tensor) and (leaf.is_floating_point() or leaf.is_complex()):
            found.append((path, leaf.detach()))
    return found


def _largest(column: Sequence[torch.Tensor]) -> float:
    """The largest magnitude in one leaf over the inputs: 0 when empty, NaN if any is NaN."""
    sizes = [float(t.abs().max()) for t in column if t.numel()]
    return math.nan if any(math.isnan(x) for x in sizes) else max(sizes, default=0.0)


def _near_zero(
    paths: list[str], columns: list[tuple[torch.Tensor, ...]], atol: float
) -> str | None:
    """Name the non-empty leaves within ``atol`` of zero on every input, or None."""
    sizes = [
        (path, _largest(column))
        for path, column in zip(paths, columns, strict=True)
        if any(t.numel() for t in column)
    ]
    tiny = [(path, size) for path, size in sizes if size <= atol]
    if not tiny:
        return None
    largest = max(size for _, size in tiny)
    if len(tiny) == len(sizes):
        return (
            f"eager's outputs are all within {atol:g} of zero (largest {largest:.3g}): a "
            "candidate that returns zeros passes the correctness check"
        )
    names = ", ".join(path for path, _ in tiny[:_NAMED])
    if len(tiny) > _NAMED:
        names += f" and {len(tiny) - _NAMED} more"
    verb = "is" if len(tiny) == 1 else "are"
    return (
        f"eager's {names} {verb} within {atol:g} of zero on every input (largest "
        f"{largest:.3g}): a candidate that returns zeros there passes the correctness check"
    )


def degenerate_outputs(outputs: Sequence[Any], tolerances: Tolerances | None = None) -> str | None:
    """Why eager's ``outputs`` on different inputs cannot tell candidates apart, or None."""
    tol = tolerances if tolerances is not None else Tolerances()
    found = [_floating_leaves(o) for o in outputs]
    if not found or not found[0]:
        return None
    paths = [path for path, _ in found[0]]
    if any([path for path, _ in x] != paths for x in found):
        return None
    columns = list(zip(*([t for _, t in x] for x in found), strict=True))
    near_zero = _near_zero(paths, columns, tol.reduced_atol)
    if near_zero is not None or len(found) < 2:
        return near_zero
    worst = 0.0
    for column in columns:
        if any(t.shape != column[0].shape for t in column) or not column[0].numel():
            return None
        stack = torch.stack(
            [t.to("cpu", torch.complex128 if t.is_complex() else torch.float64) for t in column]
        )
        size = float(stack.abs().square().mean())
        if not math.isfinite(size):
            return None
        if size > 0:
            spread = float((stack - stack.mean(dim=0)).abs().square().mean())
            worst = max(worst, math.sqrt(spread / size))
    if worst > tol.reduced_rel_l2:
        return None
    return (
        f"eager's outputs hardly change with the input (by at most {worst:.2%} of their size "
        f"across {len(found)} inputs, within the {tol.reduced_rel_l2:g} relative L2 a "
        "reduced-precision candidate is allowed): the correctness check cannot tell a "
        "candidate that ignores its input from eager"
    )
