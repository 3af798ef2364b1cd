"""Held-out inputs across the user's domain, beyond the recorded envelope (docs/accuracy.md)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
import torch.nn.functional as F  # noqa: N812 - torch's own alias
from torch.overrides import TorchFunctionMode

from aitune_fp.correctness.envelope import Layout, layout_of, restyled, styled
from aitune_fp.inputs import InputKey, Sample, as_sample, copy_sample
from aitune_fp.isolation.heldout import (
    NOISE_SCALE,
    HeldoutUnavailableError,
    _as_real,
    _clone_nested,
    _compute_dtype,
    _generator,
    heldout_samples,
)

#: The factor a wide draw scales floating inputs by about their recorded centre: drawn in this.
WIDE_SCALE = (1.5, 3.0)
#: The shift of a wide draw, in units of the recorded half-range, drawn in this (either sign).
WIDE_SHIFT = (0.25, 1.0)
#: Share of an integer input's positions a wide draw gives a value drawn from its domain.
ID_SHARE = 0.5
#: The usual range of the small integer dtypes (pixels, quantized values).
_DTYPE_RANGE = {torch.uint8: (0, 255), torch.int8: (-128, 127)}


def _uniform(gen: torch.Generator, bounds: tuple[float, float]) -> float:
    lo, hi = bounds
    return lo + (hi - lo) * float(torch.rand((), generator=gen))


def _wide_float(value: torch.Tensor, gen: torch.Generator) -> torch.Tensor | None:
    """``value`` scaled and shifted beyond its range (None: nothing to widen)."""
    real = _as_real(value.resolve_conj())
    work = real.to(_compute_dtype(real.dtype))
    finite = work[torch.isfinite(work)]
    if finite.numel() == 0 or float(finite.min()) == float(finite.max()):
        return None
    lo, hi = float(finite.min()), float(finite.max())
    centre, half = (lo + hi) / 2, (hi - lo) / 2
    scale = _uniform(gen, WIDE_SCALE)
    shift = (
        _uniform(gen, WIDE_SHIFT) * half * (1 if float(torch.rand((), generator=gen)) < 0.5 else -1)
    )
    noise = torch.randn(work.shape, generator=gen, dtype=work.dtype).to(work.device)
    spread = NOISE_SCALE * float(finite.std()) if finite.numel() > 1 else 0.0
    wide = centre + scale * (work - centre) + shift + noise * spread
    info = torch.finfo(real.dtype)
    wide = torch.where(torch.isfinite(work), wide.clamp(float(info.min), float(info.max)), work)
    out = wide.to(real.dtype)
    return torch.view_as_complex(out.contiguous()) if value.is_complex() else out


def _wide_ids(value: torch.Tensor, limit: int | None, gen: torch.Generator) -> torch.Tensor | None:
    """``value`` with ``ID_SHARE`` of its positions drawn from its domain (None: kept)."""
    flat = value.detach().to("cpu").flatten().clone()
    lo, hi = int(flat.min()), int(flat.max())
    # the ids drawn from: the embedding's rows, else the dtype's usual range, else the recorded
    if limit is not None:
        lower, upper = 0, limit - 1
    elif value.dtype in _DTYPE_RANGE and torch.unique(value).numel() > 2:
        lower, upper = _DTYPE_RANGE[value.dtype]
    else:
        lower, upper = lo, hi
    if upper - lower < (1 if limit is not None else 2):
        return None
    count = max(1, round(ID_SHARE * flat.numel()))
    positions = torch.randperm(flat.numel(), generator=gen)[:count]
    flat[positions] = torch.randint(lower, upper + 1, (count,), generator=gen, dtype=flat.dtype)
    if upper > hi:  # beyond the recorded ids, at least once
        flat[positions[0]] = int(torch.randint(hi + 1, upper + 1, (), generator=gen))
    if lower < lo and count > 1:
        flat[positions[1]] = int(torch.randint(lower, lo, (), generator=gen))
    return flat.reshape(value.shape).to(value.device)


def _wide(sample: Sample, limits: Mapping[InputKey, int], gen: torch.Generator) -> Sample | None:
    """The wide draw of one recorded sample (None when no input can leave its range)."""
    changed = False

    def convert(key: InputKey, value: Any) -> Any:
        nonlocal changed
        if not isinstance(value, torch.Tensor):
            return _clone_nested(value)
        if value.layout != torch.strided or value.is_quantized or value.numel() == 0:
            return value.detach().clone()
        source = value.detach()
        if source.is_floating_point() or source.is_complex():
            out = _wide_float(source, gen)
        elif source.dtype != torch.bool:
            out = _wide_ids(source, limits.get(key), gen)
        else:
            out = None
        changed = changed or out is not None
        return styled(source if out is None else out, "contiguous", value.requires_grad)

    wide = sample.map(convert)
    return wide if changed else None


def _variant(
    sample: Sample, change: Callable[[torch.Tensor], torch.Tensor | None]
) -> Sample | None:
    """``sample`` with ``change`` applied to its top-level tensors (None: it changed none)."""
    changed = False

    def convert(_: InputKey, value: Any) -> Any:
        nonlocal changed
        if not isinstance(value, torch.Tensor):
            return value
        out = change(value)
        if out is None:
            return styled(value, layout_of(value), value.requires_grad)
        changed = True
        return out

    made = sample.map(convert)
    return made if changed else None


def _relaid(value: torch.Tensor, layout: Layout) -> torch.Tensor | None:
    """``value`` in ``layout`` (channels_last: 4-d or 5-d floats); None when that changes nothing."""
    if layout == "channels_last" and not (value.is_floating_point() and value.dim() in (4, 5)):
        return None
    out = styled(value, layout, value.requires_grad)
    return out if layout_of(out) != layout_of(value) else None


def _grad_flipped(value: torch.Tensor) -> torch.Tensor | None:
    if not (value.is_floating_point() or value.is_complex()):
        return None
    return styled(value, layout_of(value), not value.requires_grad)


def heldout_domain(
    samples: Sequence[Sample | tuple[Any, Any]],
    seed: int,
    *,
    batch_axes: Mapping[InputKey, int | None] | None = None,
    id_limits: Mapping[InputKey, int] | None = None,
) -> tuple[Sample, ...]:
    """A tune's held-out inputs: the near draws, then each sample's domain variants (seeded)."""
    recorded = [as_sample(s) for s in samples]
    limits = dict(id_limits or {})
    try:
        near = [
            restyled(s, like)
            for s, like in zip(
                heldout_samples(recorded, seed, batch_axes=batch_axes), recorded, strict=True
            )
        ]
    except HeldoutUnavailableError:
        near = []
    gen = _generator(seed * 7919 + 1)
    found: list[Sample] = list(near)
    for index, sample in enumerate(recorded):
        base = near[index] if near else sample
        made = [
            _wide(sample, limits, gen),
            _variant(base, lambda v: _relaid(v, "strided")),
            _variant(base, lambda v: _relaid(v, "channels_last")),
            _variant(base, _grad_flipped),
        ]
        found += [m for m in made if m is not None]
    return tuple(found)


class _Reads(TorchFunctionMode):
    """Records the index tensor and table size of each embedding lookup made under it."""

    def __init__(self) -> None:
        super().__init__()
        self.reads: list[tuple[torch.Tensor, int]] = []

    def __torch_function__(
        self,
        func: Any,
        types: Any,
        args: Sequence[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
    ) -> Any:
        kwargs = kwargs or {}
        if func in (F.embedding, F.embedding_bag):
            ids = args[0] if args else kwargs.get("input")
            weight = args[1] if len(args) > 1 else kwargs.get("weight")
            if isinstance(ids, torch.Tensor) and isinstance(weight, torch.Tensor):
                self.reads.append((ids, int(weight.shape[0])))
        return func(*args, **kwargs)


def _reads_input(ids: torch.Tensor, value: torch.Tensor) -> bool:
    """Whether an embedding's index tensor is the input ``value`` (a view of it, or its values)."""
    if ids.untyped_storage().data_ptr() == value.untyped_storage().data_ptr():
        return True
    return ids.numel() == value.numel() and torch.equal(ids.flatten(), value.flatten())


def embedding_limits(
    call: Callable[..., Any], sample: Sample | tuple[Any, Any]
) -> dict[InputKey, int]:
    """Per integer input an embedding reads, the rows of its smallest table (one eager call)."""
    given = copy_sample(as_sample(sample))
    ints = {
        key: value
        for key, value in given.items()
        if isinstance(value, torch.Tensor)
        and value.layout == torch.strided
        and not (value.is_floating_point() or value.is_complex() or value.dtype == torch.bool)
        and value.numel() > 0
    }
    if not ints:
        return {}
    reads = _Reads()
    try:
        with torch.no_grad(), reads:
            given.call(call)
    except Exception:
        return {}
    limits: dict[InputKey, int] = {}
    for ids, rows in reads.reads:
        for key, value in ints.items():
            if _reads_input(ids, value):
                limits[key] = min(rows, limits.get(key, rows))
    return limits
