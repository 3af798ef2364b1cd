"""The recorded inputs' envelope, and input copies that keep their layout and ``requires_grad``."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Literal

import attrs
import torch

from aitune_fp._tree import clone_value
from aitune_fp.inputs import InputKey, Sample, as_sample

#: A strided tensor's layout, as the check varies it.
Layout = Literal["contiguous", "strided", "channels_last"]


def _channels_last(dim: int) -> torch.memory_format | None:
    """The channels-last memory format for a tensor of ``dim`` dimensions (None: none)."""
    return {4: torch.channels_last, 5: torch.channels_last_3d}.get(dim)


def layout_of(tensor: torch.Tensor) -> Layout:
    """``contiguous`` (row-major, or not a strided tensor), ``channels_last``, else ``strided``."""
    if tensor.layout != torch.strided or tensor.is_contiguous():
        return "contiguous"
    fmt = _channels_last(tensor.dim())
    if fmt is not None and tensor.is_contiguous(memory_format=fmt):
        return "channels_last"
    return "strided"


def styled(value: torch.Tensor, layout: Layout, requires_grad: bool) -> torch.Tensor:
    """A new leaf tensor holding ``value``'s values, in ``layout``, with ``requires_grad``."""
    source = value.detach()
    if source.layout != torch.strided or source.is_quantized:
        out = source.clone()
    elif layout == "channels_last" and _channels_last(source.dim()) is not None:
        fmt = _channels_last(source.dim())
        out = torch.empty_like(source, memory_format=fmt).copy_(source)
    elif layout == "strided" and any(size > 1 for size in source.shape):
        axis = max(i for i, size in enumerate(source.shape) if size > 1)
        shape = list(source.shape)
        shape[axis] *= 2
        buffer = torch.zeros(shape, dtype=source.dtype, device=source.device)
        index = [slice(None)] * source.dim()
        index[axis] = slice(None, None, 2)
        out = buffer[tuple(index)]
        out.copy_(source)
    else:
        out = source.clone(memory_format=torch.contiguous_format)
    if requires_grad and (out.is_floating_point() or out.is_complex()):
        out.requires_grad_(True)
    return out


def _style(tensor: torch.Tensor) -> tuple[Layout, bool]:
    return layout_of(tensor), tensor.requires_grad


def restyled(batch: Sample, like: Sample | tuple[Any, Any]) -> Sample:
    """``batch`` (made from ``like``) with each top-level tensor in ``like``'s style."""
    model = as_sample(like)
    styles = {k: _style(v) for k, v in model.items() if isinstance(v, torch.Tensor)}

    def convert(key: InputKey, value: Any) -> Any:
        if key in styles and isinstance(value, torch.Tensor):
            return styled(value, *styles[key])
        return value

    return batch.map(convert)


def fresh_copies(batch: Sample) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """New copies of ``batch``'s inputs for one call: top-level tensors keep their style."""

    def convert(_: InputKey, value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            return styled(value, *_style(value))
        return clone_value(value)

    copies = batch.map(convert)
    return copies.args, dict(copies.kwargs)


def plain(batch: Sample, envelope: Envelope) -> Sample:
    """``batch`` with each top-level tensor in the recorded style of its input (the envelope's)."""

    def convert(key: InputKey, value: Any) -> Any:
        if not isinstance(value, torch.Tensor):
            return value
        return styled(value, *envelope.styles.get(key, ("contiguous", False)))

    return batch.map(convert)


@attrs.frozen
class Envelope:
    """What the recorded samples hold per top-level input: the real range, the styles seen."""

    ranges: Mapping[InputKey, tuple[float, float]]
    styles: Mapping[InputKey, tuple[Layout, bool]]


def _range(tensor: torch.Tensor) -> tuple[float, float] | None:
    """The finite real range of a tensor (complex: of its parts); None for bool or none finite."""
    if tensor.dtype == torch.bool or tensor.layout != torch.strided or tensor.is_quantized:
        return None
    data = tensor.detach()
    if data.is_complex():
        data = torch.view_as_real(data.resolve_conj())
    if data.is_floating_point():
        data = data[torch.isfinite(data)]
    if data.numel() == 0:
        return None
    return float(data.min()), float(data.max())


def envelope_of(samples: Iterable[Sample | tuple[Any, Any]]) -> Envelope:
    """The envelope of ``samples``: each input's range over all of them, its first style."""
    ranges: dict[InputKey, tuple[float, float]] = {}
    styles: dict[InputKey, tuple[Layout, bool]] = {}
    for sample in samples:
        for key, value in as_sample(sample).items():
            if not isinstance(value, torch.Tensor):
                continue
            styles.setdefault(key, _style(value))
            found = _range(value)
            if found is not None:
                lo, hi = ranges.get(key, found)
                ranges[key] = (min(lo, found[0]), max(hi, found[1]))
    return Envelope(ranges, styles)


def _span(bounds: tuple[float, float], *, exact: bool) -> str:
    """``[lo, hi]``: integers in full (token ids), floats to 4 significant digits."""
    lo, hi = bounds
    return f"[{int(lo)}, {int(hi)}]" if exact else f"[{lo:.4g}, {hi:.4g}]"


def _name(key: InputKey) -> str:
    return f"input {key}" if isinstance(key, int) else f"input {key!r}"


def beyond(sample: Sample | tuple[Any, Any], envelope: Envelope) -> tuple[str, ...]:
    """How ``sample`` leaves the envelope, one phrase per way (empty: it stays inside)."""
    values: list[str] = []
    styles: list[str] = []
    for key, value in as_sample(sample).items():
        if not isinstance(value, torch.Tensor):
            continue
        found, recorded = _range(value), envelope.ranges.get(key)
        if (
            found is not None
            and recorded is not None
            and (found[0] < recorded[0] or found[1] > recorded[1])
        ):
            exact = not (value.is_floating_point() or value.is_complex())
            now, was = _span(found, exact=exact), _span(recorded, exact=exact)
            values.append(f"{_name(key)} in {now}, recorded {was}")
        layout, grad = _style(value)
        was_layout, was_grad = envelope.styles.get(key, ("contiguous", False))
        if layout != was_layout:
            styles.append(f"{_name(key)} {'non-contiguous' if layout == 'strided' else layout}")
        if grad != was_grad:
            styles.append(f"{_name(key)} {'requires grad' if grad else 'does not require grad'}")
    said = [f"values beyond the recorded range ({'; '.join(values)})"] if values else []
    return (*said, *styles)


def restyles(sample: Sample | tuple[Any, Any], envelope: Envelope) -> bool:
    """Whether ``sample`` differs from the recorded style of some input (layout or grad)."""
    return any(
        isinstance(value, torch.Tensor)
        and _style(value) != envelope.styles.get(key, ("contiguous", False))
        for key, value in as_sample(sample).items()
    )
