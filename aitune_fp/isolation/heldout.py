"""Held-out inputs: batches derived from the recorded samples that no candidate has seen.

Structure, dtypes, shapes, devices, ranges and vocabularies are kept; every tensor returned is new.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Literal

import attrs
import torch

from aitune_fp.core._checks import check_int, check_type
from aitune_fp.errors import InvalidTypeError, InvalidValueError
from aitune_fp.inputs import GraphSpec, InputKey, Sample, as_sample, copy_sample

#: Noise added to floating inputs, in units of the tensor's standard deviation.
NOISE_SCALE = 0.05
#: Share of the positions of an integer or bool input given a value from its vocabulary.
RESAMPLE_FRACTION = 0.05
#: Draws tried per derived batch before giving up; from the sixth on, 32x noise and share.
_TRIES = 32
_MAX_BOOST_EXPONENT = 5

_Kind = Literal["float", "constant", "discrete", "fixed"]


class HeldoutUnavailableError(InvalidValueError):
    """No held-out batch unlike the recorded ones can be derived; the message names the inputs."""


@attrs.frozen(eq=False)
class _Plan:
    """How one top-level tensor input is varied (its statistics are the recorded tensor's)."""

    kind: _Kind
    axis: int | None  # normalised batch axis, or None when it is not shuffled
    lo: float = 0.0
    hi: float = 0.0
    spread: float = 0.0  # noise standard deviation before any boost
    vocab: torch.Tensor | None = None  # on the CPU, for "discrete"


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype noise is computed in: float64 for float64 inputs, else float32."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def _as_real(tensor: torch.Tensor) -> torch.Tensor:
    """A complex tensor as its real view (..., 2); any other tensor as is."""
    return torch.view_as_real(tensor) if tensor.is_complex() else tensor


def _plan(value: torch.Tensor, axis: int | None) -> _Plan:
    """Read what the recorded tensor allows: its range and spread, or its vocabulary."""
    if (
        value.layout != torch.strided
        or value.is_quantized
        or value.device.type == "meta"
        or value.numel() == 0
    ):
        return _Plan("fixed", axis)
    data = _as_real(value.detach().resolve_conj())
    if data.is_floating_point():
        work = data.to(_compute_dtype(data.dtype))
        finite = work[torch.isfinite(work)]
        if finite.numel() == 0:
            return _Plan("fixed", axis)
        lo, hi = float(finite.min()), float(finite.max())
        if lo == hi:
            return _Plan("constant", axis, lo, hi, NOISE_SCALE * max(abs(lo), 1.0))
        spread = NOISE_SCALE * float(finite.std())
        if not spread > 0.0:  # spread too small for the compute dtype
            spread = NOISE_SCALE * (hi - lo)
        return _Plan("float", axis, lo, hi, spread)
    vocab = torch.unique(data).cpu()
    if vocab.numel() < 2:
        return _Plan("fixed", axis)
    return _Plan("discrete", axis, vocab=vocab)


def _generator(seed: int) -> torch.Generator:
    """A CPU generator seeded with ``seed`` (any int, folded into torch's 64-bit range)."""
    check_type("seed", seed, int)
    gen = torch.Generator(device="cpu")
    gen.manual_seed(seed % 2**64)
    return gen


def _equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Element-wise equality of two tensors of one shape, NaN equal to NaN."""
    if torch.equal(a, b):
        return True
    if not (a.is_floating_point() or a.is_complex()):
        return False
    return bool(((a == b) | (torch.isnan(a) & torch.isnan(b))).all())


class _Deriver:
    """Derives varied copies of one recorded sample (its plans are read once)."""

    def __init__(
        self, batch: Sample | tuple[Any, Any], batch_axes: Mapping[InputKey, int | None] | None
    ) -> None:
        sample = as_sample(batch)
        spec = GraphSpec(batch_axes=batch_axes if batch_axes is not None else {})
        try:
            dim = spec.batch_dim(sample)
        except InvalidValueError:
            if batch_axes is not None:
                raise
            dim = None  # the batch axis is unknown: values are varied, rows are not shuffled
        self.sample = sample
        self.plans: dict[InputKey, _Plan] = {}
        for key, value in sample.items():
            if not isinstance(value, torch.Tensor):
                continue
            axis = spec.axis_of(key) if dim is not None else None
            if axis is not None:
                axis %= value.dim()
                if value.layout != torch.strided or value.is_quantized:
                    dim = None  # cannot shuffle it with the others: shuffle nothing
            self.plans[key] = _plan(value, axis)
        self.dim = dim
        kinds = {plan.kind for plan in self.plans.values()}
        self.widen = not kinds & {"float", "discrete"}
        self.varied = [
            key
            for key, plan in self.plans.items()
            if plan.kind in ("float", "discrete") or (self.widen and plan.kind == "constant")
        ]
        if not self.varied:
            tensors = ", ".join(repr(key) for key in self.plans) or "none"
            raise HeldoutUnavailableError(
                "cannot derive a held-out batch that differs from the recorded one: no input can "
                f"change within its observed values (tensor inputs: {tensors}; integer and bool "
                "tensors that hold a single value, and non-tensor inputs, are kept as they are)"
            )

    def derive(self, gen: torch.Generator, avoid: Sequence[Sample], what: str) -> Sample:
        """A varied copy of the sample that differs from every sample in ``avoid``."""
        for attempt in range(_TRIES):
            boost = 2.0 ** min(attempt, _MAX_BOOST_EXPONENT)
            candidate = self._draw(gen, boost)
            if not any(self._same(candidate, other) for other in avoid):
                return candidate
        inputs = ", ".join(repr(key) for key in self.varied)
        raise HeldoutUnavailableError(
            f"cannot derive {what} in {_TRIES} tries: inputs {inputs} hold too few distinct "
            "values for that many different batches"
        )

    def _same(self, a: Sample, b: Sample) -> bool:
        """Whether two variants of the sample hold the same values in every varied input."""
        x, y = dict(a.items()), dict(b.items())
        return all(_equal(x[key], y[key]) for key in self.varied)

    def _draw(self, gen: torch.Generator, boost: float) -> Sample:
        perm = torch.randperm(self.dim, generator=gen) if self.dim is not None else None

        def convert(key: InputKey, value: Any) -> Any:
            plan = self.plans.get(key)
            if plan is None:
                return _clone_nested(value)
            return _vary(value, plan, perm, gen, boost, widen=self.widen)

        return self.sample.map(convert)


def _clone_nested(value: Any) -> Any:
    """``value`` with any tensors nested in it cloned (other values shared), as ``copy_sample``."""
    return copy_sample(Sample((value,))).args[0]


def _vary(
    value: torch.Tensor,
    plan: _Plan,
    perm: torch.Tensor | None,
    gen: torch.Generator,
    boost: float,
    *,
    widen: bool,
) -> torch.Tensor:
    """A new tensor: ``value`` with its rows permuted by ``perm`` and its values varied."""
    source = value.detach()
    if perm is not None and plan.axis is not None:
        work = source.index_select(plan.axis, perm.to(source.device))
    else:
        work = source.clone(memory_format=torch.contiguous_format)
    if plan.kind == "float" or (plan.kind == "constant" and widen):
        work = work.resolve_conj()
        _add_noise(_as_real(work), plan, gen, boost)
    elif plan.kind == "discrete":
        _resample(work, plan, gen, boost)
    if value.requires_grad and (work.is_floating_point() or work.is_complex()):
        work.requires_grad_(True)
    return work


def _add_noise(real: torch.Tensor, plan: _Plan, gen: torch.Generator, boost: float) -> None:
    """Add clamped Gaussian noise to ``real`` (a new floating tensor of ours) in place."""
    dtype = _compute_dtype(real.dtype)
    x = real.to(dtype)
    noise = torch.randn(real.shape, generator=gen, dtype=dtype).to(real.device)
    y = x + noise * (plan.spread * boost)
    if plan.kind == "float":
        y = y.clamp(plan.lo, plan.hi)
    else:  # a single recorded value: stay finite in the tensor's dtype
        info = torch.finfo(real.dtype)
        y = y.clamp(float(info.min), float(info.max))
    real.copy_(torch.where(torch.isfinite(x), y, x))


def _resample(work: torch.Tensor, plan: _Plan, gen: torch.Generator, boost: float) -> None:
    """Give a few positions of ``work`` (a new contiguous tensor of ours) vocabulary values."""
    assert plan.vocab is not None  # a "discrete" plan always has one
    numel = work.numel()
    count = max(1, min(numel, round(RESAMPLE_FRACTION * boost * numel)))
    positions = torch.unique(torch.randint(numel, (count,), generator=gen))
    picks = plan.vocab[torch.randint(plan.vocab.numel(), (positions.numel(),), generator=gen)]
    flat = work.contiguous().view(-1)
    flat[positions.to(work.device)] = picks.to(work.device)


def heldout_batches(
    batch: Sample | tuple[Any, Any],
    n: int,
    seed: int,
    *,
    batch_axes: Mapping[InputKey, int | None] | None = None,
) -> tuple[Sample, ...]:
    """``n`` batches from ``batch`` (rows shuffled, values varied, seeded), each unlike the rest."""
    count = check_int("n", n, minimum=1)
    gen = _generator(seed)
    deriver = _Deriver(batch, batch_axes)
    derived: list[Sample] = []
    for index in range(count):
        what = f"held-out batch {index + 1} of n={count!r} distinct ones"
        derived.append(deriver.derive(gen, [deriver.sample, *derived], what))
    return tuple(derived)


def heldout_draws(
    batch: Sample | tuple[Any, Any],
    *,
    batch_axes: Mapping[InputKey, int | None] | None = None,
) -> Callable[[int], Sample]:
    """Seed to held-out batch: ``heldout_batches(batch, 1, seed)[0]``, the inputs read once.

    For a batch a call (the timed calls'); HeldoutUnavailableError now if none can be derived.
    """
    deriver = _Deriver(batch, batch_axes)
    return lambda seed: deriver.derive(_generator(seed), [deriver.sample], "a held-out batch")


def heldout_samples(
    samples: Iterable[Sample | tuple[Any, Any]],
    seed: int,
    *,
    batch_axes: Mapping[InputKey, int | None] | None = None,
) -> tuple[Sample, ...]:
    """One sample derived from each recorded sample, in order, by :func:`heldout_batches`' rules."""
    if isinstance(samples, (str, bytes, Sample)) or not isinstance(samples, Iterable):
        raise InvalidTypeError(f"samples must be a sequence of samples, got {samples!r:.200}")
    recorded = [as_sample(sample) for sample in samples]
    gen = _generator(seed)
    derived: list[Sample] = []
    for index, sample in enumerate(recorded):
        try:
            deriver = _Deriver(sample, batch_axes)
            derived.append(deriver.derive(gen, [sample], "a held-out sample"))
        except HeldoutUnavailableError as error:
            raise HeldoutUnavailableError(f"sample {index}: {error}") from None
    return tuple(derived)
