"""A candidate's outputs against eager's, leaf by leaf: structure, type, shape, dtype, values."""

from __future__ import annotations

import math
import reprlib
from collections.abc import Mapping
from typing import Any

import torch

from aitune_fp.core.accuracy import NoiseFloor
from aitune_fp.core.mismatch import Mismatch
from aitune_fp.correctness._leaves import (
    EXACT_SCALARS,
    SCALARS,
    as_tensor_if_array,
    check_finite_outputs,
    children,
    item_path,
    kind,
    leaves,
    same,
    uncomparable,
    unravel,
)
from aitune_fp.correctness._values import Walk, capped, compare_floats
from aitune_fp.correctness.failures import CheckName, CorrectnessError
from aitune_fp.correctness.tolerances import Tolerances, least_precise
from aitune_fp.errors import InvalidTypeError


def compare_outputs(
    actual: Any,
    expected: Any,
    *,
    path: str = "output",
    expected_dtype: torch.dtype | None = None,
    tolerances: Tolerances | None = None,
    noise_floor: NoiseFloor | None = None,
) -> Mismatch:
    """Raise :class:`CorrectnessError` unless ``actual`` matches the reference ``expected``."""
    check_expected_dtype(expected_dtype)
    walk = Walk(
        tol=tolerances or Tolerances(), expected_dtype=expected_dtype, noise_floor=noise_floor
    )
    compare_tree(actual, expected, path, walk)
    return Mismatch.combine(walk.tally)


def compare_tree(actual: Any, expected: Any, path: str, walk: Walk) -> None:
    """Finiteness of the whole candidate output, then every leaf; passes go to ``walk.tally``."""
    check_finite_outputs(actual, expected, path, [])
    _compare(actual, expected, path, walk)


def check_comparable(output: Any, *, path: str = "output") -> None:
    """Raise :class:`CorrectnessError` (check ``type``) if ``output`` holds a leaf nothing compares."""
    for leaf_path, _, leaf in leaves(output, path, []):
        leaf = as_tensor_if_array(leaf)
        if leaf is None or isinstance(leaf, (torch.Tensor, torch.Size, *SCALARS)):
            continue
        raise uncomparable(leaf, leaf_path)


def _differs(path: str, check: CheckName, what: str) -> CorrectnessError:
    """The :class:`CorrectnessError` of output ``path`` failing ``check``: ``path: what``."""
    return CorrectnessError(f"{path}: {what}", path=path, check=check)


def check_expected_dtype(expected_dtype: object) -> None:
    """Refuse an ``expected_dtype`` that is not None or a floating torch dtype."""
    if expected_dtype is None:
        return
    if not isinstance(expected_dtype, torch.dtype) or not expected_dtype.is_floating_point:
        raise InvalidTypeError(
            f"expected_dtype must be None or a floating torch.dtype, got {expected_dtype!r}"
        )


def _compare(
    actual: Any,
    expected: Any,
    path: str,
    walk: Walk,
) -> None:
    """Compare one node of the output tree, recursing into containers."""
    actual = as_tensor_if_array(actual)
    expected = as_tensor_if_array(expected)
    if isinstance(expected, torch.Tensor):
        if not isinstance(actual, torch.Tensor):
            raise _differs(path, "type", f"expected {kind(expected)} but got {kind(actual)}")
        _compare_tensors(actual, expected, path, walk)
        return
    if isinstance(expected, Mapping):
        _compare_mappings(actual, expected, path, walk)
        return
    if isinstance(expected, (tuple, list)):
        if type(actual) is not type(expected):
            raise _differs(
                path,
                "structure",
                f"expected a {type(expected).__name__} of {len(expected)} items but got "
                f"{kind(actual)}",
            )
        if len(actual) != len(expected):
            raise _differs(
                path, "structure", f"expected {len(expected)} items but got {len(actual)}"
            )
        for index, (a, e) in enumerate(zip(actual, expected, strict=True)):
            _compare(a, e, item_path(expected, path, index), walk)
        return
    node = children(expected)
    if node is not None:
        _compare_nodes(actual, expected, node, path, walk)
        return
    _compare_scalars(actual, expected, path, walk)


def _compare_nodes(
    actual: Any,
    expected: Any,
    node: tuple[list[tuple[str, Any, Any]], Any],
    path: str,
    walk: Walk,
) -> None:
    """A dataclass or registered pytree node: same type, same non-tensor part, same children."""
    label = type(expected).__name__
    if type(actual) is not type(expected):
        raise _differs(path, "structure", f"expected a {label} but got {kind(actual)}")
    found = children(actual)
    assert found is not None  # the same type flattens the same way
    (expected_children, expected_context), (actual_children, actual_context) = node, found
    if not same(actual_context, expected_context):
        raise _differs(
            path,
            "structure",
            f"the {label}'s non-tensor part (its pytree context) differs from eager's: "
            f"expected {reprlib.repr(expected_context)}, got {reprlib.repr(actual_context)}",
        )
    expected_names = [suffix for suffix, _, _ in expected_children]
    actual_names = [suffix for suffix, _, _ in actual_children]
    if actual_names != expected_names:
        raise _differs(
            path,
            "structure",
            f"expected a {label} with children {', '.join(expected_names)} but got "
            f"{', '.join(actual_names) or 'none'}",
        )
    for (suffix, _, a), (_, _, e) in zip(actual_children, expected_children, strict=True):
        _compare(a, e, f"{path}{suffix}", walk)


def _compare_mappings(
    actual: Any,
    expected: Mapping[Any, Any],
    path: str,
    walk: Walk,
) -> None:
    """Mappings must have the same keys (any order); values are compared key by key."""
    if not isinstance(actual, Mapping):
        raise _differs(
            path,
            "structure",
            f"expected a mapping ({type(expected).__name__}) with keys "
            f"{sorted(map(repr, expected))} but got {kind(actual)}",
        )
    missing = [key for key in expected if key not in actual]
    extra = [key for key in actual if key not in expected]
    if missing or extra:
        parts = []
        if missing:
            parts.append(f"missing keys {missing!r}")
        if extra:
            parts.append(f"unexpected keys {extra!r}")
        raise _differs(path, "structure", " and ".join(parts))
    for key, value in expected.items():
        _compare(actual[key], value, f"{path}[{key!r}]", walk)


def _compare_scalars(
    actual: Any,
    expected: Any,
    path: str,
    walk: Walk,
) -> None:
    """None, bool, int, str, bytes and float leaves; anything else is refused explicitly."""
    if expected is None:
        if actual is not None:
            raise _differs(path, "type", f"expected None but got {kind(actual)}")
        return
    if isinstance(expected, EXACT_SCALARS):
        if type(actual) is not type(expected):
            raise _differs(
                path, "type", f"expected {type(expected).__name__} but got {kind(actual)}"
            )
        if actual != expected:
            raise _differs(path, "values", f"expected {expected!r} but got {actual!r}")
        return
    if isinstance(expected, float):
        if not isinstance(actual, float):
            raise _differs(path, "type", f"expected float but got {kind(actual)}")
        atol, rtol = walk.tol.for_dtype(least_precise(torch.float32, walk.expected_dtype))
        error = abs(actual - expected)
        limit = atol + rtol * abs(expected)
        if not math.isfinite(expected) or error > limit:
            raise _differs(
                path,
                "values",
                f"expected {expected!r} but got {actual!r} (abs error {error:.3g}, "
                f"atol={atol:g}, rtol={rtol:g})",
            )
        walk.tally.append(
            Mismatch(
                max_abs_error=error,
                max_rel_error=capped(error / abs(expected)) if expected else 0.0,
                budget_used=error / limit if limit > 0 else 0.0,
                atol=atol,
                rtol=rtol,
                path=path,
                n_elements=1,
            )
        )
        return
    raise uncomparable(expected, path)


def _compare_tensors(
    actual: torch.Tensor,
    expected: torch.Tensor,
    path: str,
    walk: Walk,
) -> None:
    """Shape, dtype and values (allclose in float32/64 with the tier's tolerances)."""
    if tuple(actual.shape) != tuple(expected.shape):
        raise _differs(
            path, "shape", f"expected shape {tuple(expected.shape)} but got {tuple(actual.shape)}"
        )
    if actual.device != expected.device:
        raise _differs(path, "device", f"expected device {expected.device} but got {actual.device}")
    if actual.requires_grad != expected.requires_grad:
        raise _differs(
            path,
            "requires_grad",
            f"expected requires_grad={expected.requires_grad} but got "
            f"requires_grad={actual.requires_grad} (an output that holds an autograd graph)",
        )
    allowed = {expected.dtype}
    if walk.expected_dtype is not None and expected.dtype.is_floating_point:
        allowed.add(walk.expected_dtype)
    if actual.dtype not in allowed:
        wanted = " or ".join(sorted(str(d) for d in allowed))
        raise _differs(path, "dtype", f"expected dtype {wanted} but got {actual.dtype}")
    if expected.numel() == 0:
        return
    a = actual.detach().to(expected.device)
    e = expected.detach()
    if not (e.is_floating_point() or e.is_complex()):
        bad = a != e
        if bool(bad.any()):
            index = unravel(int(bad.reshape(-1).nonzero()[0]), tuple(e.shape))
            raise _differs(
                path,
                "values",
                "values differ from the eager reference (exact comparison for "
                f"{e.dtype}): {int(bad.sum())} of {e.numel()} elements; first at index {index}: "
                f"got {a[index].item()!r}, expected {e[index].item()!r}",
            )
        walk.tally.append(Mismatch(path=path, n_elements=e.numel()))
        return
    compare_floats(a, e, path, least_precise(a.dtype, e.dtype, walk.expected_dtype), walk)
