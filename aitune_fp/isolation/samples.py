"""The sample guard: the caller's samples, kept before a tune and checked and restored after."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from aitune_fp.errors import InvalidStateError
from aitune_fp.inputs import Sample, is_pair
from aitune_fp.isolation.values import ContainerState, TensorState


class _SampleFields:
    """A :class:`Sample`'s ``args`` and ``kwargs`` objects (frozen, but not beyond reach)."""

    __slots__ = ("args", "kwargs", "label", "sample")

    def __init__(self, label: str, sample: Sample) -> None:
        self.label = label
        self.sample = sample
        self.args, self.kwargs = sample.args, sample.kwargs

    def changed(self) -> str | None:
        """Which field was swapped for another object, or None."""
        for field in ("args", "kwargs"):
            if getattr(self.sample, field) is not getattr(self, field):
                return f"{self.label}: {field} replaced"
        return None

    def restore(self, failures: list[str]) -> None:
        """Put the original ``args`` and ``kwargs`` objects back (past the frozen class)."""
        for field in ("args", "kwargs"):
            if getattr(self.sample, field) is not getattr(self, field):
                object.__setattr__(self.sample, field, getattr(self, field))


class _SampleTensor(TensorState):
    """A tensor inside a sample, named by where it sits."""

    __slots__ = ()

    def changed(self) -> str | None:
        """What changed, prefixed with where the tensor sits in the samples."""
        what = super().changed()
        return None if what is None else f"{self.name}: {what}"


class SampleGuard:
    """A snapshot of the caller's samples (tensors by host copy, containers shallowly)."""

    def __init__(self, samples: Sequence[Any]) -> None:
        """Take the snapshot now (a host copy of every tensor's values)."""
        self.samples = samples
        self._states: list[_SampleFields | ContainerState | _SampleTensor] = []
        self._seen: set[int] = set()
        for i, sample in enumerate(samples):
            self._walk(sample, f"sample {i}")
        del self._seen

    def _walk(self, value: Any, label: str) -> None:
        """Record ``value`` (a tensor, or the containers and tensors it holds) under ``label``."""
        if isinstance(value, torch.Tensor):
            if id(value) not in self._seen:
                self._seen.add(id(value))
                self._states.append(_SampleTensor(label, value))
            return
        if isinstance(value, (list, dict, tuple, Sample)):
            if id(value) in self._seen:  # shared, or a cycle
                return
            self._seen.add(id(value))
        if isinstance(value, Sample) or is_pair(value):
            args: Sequence[Any]
            if isinstance(value, Sample):
                self._states.append(_SampleFields(label, value))
                args, kwargs = value.args, value.kwargs
            else:
                args, kwargs = value
                self._walk_container(args, f"{label}, args")
                self._walk_container(kwargs, f"{label}, kwargs")
            for index, arg in enumerate(args):
                self._walk(arg, f"{label}, arg {index}")
            for key, kwarg in kwargs.items():
                self._walk(kwarg, f"{label}, kwarg {key!r}")
            return
        self._walk_container(value, label)
        if isinstance(value, (list, tuple)):
            for index, item in enumerate(value):
                self._walk(item, f"{label}[{index}]")
        elif isinstance(value, Mapping):
            for key, item in value.items():
                self._walk(item, f"{label}[{key!r}]")

    def _walk_container(self, value: Any, label: str) -> None:
        """Record a mutable list or dict's contents (an immutable container needs nothing)."""
        if isinstance(value, (list, dict)):
            self._states.append(ContainerState(label, value))

    def changed(self) -> str | None:
        """The first input that differs from the snapshot, named, or None."""
        for state in self._states:
            what = state.changed()
            if what is not None:
                return what
        return None

    def restore(self) -> None:
        """Put back every container entry and tensor in place; :class:`InvalidStateError` if not."""
        failures: list[str] = []
        for state in self._states:
            state.restore(failures)
        if failures:
            raise InvalidStateError(
                "the samples could not be fully restored: " + "; ".join(failures)
            )
