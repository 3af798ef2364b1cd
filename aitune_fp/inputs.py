"""Model inputs and batching: a ``Sample`` of call arguments and the ``GraphSpec`` that batches it.

Torch-free at import (torch loads inside ``make_batch`` and ``copy_sample``): part of the pure API.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias, TypeGuard

import attrs

from aitune_fp.core._checks import check_int, integer, of_type
from aitune_fp.errors import InvalidTypeError, InvalidValueError

if TYPE_CHECKING:
    import torch

__all__ = ["BatchSpec", "CopyRing", "GraphSpec", "Sample", "as_sample", "copy_sample", "ring_size"]

#: Key of one input: its positional index, or its keyword name.
InputKey: TypeAlias = int | str


def _to_args(value: object) -> tuple[Any, ...]:
    if isinstance(value, (str, bytes)) or not isinstance(value, (tuple, list)):
        raise InvalidTypeError(
            f"args must be a tuple or list of positional arguments, got {value!r}"
        )
    return tuple(value)


def _to_kwargs(value: object) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise InvalidTypeError(f"kwargs must be a mapping of keyword arguments, got {value!r}")
    for key in value:
        if not isinstance(key, str):
            raise InvalidTypeError(f"kwargs keys must be strings, got {key!r}")
    return types.MappingProxyType(dict(value))


@attrs.frozen(eq=False)
class Sample:
    """One set of call arguments for a model: ``model(*args, **kwargs)``."""

    args: tuple[Any, ...] = attrs.field(default=(), converter=_to_args)
    kwargs: Mapping[str, Any] = attrs.field(factory=dict, converter=_to_kwargs)

    def items(self) -> Iterator[tuple[InputKey, Any]]:
        """Every input with its key: positional indices first, then keyword names."""
        yield from enumerate(self.args)
        yield from self.kwargs.items()

    def call(self, fn: Any) -> Any:
        """Call ``fn(*args, **kwargs)`` and return its result."""
        return fn(*self.args, **self.kwargs)

    def map(self, fn: Callable[[InputKey, Any], Any]) -> Sample:
        """A new sample holding ``fn(key, value)`` for each top-level input."""
        return Sample(
            tuple(fn(i, v) for i, v in enumerate(self.args)),
            {k: fn(k, v) for k, v in self.kwargs.items()},
        )


def as_sample(value: object) -> Sample:
    """Return ``value`` as a :class:`Sample`: a Sample as is, or a plain ``(args, kwargs)`` pair."""
    if isinstance(value, Sample):
        return value
    if is_pair(value):
        return Sample(value[0], value[1])
    raise InvalidTypeError(
        f"a sample must be a Sample or an (args, kwargs) tuple, got {type(value).__name__}: "
        f"{value!r:.200}"
    )


def is_pair(value: object) -> TypeGuard[tuple[Sequence[Any], Mapping[str, Any]]]:
    """Whether ``value`` is an ``(args, kwargs)`` pair, as :func:`as_sample` reads one."""
    return (
        isinstance(value, tuple)
        and len(value) == 2
        and isinstance(value[0], (tuple, list))
        and isinstance(value[1], Mapping)
    )


def check_samples(name: str, value: object) -> None:
    """Refuse a ``value`` that is not a sequence of samples (a str or bytes is not one)."""
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise InvalidTypeError(f"{name} must be a sequence of samples, got {type(value).__name__}")


def _is_tensor(value: object) -> bool:
    """Whether ``value`` is a torch tensor, without importing torch if nobody has."""
    torch_module = sys.modules.get("torch")
    return torch_module is not None and isinstance(value, torch_module.Tensor)


def copy_sample(sample: Sample) -> Sample:
    """Return a Sample whose tensors, nested ones too, are fresh clones (other values shared)."""
    sample = as_sample(sample)
    if sys.modules.get("torch") is None:  # no torch loaded: there cannot be any tensor
        return Sample(sample.args, dict(sample.kwargs))
    from torch.utils._pytree import tree_map

    def clone(value: Any) -> Any:
        return value.clone() if _is_tensor(value) else value

    return sample.map(lambda _, v: tree_map(clone, v))


#: Most storages a :class:`CopyRing` keeps, and the bytes they may hold together (one arm).
RING_SLOTS = 8
RING_BYTES = 256 * 2**20


def ring_size(batch_bytes: int) -> int:
    """Storages in a ring for a batch of ``batch_bytes``: 8, fewer for large batches, at least 2."""
    return min(RING_SLOTS, max(2, RING_BYTES // max(batch_bytes, 1)))


def sample_bytes(sample: Sample) -> int:
    """The bytes of the tensors in ``sample`` (nested too): what one copy of it holds."""
    if sys.modules.get("torch") is None:
        return 0
    from torch.utils._pytree import tree_flatten

    leaves = tree_flatten((sample.args, dict(sample.kwargs)))[0]
    return sum(t.nelement() * t.element_size() for t in leaves if _is_tensor(t))


class CopyRing:
    """One arm's timed-call inputs: K storages, filled in turn with the values of each call."""

    def __init__(self) -> None:
        """An empty ring; its size is set by the first batch (:func:`ring_size`)."""
        self._slots: list[list[Any]] = []
        self._next = 0

    @property
    def size(self) -> int:
        """K, the storages in turn (0 before the first fill)."""
        return len(self._slots)

    def fill_block(self, samples: Sequence[Sample]) -> list[Sample]:
        """Each of ``samples``' own copy, all held at once: the ring grows to hold a block."""
        if samples and len(self._slots) < len(samples) + 1:
            size = max(len(samples) + 1, ring_size(sample_bytes(as_sample(samples[0]))))
            self._slots += [[] for _ in range(size - len(self._slots))]
        return [self.fill(s) for s in samples]

    def fill(self, sample: Sample) -> Sample:
        """The call's own copy of ``sample``, in the ring's next storage."""
        sample = as_sample(sample)
        if sys.modules.get("torch") is None:  # no torch loaded: there cannot be any tensor
            return copy_sample(sample)
        from torch.utils._pytree import tree_map

        if not self._slots:
            self._slots = [[] for _ in range(ring_size(sample_bytes(sample)))]
        held = iter(self._slots[self._next])
        used: list[Any] = []

        def put(value: Any) -> Any:
            if not _is_tensor(value):
                return value
            copy = _refill(next(held, None), value)
            used.append(copy)
            return copy

        filled = sample.map(lambda _, v: tree_map(put, v))
        self._slots[self._next] = used
        self._next = (self._next + 1) % len(self._slots)
        return filled


def _refill(old: Any, value: torch.Tensor) -> torch.Tensor:
    """``value``'s values in ``old``'s storage when it can hold them, else a clone of ``value``."""
    import torch

    if (
        old is not None
        and type(old) is type(value)
        and old.layout == torch.strided == value.layout
        and not value.requires_grad
        and not old.requires_grad
        and not value.is_quantized
        and old.dtype == value.dtype
        and old.device == value.device
        and old.shape == value.shape
        and old.stride() == value.stride()
    ):
        with torch.no_grad():
            return old.copy_(value)
    return value.clone()


def _to_axes(value: object) -> Mapping[InputKey, int | None]:
    if not isinstance(value, Mapping):
        raise InvalidTypeError(f"batch_axes must be a mapping of input key to axis, got {value!r}")
    for key, axis in value.items():
        if isinstance(key, bool) or not isinstance(key, (int, str)):
            raise InvalidTypeError(
                f"batch_axes keys must be positional indices (int) or keyword names (str), got {key!r}"
            )
        if isinstance(key, int) and key < 0:
            raise InvalidValueError(f"batch_axes key must be a positional index >= 0, got {key!r}")
        if axis is not None and (isinstance(axis, bool) or not isinstance(axis, int)):
            raise InvalidTypeError(f"batch_axes[{key!r}] must be an int axis or None, got {axis!r}")
    return types.MappingProxyType(dict(value))


class BatchSpec(Protocol):
    """What the pipeline needs of a graph spec: the batch-size range and how to batch a sample."""

    @property
    def min_batch_size(self) -> int:
        """The smallest batch size the model serves."""

    @property
    def name(self) -> str:
        """The graph's name (in error messages)."""

    def get_max_batch_size(self) -> int:
        """The largest batch size the model serves."""

    def make_batch(self, sample: Sample | tuple[Any, Any], batch_size: int) -> Sample:
        """A new sample of ``batch_size`` rows made from ``sample``."""


@attrs.frozen
class GraphSpec:
    """Which batch sizes a model accepts and how its inputs are batched."""

    max_batch_size: int = attrs.field(default=1, validator=integer(minimum=1))
    batch_axes: Mapping[InputKey, int | None] = attrs.field(
        factory=dict, converter=_to_axes, kw_only=True, hash=False
    )
    min_batch_size: int = attrs.field(default=1, validator=integer(minimum=1), kw_only=True)
    name: str = attrs.field(default="0", validator=of_type(str), kw_only=True)

    def __attrs_post_init__(self) -> None:
        """Cross-field check: the batch-size range must not be empty."""
        if self.min_batch_size > self.max_batch_size:
            raise InvalidValueError(
                f"min_batch_size ({self.min_batch_size}) must be <= max_batch_size "
                f"({self.max_batch_size})"
            )

    def get_max_batch_size(self) -> int:
        """The largest batch size the model accepts (AITune's name; the baseline's batch size)."""
        return self.max_batch_size

    def axis_of(self, key: InputKey) -> int | None:
        """The batch axis declared for input ``key`` (0 unless overridden; None = not batched)."""
        return self.batch_axes.get(key, 0)

    def batch_dim(self, sample: Sample | tuple[Any, Any]) -> int | None:
        """The sample's common batch dimension, or None when it has no batched tensor input."""
        dims = self._batched(as_sample(sample))
        return next(iter(dims.values()))[1] if dims else None

    def make_batch(self, sample: Sample | tuple[Any, Any], batch_size: int) -> Sample:
        """Return a new Sample with every batched tensor tiled to ``batch_size`` rows on its axis."""
        size = check_int("batch_size", batch_size, minimum=1)
        if not self.min_batch_size <= size <= self.max_batch_size:
            raise InvalidValueError(
                f"batch_size must lie in {self.min_batch_size}..{self.max_batch_size} "
                f"(graph spec {self.name!r}), got {batch_size!r}"
            )
        sample = as_sample(sample)
        dims = self._batched(sample)

        def convert(key: InputKey, value: Any) -> Any:
            if key in dims:
                axis, n = dims[key]
                return _tile(value, axis, n, size)
            return value.clone() if _is_tensor(value) else value

        return sample.map(convert)

    def _batched(self, sample: Sample) -> dict[InputKey, tuple[int, int]]:
        """Batched tensor inputs: key -> (normalised axis, batch dimension), all dims checked equal."""
        found: dict[InputKey, tuple[int, int]] = {}
        for key, value in sample.items():
            axis = self.axis_of(key)
            if axis is None:
                continue
            if not _is_tensor(value):
                if key in self.batch_axes:
                    raise InvalidValueError(
                        f"input {key!r} is declared batched on axis {axis} but is not a tensor "
                        f"({type(value).__name__})"
                    )
                continue
            ndim = value.dim()
            if not -ndim <= axis < ndim:
                raise InvalidValueError(
                    f"input {key!r} is batched on axis {axis} but has shape {tuple(value.shape)} "
                    f"({ndim} dims); set batch_axes[{key!r}] to its batch axis or None"
                )
            axis %= ndim
            dim = int(value.shape[axis])
            if dim < 1:
                raise InvalidValueError(
                    f"input {key!r} has an empty batch axis {axis} (shape {tuple(value.shape)})"
                )
            found[key] = (axis, dim)
        distinct = {dim for _, dim in found.values()}
        if len(distinct) > 1:
            detail = ", ".join(f"{k!r}: {d}" for k, (_, d) in found.items())
            raise InvalidValueError(f"batched inputs disagree on the batch dimension ({detail})")
        return found


def _tile(value: torch.Tensor, axis: int, n: int, size: int) -> torch.Tensor:
    """Rows ``i % n`` for ``i < size`` along ``axis``, as a new tensor."""
    import torch

    index = torch.arange(size, device=value.device) % n
    return value.index_select(axis, index)
