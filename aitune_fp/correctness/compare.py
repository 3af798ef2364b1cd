"""A candidate's outputs against eager's, leaf by leaf: structure, type, shape, dtype, values.

A floating leaf is held element-wise, or by its tier's norm criteria (``compare_floats``).
"""

from __future__ import annotations

import math
import re
import reprlib
from collections.abc import Mapping
from typing import Any

import attrs
import torch

from aitune_fp.core.accuracy import LeafStats, NoiseFloor, NormBudgets, capped, judge_leaf
from aitune_fp.core.messages import counted
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
    check_finite_outputs(actual, expected, path)
    _compare(actual, expected, path, walk)


def check_comparable(output: Any, *, path: str = "output") -> None:
    """Raise :class:`CorrectnessError` (check ``type``) if ``output`` holds a leaf nothing compares."""
    for leaf_path, leaf in leaves(output, path):
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


def _compare(actual: Any, expected: Any, path: str, walk: Walk) -> None:
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
                f"expected a {type(expected).__name__} of {counted(len(expected), 'item')} but got "
                f"{kind(actual)}",
            )
        if len(actual) != len(expected):
            raise _differs(
                path,
                "structure",
                f"expected {counted(len(expected), 'item')} but got {len(actual)}",
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


def _compare_mappings(actual: Any, expected: Mapping[Any, Any], path: str, walk: Walk) -> None:
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
    found = (("missing", missing), ("unexpected", extra))
    if missing or extra:
        raise _differs(path, "structure", " and ".join(f"{w} keys {k!r}" for w, k in found if k))
    for key, value in expected.items():
        _compare(actual[key], value, f"{path}[{key!r}]", walk)


def _compare_scalars(actual: Any, expected: Any, path: str, walk: Walk) -> None:
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


def _compare_tensors(actual: torch.Tensor, expected: torch.Tensor, path: str, walk: Walk) -> None:
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


#: The device types whose float32 math torch's TF32 flags govern.
TF32_DEVICES = frozenset({"cuda"})


def tf32_allowed() -> bool:
    """Whether torch may run float32 matmuls or convolutions on CUDA in TF32 (10-bit mantissa)."""
    return bool(torch.backends.cuda.matmul.allow_tf32 or torch.backends.cudnn.allow_tf32)


@attrs.define
class Walk:
    """The state of one comparison walk: the budget, the declared dtype, what passed so far."""

    tol: Tolerances
    expected_dtype: torch.dtype | None = None
    noise_floor: NoiseFloor | None = None
    tally: list[Mismatch] = attrs.field(factory=list)
    tf32: bool = attrs.field(factory=tf32_allowed)


def compare_floats(
    a: torch.Tensor, e: torch.Tensor, path: str, tier: torch.dtype, walk: Walk
) -> None:
    """Hold one floating leaf to its tier's budget: element-wise, or by the norm criteria."""
    tol = walk.tol
    label = str(tier)
    if walk.tf32 and tier == torch.float32 and e.device.type in TF32_DEVICES:
        # float32 math in TF32 has float16's epsilon: hold the leaf to that tier
        tier, label = torch.float16, "TF32 (float32 on CUDA with TF32 allowed)"
    atol, rtol = tol.for_dtype(tier)
    wide = bool({a.dtype, e.dtype} & {torch.float64, torch.complex128})
    if a.is_complex() or e.is_complex():
        compute = torch.complex128 if wide else torch.complex64
    else:
        compute = torch.float64 if wide else torch.float32
    a_c, e_c = a.to(compute), e.to(compute)
    diff = (a_c - e_c).abs()
    magnitude = e_c.abs()
    if tol.scale_atol and atol and e_c.numel():  # exact tiers (atol 0) stay exact
        finite = magnitude[torch.isfinite(magnitude)]
        rms = float(finite.double().square().mean().sqrt()) if finite.numel() else 0.0
        atol += tol.scale_atol * rms
    limit = atol + rtol * magnitude
    reference_bad = ~torch.isfinite(e_c)
    beyond = int(((diff > limit) | reference_bad).sum())
    if not tol.norm_decides(tier):
        if not beyond:
            walk.tally.append(_measured(diff, magnitude, limit, atol, rtol, path))
            return
        raise CorrectnessError(
            f"{path}: values differ from the eager reference beyond atol={atol:g}, rtol={rtol:g} "
            f"({label} tolerances, compared in {compute}): {beyond} of {e.numel()} elements; "
            f"{_worst(a_c, e_c, diff, limit, reference_bad)}",
            path=path,
            check="values",
        )
    # the norm criteria: the leaf reduced to norms and counts, judged in the core
    ok = ~reference_bad
    n_ok = int(ok.sum())
    diff_sq = capped(float(diff[ok].double().square().sum()))
    ref_sq = capped(float(magnitude[ok].double().square().sum()))
    noise = walk.noise_floor.of(path) if walk.noise_floor is not None else None
    budgets = tol.norm_budgets(tier, noise)
    # An outlier is beyond its element-wise allowance *and* the RMS error the L2 budget allows.
    widened = limit + budgets.rel_l2 * (math.sqrt(ref_sq / n_ok) if n_ok else 0.0)
    outliers = int(((diff > widened) | reference_bad).sum())
    stats = LeafStats(n_elements=e_c.numel(), diff_sq=diff_sq, ref_sq=ref_sq, outliers=outliers)
    if class_scores(path):  # classifier rows: judged by top-1 agreement too
        rows, agreeing = _top1(a_c, e_c, widened, budgets)
        stats = attrs.evolve(stats, rows=rows, rows_agreeing=agreeing)
    criteria = judge_leaf(stats, budgets, path)
    measured = attrs.evolve(
        _measured(diff, magnitude, limit, atol, rtol, path),
        budget_used=max(c.used for c in criteria),
        criteria=criteria,
    )
    if all(c.passed for c in criteria):
        walk.tally.append(measured)
        return
    raise CorrectnessError(
        f"{path}: values differ from the eager reference beyond the norm criteria ({label} "
        f"tolerances): {measured.describe_criteria()}; {beyond} of {e_c.numel()} elements "
        f"beyond atol={atol:g}, rtol={rtol:g}; {_worst(a_c, e_c, diff, limit, reference_bad)}",
        path=path,
        check="values",
        mismatch=measured,
    )


def _worst(
    a_c: torch.Tensor,
    e_c: torch.Tensor,
    diff: torch.Tensor,
    limit: torch.Tensor,
    reference_bad: torch.Tensor,
) -> str:
    """Where a failing leaf is worst: the element most over its allowance, max abs and rel."""
    shape = tuple(e_c.shape)
    magnitude = e_c.abs()
    flat_diff = torch.where(reference_bad, torch.inf, diff).reshape(-1)
    excess = (flat_diff - limit.reshape(-1)).nan_to_num(nan=torch.inf)
    worst = unravel(int(excess.argmax()), shape)
    rel = torch.where(
        magnitude > 0, diff / magnitude, torch.where(diff > 0, torch.inf, 0.0)
    ).reshape(-1)
    finite_diff = diff.reshape(-1).nan_to_num(nan=torch.inf)
    max_abs_index = unravel(int(finite_diff.argmax()), shape)
    max_rel_index = unravel(int(rel.nan_to_num(nan=torch.inf).argmax()), shape)
    note = ""
    if bool(reference_bad.any()):
        note = f"; the eager reference itself is non-finite at {int(reference_bad.sum())} elements"
    return (
        f"worst at index {worst}: got {_fmt_scalar(a_c[worst])}, expected {_fmt_scalar(e_c[worst])}; "
        f"max abs error {float(finite_diff.max()):.4g} at index {max_abs_index}; "
        f"max rel error {float(rel.nan_to_num(nan=torch.inf).max()):.4g} at index "
        f"{max_rel_index}{note}"
    )


#: The last name in an output path: ``.logits`` or ``['logits']`` (an index like ``[0]`` is none).
_LAST_NAME = re.compile(r"""(?:\.(\w+)|\[(?:'([^']*)'|"([^"]*)")\])$""")


def class_scores(path: str) -> bool:
    """Whether the leaf at ``path`` may be class scores, to judge by top-1 agreement."""
    found = _LAST_NAME.search(path)
    if found is None:
        return True
    name = next(g for g in found.groups() if g is not None).lower()
    return "logit" in name or "score" in name


def _top1(
    a_c: torch.Tensor, e_c: torch.Tensor, widened: torch.Tensor, budgets: NormBudgets
) -> tuple[int, int]:
    """Rows of a 2-D real leaf (classifier logits), and those whose top-1 agrees with eager's."""
    if budgets.top1_agreement is None or e_c.ndim != 2 or e_c.shape[1] < 2 or e_c.is_complex():
        return 0, 0
    keep = torch.isfinite(e_c).all(dim=1)
    a_r, e_r, w_r = a_c[keep], e_c[keep], widened[keep]
    if not e_r.shape[0]:
        return 0, 0
    mine = e_r.argmax(dim=1, keepdim=True)
    theirs = a_r.argmax(dim=1, keepdim=True)
    gap = e_r.gather(1, mine) - e_r.gather(1, theirs)
    slack = w_r.gather(1, mine) + w_r.gather(1, theirs)
    agree = (mine == theirs) | (gap <= slack)
    return int(e_r.shape[0]), int(agree.sum())


def _measured(
    diff: torch.Tensor,
    magnitude: torch.Tensor,
    limit: torch.Tensor,
    atol: float,
    rtol: float,
    path: str,
) -> Mismatch:
    """The worst errors of a leaf that passed, and the largest share of its allowance used."""
    finite = torch.isfinite(diff)
    if not bool(finite.all()):  # a non-finite reference the norm criteria left out
        diff, magnitude, limit = diff[finite], magnitude[finite], limit[finite]
    if not diff.numel():
        return Mismatch(atol=atol, rtol=rtol, path=path, n_elements=int(finite.numel()))
    used = torch.where(limit > 0, diff / limit.clamp_min(torch.finfo(limit.dtype).tiny), 0.0)
    nonzero = magnitude > 0
    rel = diff[nonzero].double() / magnitude[nonzero].double()
    return Mismatch(
        max_abs_error=capped(float(diff.max())),
        max_rel_error=capped(float(rel.max())) if rel.numel() else 0.0,
        budget_used=capped(float(used.max())),
        atol=atol,
        rtol=rtol,
        path=path,
        n_elements=int(finite.numel()),
    )


def _fmt_scalar(value: torch.Tensor) -> str:
    """Format one element for a message."""
    item = value.item()
    if isinstance(item, complex):
        return f"{item:.6g}"
    return f"{float(item):.6g}"
