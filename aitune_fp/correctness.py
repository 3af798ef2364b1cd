"""Correctness before speed: a candidate's outputs must match eager's, checked leaf by leaf.

For every recorded sample, at the spec's smallest and largest batch size, the candidate and the
eager reference run on fresh copies of the same batch. The candidate's outputs must be finite
(infinity reported before NaN), have the reference's structure, shapes and dtypes (or the declared
reduced dtype), and be close to the reference's values with dtype-aware tolerances. Non-tensor
outputs are compared explicitly; an output type we cannot compare is an error, never skipped.
"""

from __future__ import annotations

import dataclasses
import math
import reprlib
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, TypeAlias

import attrs
import torch

from aitune_fp._tree import clone_inputs
from aitune_fp.core._checks import check_choice, finite
from aitune_fp.core.mismatch import Mismatch
from aitune_fp.errors import AitunefpError, InvalidTypeError, InvalidValueError
from aitune_fp.inputs import BatchSpec, Sample, as_sample

__all__ = [
    "CHECKS",
    "CheckName",
    "Closeness",
    "CorrectnessError",
    "Mismatch",
    "ReferenceFailedError",
    "Tolerances",
    "check_comparable",
    "check_correctness",
    "compare_outputs",
    "served_batch_sizes",
]

#: The checks a :class:`CorrectnessError` can name.
CheckName: TypeAlias = Literal[
    "finite", "structure", "shape", "dtype", "values", "type", "exception"
]
CHECKS: tuple[CheckName, ...] = (
    "finite",
    "structure",
    "shape",
    "dtype",
    "values",
    "type",
    "exception",
)


class CorrectnessError(AitunefpError, RuntimeError):
    """A candidate's outputs disagree with the eager reference (or the candidate call failed).

    A ``RuntimeError``, not an ``AssertionError``: a wrong candidate is an expected, recoverable
    outcome that validation catches to reject it, while ``AssertionError`` signals a broken
    invariant in our own code; keeping them apart stops a library bug passing as a rejection.
    """

    def __init__(
        self,
        message: str,
        *,
        path: str,
        check: CheckName,
        sample_index: int | None = None,
        batch_size: int | None = None,
    ) -> None:
        """Record the output ``path`` and the ``check`` that failed next to the message."""
        check_choice("check", check, CHECKS)
        super().__init__(message)
        self.path = path
        self.check: CheckName = check
        self.sample_index = sample_index
        self.batch_size = batch_size

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickle with the keyword attributes (exceptions pickle only ``args`` by default)."""
        return (
            _rebuild_error,
            (str(self), self.path, self.check, self.sample_index, self.batch_size),
        )


class ReferenceFailedError(AitunefpError, RuntimeError):
    """The eager reference itself failed on a sample, so nothing can be compared.

    Not a :class:`CorrectnessError`: the candidate is not at fault. A ``RuntimeError``, as before.
    """


def _rebuild_error(
    message: str, path: str, check: CheckName, sample_index: int | None, batch_size: int | None
) -> CorrectnessError:
    """Unpickle a :class:`CorrectnessError`."""
    return CorrectnessError(
        message, path=path, check=check, sample_index=sample_index, batch_size=batch_size
    )


@attrs.frozen(kw_only=True)
class Tolerances:
    """Absolute and relative tolerances per precision tier: ``|a - e| <= atol + rtol * |e|``.

    The tier is the least precise of the candidate's dtype, the reference's dtype and the declared
    dtype; float16, bfloat16 and the float8 types are "reduced". Integers and bools compare exactly.
    ``scale_atol`` adds to ``atol`` that fraction of the reference tensor's root mean square: an
    allowance that grows with the outputs' scale, for quantized backends whose error does.
    """

    float64_atol: float = attrs.field(default=1e-6, validator=finite(minimum=0))
    float64_rtol: float = attrs.field(default=1e-6, validator=finite(minimum=0))
    float32_atol: float = attrs.field(default=1e-3, validator=finite(minimum=0))
    float32_rtol: float = attrs.field(default=1e-3, validator=finite(minimum=0))
    reduced_atol: float = attrs.field(default=1e-2, validator=finite(minimum=0))
    reduced_rtol: float = attrs.field(default=1e-2, validator=finite(minimum=0))
    scale_atol: float = attrs.field(default=0.0, validator=finite(minimum=0))

    def for_dtype(self, dtype: torch.dtype) -> tuple[float, float]:
        """Return ``(atol, rtol)`` for values of ``dtype`` (exact for integers and bools)."""
        if not (dtype.is_floating_point or dtype.is_complex):
            return 0.0, 0.0
        eps = _eps(dtype)
        if eps >= torch.finfo(torch.float16).eps:
            return self.reduced_atol, self.reduced_rtol
        if eps >= torch.finfo(torch.float32).eps:
            return self.float32_atol, self.float32_rtol
        return self.float64_atol, self.float64_rtol


def _eps(dtype: torch.dtype) -> float:
    """Machine epsilon of a floating or complex dtype (a complex's is its real part's)."""
    if dtype.is_complex:
        dtype = dtype.to_real()
    return float(torch.finfo(dtype).eps)


def _least_precise(*dtypes: torch.dtype | None) -> torch.dtype:
    """Among floating/complex dtypes, the one with the largest epsilon (float32 if none)."""
    floating = [d for d in dtypes if d is not None and (d.is_floating_point or d.is_complex)]
    if not floating:
        return torch.float32
    return max(floating, key=_eps)


#: Python scalars compared exactly, and all the scalar types compared (float: with tolerances).
_EXACT_SCALARS = (bool, int, str, bytes)
_SCALARS = (*_EXACT_SCALARS, float)


# ---- the checks -------------------------------------------------------------------------------


def compare_outputs(
    actual: Any,
    expected: Any,
    *,
    path: str = "output",
    expected_dtype: torch.dtype | None = None,
    tolerances: Tolerances | None = None,
) -> Mismatch:
    """Raise :class:`CorrectnessError` unless ``actual`` matches the reference ``expected``.

    Order: finite (the whole candidate output; inf before NaN), then per leaf structure, type,
    shape, dtype and values. ``expected_dtype`` declares a reduced precision: floating outputs may
    then be in that dtype (or the reference's) and are compared with its tolerances. Returns the
    worst mismatch found, against the budget, when the outputs match.
    """
    _check_expected_dtype(expected_dtype)
    tol = tolerances if tolerances is not None else Tolerances()
    _check_finite(actual, expected, path, [])
    tally: list[Mismatch] = []
    _compare(actual, expected, path, expected_dtype, tol, tally)
    return Mismatch.combine(tally)


def check_comparable(output: Any, *, path: str = "output") -> None:
    """Raise :class:`CorrectnessError` (check ``type``) if ``output`` holds a leaf nothing compares.

    Only the structure is looked at, not the values: what the up-front eager call checks, so an
    output type :func:`compare_outputs` would refuse stops a tune before any candidate is built.
    """
    for leaf_path, _, leaf in _leaves(output, path, []):
        leaf = _as_tensor_if_array(leaf)
        if leaf is None or isinstance(leaf, (torch.Tensor, torch.Size, *_SCALARS)):
            continue
        raise _uncomparable(leaf, leaf_path)


def check_correctness(
    candidate: Callable[..., Any],
    reference: Callable[..., Any],
    graph_spec: BatchSpec,
    data: Sequence[Sample],
    *,
    expected_dtype: torch.dtype | None = None,
    tolerances: Tolerances | None = None,
    name: str = "",
    batch_sizes: Sequence[int] = (),
    grad_mode: bool = True,
) -> Mismatch:
    """Check ``candidate`` against ``reference`` on every sample at every batch size it serves.

    The batch sizes: :func:`served_batch_sizes` (the two ends, every power of two between them,
    and ``batch_sizes`` within the range). Both run under ``torch.no_grad()`` on their own fresh
    copies of each batch, so the stored samples are never mutated; with ``grad_mode`` the
    candidate is also called once with grad enabled (the first sample at the largest size),
    since a user's call may run either way. Returns the worst mismatch over all of them against
    the budget (a pass still says how close it came). Raises :class:`CorrectnessError` naming
    the sample, batch size, output path and failed check; a failing reference raises
    :class:`ReferenceFailedError` (a ``RuntimeError``: not the candidate's fault).
    """
    _check_expected_dtype(expected_dtype)
    data_value: object = data
    if isinstance(data_value, (str, bytes)) or not isinstance(data_value, Sequence):
        raise InvalidTypeError(f"data must be a sequence of samples, got {type(data).__name__}")
    if not data:
        raise InvalidValueError(
            f"data must hold at least one sample for the correctness check "
            f"(graph spec {graph_spec.name!r}), got none"
        )
    tol = tolerances if tolerances is not None else Tolerances()
    prefix = f"{name}: " if name else ""
    sizes = served_batch_sizes(
        graph_spec.min_batch_size, graph_spec.get_max_batch_size(), batch_sizes
    )
    tally: list[Mismatch] = []
    cases = [(i, as_sample(item), size, False) for i, item in enumerate(data) for size in sizes]
    if grad_mode:
        cases.append((0, as_sample(data[0]), sizes[-1], True))
    for index, sample, size, with_grad in cases:
        batch = graph_spec.make_batch(sample, size)
        where = f"sample {index} at batch size {size}{' with grad enabled' if with_grad else ''}"
        args, kwargs = clone_inputs(batch.args, batch.kwargs)
        try:
            with torch.no_grad():
                expected = reference(*args, **kwargs)
        except Exception as exc:
            raise ReferenceFailedError(
                f"{prefix}the reference (eager) failed on {where}: {type(exc).__name__}: {exc}"
            ) from exc
        args, kwargs = clone_inputs(batch.args, batch.kwargs)
        try:
            with torch.set_grad_enabled(with_grad):
                actual = _detached(candidate(*args, **kwargs))
        except Exception as exc:
            raise CorrectnessError(
                f"{prefix}{where}: output: the candidate raised {type(exc).__name__}: {exc}",
                path="output",
                check="exception",
                sample_index=index,
                batch_size=size,
            ) from exc
        try:
            _check_finite(actual, expected, "output", [])
            _compare(actual, expected, "output", expected_dtype, tol, tally)
        except CorrectnessError as err:
            raise CorrectnessError(
                f"{prefix}{where}: {err}",
                path=err.path,
                check=err.check,
                sample_index=index,
                batch_size=size,
            ) from None
    return Mismatch.combine(tally)


def served_batch_sizes(low: int, high: int, extra: Sequence[int] = ()) -> list[int]:
    """The batch sizes a candidate is checked at, in ``low..high``.

    Both ends, every power of two between them, and ``extra`` (``ProfilingConfig.batch_sizes``).
    """
    sizes = {low, high, *(s for s in extra if low <= s <= high)}
    power = 1
    while power < high:
        if power > low:
            sizes.add(power)
        power *= 2
    return sorted(sizes)


def _detached(value: Any) -> Any:
    """``value`` with every tensor in it detached (an output computed with grad enabled)."""
    from torch.utils import _pytree

    return _pytree.tree_map(lambda x: x.detach() if isinstance(x, torch.Tensor) else x, value)


@attrs.frozen(kw_only=True)
class Closeness:
    """The pipeline's check that a candidate computes what eager computes (pluggable).

    ``check`` runs once, after the build: every sample at every batch size it serves
    (:func:`served_batch_sizes`), and once with grad enabled.
    ``spot`` runs on outputs of timed calls. ``tolerances``: one budget for every candidate;
    None gives each backend its own (its ``tolerances`` attribute, else the default tiers).
    ``enabled=False`` skips both, for backends whose values differ by design.
    """

    enabled: bool = attrs.field(default=True, validator=attrs.validators.instance_of(bool))
    tolerances: Tolerances | None = attrs.field(
        default=None, validator=attrs.validators.optional(attrs.validators.instance_of(Tolerances))
    )

    def budget(self, backend: object) -> Tolerances | None:
        """The tolerances ``backend`` is held to (None: the default tiers)."""
        if self.tolerances is not None:
            return self.tolerances
        own = getattr(backend, "tolerances", None)
        return own if isinstance(own, Tolerances) else None

    def check(
        self,
        candidate: Callable[..., Any],
        reference: Callable[..., Any],
        graph_spec: BatchSpec,
        data: Sequence[Sample],
        *,
        expected_dtype: torch.dtype | None,
        tolerances: Tolerances | None,
        name: str = "",
        batch_sizes: Sequence[int] = (),
    ) -> Mismatch | None:
        """The worst mismatch over the samples (None when switched off); raises on a failure."""
        if not self.enabled:
            return None
        return check_correctness(
            candidate,
            reference,
            graph_spec,
            data,
            expected_dtype=expected_dtype,
            tolerances=tolerances,
            name=name,
            batch_sizes=batch_sizes,
        )

    def spot(
        self,
        output: Any,
        expected: Any,
        *,
        expected_dtype: torch.dtype | None,
        tolerances: Tolerances | None,
    ) -> Mismatch | None:
        """How far one timed call's output is from eager's (None when switched off)."""
        if not self.enabled:
            return None
        return compare_outputs(
            output, expected, expected_dtype=expected_dtype, tolerances=tolerances
        )


def _check_expected_dtype(expected_dtype: object) -> None:
    """Refuse an ``expected_dtype`` that is not None or a floating torch dtype."""
    if expected_dtype is None:
        return
    if not isinstance(expected_dtype, torch.dtype) or not expected_dtype.is_floating_point:
        raise InvalidTypeError(
            f"expected_dtype must be None or a floating torch.dtype, got {expected_dtype!r}"
        )


# ---- finiteness -------------------------------------------------------------------------------


def _as_tensor_if_array(value: Any) -> Any:
    """Convert a numpy array or scalar to a tensor (numpy only if already imported)."""
    numpy = sys.modules.get("numpy")
    if numpy is not None and isinstance(value, (numpy.ndarray, numpy.generic)):
        return torch.as_tensor(numpy.asarray(value))
    return value


def _lookup(value: Any, keys: list[Any]) -> Any:
    """Follow ``keys`` (as :func:`_children` gives them) into a nested value; LookupError if absent."""
    for key in keys:
        found = _children(value)
        if found is None:
            raise LookupError(key)
        for _, child_key, child in found[0]:
            if type(child_key) is type(key) and _same(child_key, key):
                value = child
                break
        else:
            raise LookupError(key)
    return value


def _reference_note(expected: Any, keys: list[Any]) -> str:
    """Say whether the reference is non-finite at the same place (the model's own doing)."""
    try:
        ref = _as_tensor_if_array(_lookup(expected, keys))
    except LookupError:
        return ""
    if isinstance(ref, torch.Tensor) and (ref.is_floating_point() or ref.is_complex()):
        if not bool(torch.isfinite(ref).all()):
            return " (the eager reference is non-finite there too)"
        return " (the eager reference is finite there)"
    return ""


def _check_finite(actual: Any, expected: Any, path: str, keys: list[Any]) -> None:
    """Raise ``finite`` at the first tensor/float holding inf (checked first) or NaN."""
    for leaf_path, leaf_keys, leaf in _leaves(actual, path, keys):
        leaf = _as_tensor_if_array(leaf)
        if isinstance(leaf, torch.Tensor) and (leaf.is_floating_point() or leaf.is_complex()):
            data = leaf.detach()
            for label, mask in (("infinity", torch.isinf(data)), ("NaN", torch.isnan(data))):
                count = int(mask.sum())
                if count:
                    first = _unravel(int(mask.reshape(-1).nonzero()[0]), tuple(data.shape))
                    raise CorrectnessError(
                        f"{leaf_path}: output tensor contains {label} values ({count} of "
                        f"{data.numel()} elements, first at index {first})"
                        f"{_reference_note(expected, leaf_keys)}",
                        path=leaf_path,
                        check="finite",
                    )
        elif isinstance(leaf, float) and not math.isfinite(leaf):
            label = "NaN" if math.isnan(leaf) else "infinity"
            raise CorrectnessError(
                f"{leaf_path}: output float is {label} ({leaf!r})", path=leaf_path, check="finite"
            )


def _leaves(value: Any, path: str, keys: list[Any]) -> list[tuple[str, list[Any], Any]]:
    """All leaves of an output (see :func:`_children`) with their paths and key lists."""
    found = _children(value)
    if found is None:
        return [(path, keys, value)]
    leaves: list[tuple[str, list[Any], Any]] = []
    for suffix, key, item in found[0]:
        leaves.extend(_leaves(item, f"{path}{suffix}", [*keys, key]))
    return leaves


def _children(value: Any) -> tuple[list[tuple[str, Any, Any]], Any] | None:
    """One level of an output tree: ``([(path suffix, key, child), ...], context)``, or None.

    Mappings (``['key']``, ``ModelOutput`` included), tuples and lists (``[i]``; a namedtuple's
    ``.field``), objects registered with ``torch.utils._pytree.register_pytree_node`` (their key
    paths when registered with ``flatten_with_keys_fn``: ``.key_cache``; else ``[i]``; the
    context is the node's non-tensor part) and dataclasses (``.field``). Anything else is a leaf.
    """
    if isinstance(value, Mapping):
        return [(f"[{key!r}]", key, item) for key, item in value.items()], None
    if isinstance(value, (tuple, list)) and not isinstance(value, torch.Size):
        return [
            (_item_path(value, "", index), index, item) for index, item in enumerate(value)
        ], None
    from torch.utils import _pytree

    node = _pytree.SUPPORTED_NODES.get(type(value))
    if node is not None:
        if node.flatten_with_keys_fn is not None:
            pairs, context = node.flatten_with_keys_fn(value)
            return [(str(key), key, item) for key, item in pairs], context
        items, context = node.flatten_fn(value)
        return [(f"[{index}]", index, item) for index, item in enumerate(items)], context
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return [
            (f".{field.name}", field.name, getattr(value, field.name))
            for field in dataclasses.fields(value)
        ], None
    return None


def _item_path(container: Sequence[Any], path: str, index: int) -> str:
    """Path of a sequence item: ``.field`` for namedtuples, ``[i]`` otherwise."""
    fields = getattr(container, "_fields", None)
    if isinstance(container, tuple) and isinstance(fields, tuple) and index < len(fields):
        return f"{path}.{fields[index]}"
    return f"{path}[{index}]"


def _same(a: Any, b: Any) -> bool:
    """``a == b`` as a bool; values that cannot say (tensors with several elements) count as same.

    Used for keys and pytree contexts (a node's non-tensor part), never for compared values.
    """
    try:
        return bool(a == b)
    except Exception:
        return True


# ---- structural and value comparison ---------------------------------------------------------


def _kind(value: Any) -> str:
    """Describe a value's type for messages."""
    if isinstance(value, torch.Tensor):
        return f"tensor (dtype {value.dtype}, shape {tuple(value.shape)})"
    return type(value).__name__


def _compare(
    actual: Any,
    expected: Any,
    path: str,
    expected_dtype: torch.dtype | None,
    tol: Tolerances,
    tally: list[Mismatch],
) -> None:
    """Compare one node of the output tree, recursing into containers."""
    actual = _as_tensor_if_array(actual)
    expected = _as_tensor_if_array(expected)
    if isinstance(expected, torch.Tensor):
        if not isinstance(actual, torch.Tensor):
            raise CorrectnessError(
                f"{path}: expected {_kind(expected)} but got {_kind(actual)}",
                path=path,
                check="type",
            )
        _compare_tensors(actual, expected, path, expected_dtype, tol, tally)
        return
    if isinstance(expected, Mapping):
        _compare_mappings(actual, expected, path, expected_dtype, tol, tally)
        return
    if isinstance(expected, (tuple, list)):
        if type(actual) is not type(expected):
            raise CorrectnessError(
                f"{path}: expected a {type(expected).__name__} of {len(expected)} items but got "
                f"{_kind(actual)}",
                path=path,
                check="structure",
            )
        if len(actual) != len(expected):
            raise CorrectnessError(
                f"{path}: expected {len(expected)} items but got {len(actual)}",
                path=path,
                check="structure",
            )
        for index, (a, e) in enumerate(zip(actual, expected, strict=True)):
            _compare(a, e, _item_path(expected, path, index), expected_dtype, tol, tally)
        return
    node = _children(expected)
    if node is not None:
        _compare_nodes(actual, expected, node, path, expected_dtype, tol, tally)
        return
    _compare_scalars(actual, expected, path, expected_dtype, tol, tally)


def _compare_nodes(
    actual: Any,
    expected: Any,
    node: tuple[list[tuple[str, Any, Any]], Any],
    path: str,
    expected_dtype: torch.dtype | None,
    tol: Tolerances,
    tally: list[Mismatch],
) -> None:
    """A dataclass or registered pytree node: same type, same non-tensor part, same children."""
    kind = type(expected).__name__
    if type(actual) is not type(expected):
        raise CorrectnessError(
            f"{path}: expected a {kind} but got {_kind(actual)}", path=path, check="structure"
        )
    found = _children(actual)
    assert found is not None  # the same type flattens the same way
    (expected_children, expected_context), (actual_children, actual_context) = node, found
    if not _same(actual_context, expected_context):
        raise CorrectnessError(
            f"{path}: the {kind}'s non-tensor part (its pytree context) differs from eager's: "
            f"expected {reprlib.repr(expected_context)}, got {reprlib.repr(actual_context)}",
            path=path,
            check="structure",
        )
    expected_names = [suffix for suffix, _, _ in expected_children]
    actual_names = [suffix for suffix, _, _ in actual_children]
    if actual_names != expected_names:
        raise CorrectnessError(
            f"{path}: expected a {kind} with children {', '.join(expected_names)} but got "
            f"{', '.join(actual_names) or 'none'}",
            path=path,
            check="structure",
        )
    for (suffix, _, a), (_, _, e) in zip(actual_children, expected_children, strict=True):
        _compare(a, e, f"{path}{suffix}", expected_dtype, tol, tally)


def _compare_mappings(
    actual: Any,
    expected: Mapping[Any, Any],
    path: str,
    expected_dtype: torch.dtype | None,
    tol: Tolerances,
    tally: list[Mismatch],
) -> None:
    """Mappings must have the same keys (any order); values are compared key by key."""
    if not isinstance(actual, Mapping):
        raise CorrectnessError(
            f"{path}: expected a mapping ({type(expected).__name__}) with keys "
            f"{sorted(map(repr, expected))} but got {_kind(actual)}",
            path=path,
            check="structure",
        )
    missing = [key for key in expected if key not in actual]
    extra = [key for key in actual if key not in expected]
    if missing or extra:
        parts = []
        if missing:
            parts.append(f"missing keys {missing!r}")
        if extra:
            parts.append(f"unexpected keys {extra!r}")
        raise CorrectnessError(f"{path}: {' and '.join(parts)}", path=path, check="structure")
    for key, value in expected.items():
        _compare(actual[key], value, f"{path}[{key!r}]", expected_dtype, tol, tally)


def _compare_scalars(
    actual: Any,
    expected: Any,
    path: str,
    expected_dtype: torch.dtype | None,
    tol: Tolerances,
    tally: list[Mismatch],
) -> None:
    """None, bool, int, str, bytes and float leaves; anything else is refused explicitly."""
    if expected is None:
        if actual is not None:
            raise CorrectnessError(
                f"{path}: expected None but got {_kind(actual)}", path=path, check="type"
            )
        return
    if isinstance(expected, _EXACT_SCALARS):
        if type(actual) is not type(expected):
            raise CorrectnessError(
                f"{path}: expected {type(expected).__name__} but got {_kind(actual)}",
                path=path,
                check="type",
            )
        if actual != expected:
            raise CorrectnessError(
                f"{path}: expected {expected!r} but got {actual!r}", path=path, check="values"
            )
        return
    if isinstance(expected, float):
        if not isinstance(actual, float):
            raise CorrectnessError(
                f"{path}: expected float but got {_kind(actual)}", path=path, check="type"
            )
        atol, rtol = tol.for_dtype(_least_precise(torch.float32, expected_dtype))
        error = abs(actual - expected)
        limit = atol + rtol * abs(expected)
        if not math.isfinite(expected) or error > limit:
            raise CorrectnessError(
                f"{path}: expected {expected!r} but got {actual!r} (abs error {error:.3g}, "
                f"atol={atol:g}, rtol={rtol:g})",
                path=path,
                check="values",
            )
        tally.append(
            Mismatch(
                max_abs_error=error,
                max_rel_error=_capped(error / abs(expected)) if expected else 0.0,
                budget_used=error / limit if limit > 0 else 0.0,
                atol=atol,
                rtol=rtol,
                path=path,
                n_elements=1,
            )
        )
        return
    raise _uncomparable(expected, path)


def _uncomparable(value: Any, path: str) -> CorrectnessError:
    """The error for an output leaf of a type nothing here can compare: its type and the fix."""
    kind = type(value)
    return CorrectnessError(
        f"{path}: cannot compare an output of type {kind.__module__}.{kind.__qualname__}: it is "
        "neither a tensor, a numpy array, None, bool, int, float, str or bytes, a container "
        "(tuple, list, namedtuple, mapping, dataclass) nor a registered pytree node. Register it "
        "so its tensors are compared: torch.utils._pytree.register_pytree_node("
        f"{kind.__qualname__}, flatten_fn, unflatten_fn), where flatten_fn(obj) returns "
        "(its tensors, its non-tensor part), as transformers does for DynamicCache; or have the "
        "model return tensors (or a container of them) instead",
        path=path,
        check="type",
    )


def _compare_tensors(
    actual: torch.Tensor,
    expected: torch.Tensor,
    path: str,
    expected_dtype: torch.dtype | None,
    tol: Tolerances,
    tally: list[Mismatch],
) -> None:
    """Shape, dtype and values (allclose in float32/64 with the tier's tolerances)."""
    if tuple(actual.shape) != tuple(expected.shape):
        raise CorrectnessError(
            f"{path}: expected shape {tuple(expected.shape)} but got {tuple(actual.shape)}",
            path=path,
            check="shape",
        )
    allowed = {expected.dtype}
    if expected_dtype is not None and expected.dtype.is_floating_point:
        allowed.add(expected_dtype)
    if actual.dtype not in allowed:
        wanted = " or ".join(sorted(str(d) for d in allowed))
        raise CorrectnessError(
            f"{path}: expected dtype {wanted} but got {actual.dtype}", path=path, check="dtype"
        )
    if expected.numel() == 0:
        return
    a = actual.detach().to(expected.device)
    e = expected.detach()
    if not (e.is_floating_point() or e.is_complex()):
        bad = a != e
        if bool(bad.any()):
            index = _unravel(int(bad.reshape(-1).nonzero()[0]), tuple(e.shape))
            raise CorrectnessError(
                f"{path}: values differ from the eager reference (exact comparison for "
                f"{e.dtype}): {int(bad.sum())} of {e.numel()} elements; first at index {index}: "
                f"got {a[index].item()!r}, expected {e[index].item()!r}",
                path=path,
                check="values",
            )
        tally.append(Mismatch(path=path, n_elements=e.numel()))
        return
    _compare_floats(a, e, path, _least_precise(a.dtype, e.dtype, expected_dtype), tol, tally)


def _compare_floats(
    a: torch.Tensor,
    e: torch.Tensor,
    path: str,
    tier: torch.dtype,
    tol: Tolerances,
    tally: list[Mismatch],
) -> None:
    """Allclose with the tier's tolerances; the message gives the worst mismatch and where."""
    atol, rtol = tol.for_dtype(tier)
    wide = a.dtype in (torch.float64, torch.complex128) or e.dtype in (
        torch.float64,
        torch.complex128,
    )
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
    bad = (diff > limit) | reference_bad
    count = int(bad.sum())
    if not count:
        tally.append(_measured(diff, magnitude, limit, atol, rtol, path))
        return
    shape = tuple(e.shape)
    flat_diff = torch.where(reference_bad, torch.inf, diff).reshape(-1)
    excess = (flat_diff - limit.reshape(-1)).nan_to_num(nan=torch.inf)
    worst = _unravel(int(excess.argmax()), shape)
    rel = torch.where(
        magnitude > 0, diff / magnitude, torch.where(diff > 0, torch.inf, 0.0)
    ).reshape(-1)
    finite_diff = diff.reshape(-1).nan_to_num(nan=torch.inf)
    max_abs_index = _unravel(int(finite_diff.argmax()), shape)
    max_rel_index = _unravel(int(rel.nan_to_num(nan=torch.inf).argmax()), shape)
    note = ""
    if bool(reference_bad.any()):
        note = f"; the eager reference itself is non-finite at {int(reference_bad.sum())} elements"
    raise CorrectnessError(
        f"{path}: values differ from the eager reference beyond atol={atol:g}, rtol={rtol:g} "
        f"({tier} tolerances, compared in {compute}): {count} of {e.numel()} elements; "
        f"worst at index {worst}: got {_fmt(a_c[worst])}, expected {_fmt(e_c[worst])}; "
        f"max abs error {float(finite_diff.max()):.4g} at index {max_abs_index}; "
        f"max rel error {float(rel.nan_to_num(nan=torch.inf).max()):.4g} at index "
        f"{max_rel_index}{note}",
        path=path,
        check="values",
    )


def _measured(
    diff: torch.Tensor,
    magnitude: torch.Tensor,
    limit: torch.Tensor,
    atol: float,
    rtol: float,
    path: str,
) -> Mismatch:
    """The worst errors of a leaf that passed, and the largest share of its allowance used."""
    used = torch.where(limit > 0, diff / limit.clamp_min(torch.finfo(limit.dtype).tiny), 0.0)
    nonzero = magnitude > 0
    rel = diff[nonzero].double() / magnitude[nonzero].double()
    return Mismatch(
        max_abs_error=_capped(float(diff.max())),
        max_rel_error=_capped(float(rel.max())) if rel.numel() else 0.0,
        budget_used=_capped(float(used.max())),
        atol=atol,
        rtol=rtol,
        path=path,
        n_elements=diff.numel(),
    )


def _capped(value: float) -> float:
    """A finite error figure (a relative error next to a denormal reference may overflow)."""
    return value if math.isfinite(value) else sys.float_info.max


def _fmt(value: torch.Tensor) -> str:
    """Format one element for a message."""
    item = value.item()
    if isinstance(item, complex):
        return f"{item:.6g}"
    return f"{float(item):.6g}"


def _unravel(flat_index: int, shape: tuple[int, ...]) -> tuple[int, ...]:
    """Turn a flat (row-major) index into a tuple index for ``shape``."""
    index: list[int] = []
    for dim in reversed(shape):
        flat_index, rest = divmod(flat_index, dim)
        index.append(rest)
    return tuple(reversed(index))
