"""The correctness check a candidate must pass before it is timed.

Each call must also not change its inputs in place (where eager does not) or reuse its outputs;
the candidate's error is also held to eager's variation across the inputs.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs
import torch
from torch.utils import _pytree

from aitune_fp._tree import flatten_tensors
from aitune_fp.core._checks import check_finite
from aitune_fp.core.accuracy import (
    Criterion,
    NoiseFloor,
    Spread,
    capped,
    judge_variation,
    metric_criterion,
    worst_per_criterion,
)
from aitune_fp.core.messages import counted, one_line
from aitune_fp.core.mismatch import Mismatch
from aitune_fp.correctness._leaves import as_tensor_if_array, leaves
from aitune_fp.correctness.compare import (
    TF32_DEVICES,
    Walk,
    check_expected_dtype,
    compare_outputs,
    compare_tree,
    tf32_allowed,
)
from aitune_fp.correctness.envelope import (
    Envelope,
    beyond,
    envelope_of,
    fresh_copies,
    plain,
    restyled,
    restyles,
)
from aitune_fp.correctness.failures import CorrectnessError, ReferenceFailedError
from aitune_fp.correctness.tolerances import Tolerances, eps_of
from aitune_fp.errors import InvalidTypeError, InvalidValueError, error_name
from aitune_fp.inputs import BatchSpec, Sample, as_sample, check_samples
from aitune_fp.profiling.watchdog import progress

__all__ = ["AccuracyMetric", "check_correctness", "metric_name", "served_batch_sizes"]

#: A user's accuracy metric: ``metric(reference_outputs, candidate_outputs) -> float``, higher
#: is better; eager's own score is ``metric(reference, reference)``.
AccuracyMetric = Callable[[Any, Any], float]


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
    noise_floor: NoiseFloor | None = None,
    accuracy: AccuracyMetric | None = None,
    max_degradation: float = 0.0,
    heldout: Sequence[Sample] = (),
    heldout_seed: int | None = None,
) -> Mismatch:
    """Check ``candidate`` against ``reference`` on every sample and batch size: worst mismatch."""
    check_expected_dtype(expected_dtype)
    _check_metric(accuracy, max_degradation)
    check_samples("data", data)
    check_samples("heldout", heldout)
    if not data:
        raise InvalidValueError(
            f"data must hold at least one sample for the correctness check "
            f"(graph spec {graph_spec.name!r}), got none"
        )
    walk = Walk(
        tol=tolerances or Tolerances(), expected_dtype=expected_dtype, noise_floor=noise_floor
    )
    prefix = f"{name}: " if name else ""
    sizes = served_batch_sizes(
        graph_spec.min_batch_size, graph_spec.get_max_batch_size(), batch_sizes
    )
    baselines: list[float] = []
    scores: list[float] = []
    envelope = envelope_of(data)
    labelled = [(f"sample {i}", i, s, False) for i, s in enumerate(data)]
    labelled += [
        (_held_label(i, s, heldout_seed, envelope), i, s, True) for i, s in enumerate(heldout)
    ]
    outside = {id(s) for s in heldout if beyond(s, envelope)}
    ends = {sizes[0], sizes[-1]}  # a layout or grad variant: checked at both ends only
    cases = [
        (*item, size, False)
        for item in labelled
        for size in sizes
        if size in ends or not (item[3] and restyles(item[2], envelope))
    ]
    if grad_mode:
        cases.append((*labelled[0], sizes[-1], True))
    kept: tuple[Any, list[torch.Tensor], str] | None = None
    spreads, recorded = Spreads(), Spreads()
    dropped: dict[str, str] = {}
    finite = True  # eager's outputs on the recorded samples: all finite so far
    for label, index, item, held, size, with_grad in cases:
        if label in dropped:
            continue
        batch = restyled(graph_spec.make_batch(as_sample(item), size), item)
        where = f"{label} at batch size {size}{' with grad enabled' if with_grad else ''}"
        args, kwargs = fresh_copies(batch)
        try:
            with torch.no_grad():
                expected = reference(*args, **kwargs)
            progress()  # a call completed: a slow check that keeps going is not hung
        except Exception as exc:
            if id(item) in outside:  # beyond the envelope: outside eager's domain, not a fault
                dropped[label] = f"at batch size {size} eager raised {error_name(exc)}: {exc}"
                continue
            raise ReferenceFailedError(
                f"{prefix}the reference (eager) failed on {where}: {type(exc).__name__}: {exc}"
            ) from exc
        if id(item) in outside:
            why = _not_a_reference(expected, batch, reference, envelope, finite=finite)
            if why is not None:
                dropped[label] = f"at batch size {size} {why}"
                continue
        elif not held:
            finite = finite and _finite(expected)
        eager_changed = changed_inputs(batch, args, kwargs)
        args, kwargs = fresh_copies(batch)
        try:
            with torch.set_grad_enabled(with_grad):
                actual = candidate(*args, **kwargs)
            progress()
            if with_grad:  # eager's reference was computed without: only the values compare
                actual = detached(actual)
        except Exception as exc:
            raise CorrectnessError(
                f"{prefix}{where}: output: the candidate raised {error_name(exc)}: {exc}",
                path="output",
                check="exception",
                sample_index=index,
                batch_size=size,
            ) from exc
        try:
            same_changes(changed_inputs(batch, args, kwargs), eager_changed)
            still_held(kept, prefix)  # the previous call's output, kept as a caller would
            compare_tree(actual, expected, "output", walk)
            kept = (actual, tensor_copies(actual), where)
            if not with_grad:  # the grad call repeats an input
                spreads.add(actual, expected, size)
                if not held:
                    recorded.add(actual, expected, size)
        except CorrectnessError as err:
            raise CorrectnessError(
                f"{prefix}{where}: {err}",
                path=err.path,
                check=err.check,
                sample_index=index,
                batch_size=size,
                mismatch=err.mismatch,
            ) from None
        if accuracy is not None:
            baselines.append(_score(accuracy, expected, expected, f"eager's outputs on {where}"))
            scores.append(_score(accuracy, expected, actual, f"the candidate's on {where}"))
    seed = "" if heldout_seed is None else f" (seed {heldout_seed})"
    inputs = f"recorded samples: {len(data)}"
    inputs += f", held-out: {len(heldout)}{seed}" if heldout else ""
    inputs += f", {len(dropped)} dropped" if dropped else ""
    inputs += f"; batch sizes {', '.join(map(str, sizes))}"
    found = _judge_variation(Mismatch.combine(walk.tally), spreads, recorded, walk.tol.variation)
    notes = [f"{label}: dropped, {why}" for label, why in dropped.items()]
    found = attrs.evolve(found, notes=(*found.notes, *notes))
    failed = [c for c in found.failed_criteria if c.name == "variation"]
    if failed:
        (worst,) = failed
        raise CorrectnessError(
            f"{prefix}{worst.path}: the candidate's error is {worst.value:.3g} of eager's "
            f"variation across inputs ({inputs}; {worst.describe()}): a candidate that ignores "
            "its input (a constant, eager's mean) scores 1 or more",
            path=worst.path or "output",
            check="values",
            mismatch=found,
        )
    if accuracy is None:
        return found
    metric = metric_criterion(baselines, scores, max_degradation)
    found = attrs.evolve(
        found,
        criteria=(*found.criteria, metric),
        budget_used=max(found.budget_used, metric.used),
    )
    if not metric.passed:
        raise CorrectnessError(
            f"{prefix}output: the accuracy metric {metric_name(accuracy)} dropped from eager's "
            f"(mean over {counted(len(scores), 'call')}): {metric.describe()}",
            path="output",
            check="values",
            mismatch=found,
        )
    return found


def _judge_variation(
    found: Mismatch, spreads: Spreads, recorded: Spreads, budget: float | None
) -> Mismatch:
    """``found`` with each leaf's error against eager's variation (the worst kept), and notes."""
    if budget is None:
        return found
    alone = recorded.by_leaf()
    judged = [
        judge_variation(spread, budget, path, recorded=alone.get(path))
        for path, spread in spreads.by_leaf().items()
    ]
    criteria = [c for c in judged if isinstance(c, Criterion)]
    return attrs.evolve(
        found,
        criteria=worst_per_criterion((*found.criteria, *criteria)),
        budget_used=max([found.budget_used, *(c.used for c in criteria)]),
        notes=(*found.notes, *(note for note in judged if isinstance(note, str))),
    )


def _held_label(index: int, sample: Sample, seed: int | None, envelope: Envelope) -> str:
    """``held-out sample i (seed s; how it leaves the recorded envelope)``."""
    parts = ([] if seed is None else [f"seed {seed}"]) + list(beyond(sample, envelope))
    return f"held-out sample {index}" + (f" ({'; '.join(parts)})" if parts else "")


def _finite(output: Any) -> bool:
    """Whether every floating element of ``output`` is finite."""
    return all(
        bool(torch.isfinite(t).all())
        for t in flatten_tensors(output)
        if t.is_floating_point() or t.is_complex()
    )


def _not_a_reference(
    expected: Any,
    batch: Sample,
    reference: Callable[..., Any],
    envelope: Envelope,
    *,
    finite: bool,
) -> str | None:
    """Why eager's output on an input beyond the envelope is no reference (None: it is one)."""
    if finite and not _finite(expected):
        return "eager's output is not finite on it"
    if not restyles(batch, envelope):
        return None
    args, kwargs = fresh_copies(plain(batch, envelope))
    try:
        with torch.no_grad():
            recorded_style = reference(*args, **kwargs)
        compare_outputs(expected, recorded_style, tolerances=Tolerances())
    except Exception as exc:
        return f"eager's output differs from its output in the recorded layout ({one_line(exc)})"
    return None


def _check_metric(accuracy: object, max_degradation: object) -> None:
    """Refuse a metric that is not callable, or a degradation budget that is not a number >= 0."""
    if accuracy is not None and not callable(accuracy):
        raise InvalidTypeError(
            f"accuracy must be None or a callable(reference_outputs, candidate_outputs) -> float, "
            f"got {accuracy!r}"
        )
    check_finite("max_degradation", max_degradation, minimum=0)


def metric_name(accuracy: Callable[..., Any]) -> str:
    """The metric's name for messages."""
    return getattr(accuracy, "__name__", type(accuracy).__name__)


def _score(accuracy: AccuracyMetric, expected: Any, actual: Any, what: str) -> float:
    """One call of the user's metric, checked to be a finite real number."""
    try:
        value: object = accuracy(expected, actual)
    except Exception as exc:
        raise InvalidValueError(
            f"the accuracy metric {metric_name(accuracy)} failed on {what}: "
            f"{type(exc).__name__}: {exc}"
        ) from exc
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise InvalidTypeError(
            f"the accuracy metric {metric_name(accuracy)} must return a finite float, got "
            f"{value!r} on {what}"
        )
    return float(value)


def served_batch_sizes(low: int, high: int, extra: Sequence[int] = ()) -> list[int]:
    """The batch sizes a candidate is checked at, in ``low..high``."""
    sizes = {low, high, *(s for s in extra if low <= s <= high)}
    power = 1
    while power < high:
        if power > low:
            sizes.add(power)
        power *= 2
    return sorted(sizes)


def changed_inputs(batch: Sample, args: Sequence[Any], kwargs: Mapping[str, Any]) -> set[str]:
    """The inputs (``args[i]``, ``kwargs['k']``) whose tensors a call changed in place."""
    given = Sample(tuple(args), kwargs)
    return {
        f"args[{key}]" if isinstance(key, int) else f"kwargs[{key!r}]"
        for (key, before), (_, after) in zip(batch.items(), given.items(), strict=True)
        if any(
            a.shape != b.shape or not torch.equal(a.detach(), b.detach())
            for a, b in zip(flatten_tensors(after), flatten_tensors(before), strict=False)
        )
    }


def same_changes(candidate: set[str], eager: set[str]) -> None:
    """Raise when the candidate changed an input in place that eager leaves alone."""
    extra = sorted(candidate - eager)
    if extra:
        raise CorrectnessError(
            f"input {extra[0]}: the candidate changes it in place where eager does not (a "
            "caller's tensor would change under it)",
            path=f"input {extra[0]}",
            check="inputs",
        )


def tensor_copies(value: Any) -> list[torch.Tensor]:
    """A copy of every tensor in an output, to tell later whether the output still holds."""
    return [t.detach().clone() for t in _pytree.tree_leaves(value) if isinstance(t, torch.Tensor)]


def still_held(kept: tuple[Any, list[torch.Tensor], str] | None, prefix: str) -> None:
    """Raise when an output the caller kept changed under the next call (a static buffer)."""
    if kept is None:
        return
    output, copies, where = kept
    now = [t for t in _pytree.tree_leaves(output) if isinstance(t, torch.Tensor)]
    if len(now) != len(copies) or any(
        a.shape != b.shape or not torch.equal(a.detach(), b)
        for a, b in zip(now, copies, strict=True)
    ):
        raise CorrectnessError(
            f"{prefix}output: the output of {where} changed when the candidate was called again "
            "(it returns a buffer that the next call overwrites: a caller keeping an output "
            "would see it change)",
            path="output",
            check="aliasing",
        )


def detached(value: Any) -> Any:
    """``value`` with every tensor in it detached (an output computed with grad enabled)."""
    return _pytree.tree_map(lambda x: x.detach() if isinstance(x, torch.Tensor) else x, value)


@attrs.define
class _Group:
    """The rows of one leaf that share a shape: sums about ``shift``, per position."""

    shift: torch.Tensor
    count: torch.Tensor
    total: torch.Tensor
    squares: torch.Tensor
    rows: int = 0
    diff_sq: float = 0.0
    ref_sq: float = 0.0

    def add(self, a: torch.Tensor, e: torch.Tensor) -> None:
        """Add rows ``e`` of eager and ``a`` of the candidate (2-D: rows by positions)."""
        finite = torch.isfinite(e)
        centred = torch.where(finite, e - self.shift, 0)
        self.count += finite.sum(dim=0)
        self.total += centred.sum(dim=0)
        self.squares += centred.abs().square().sum(dim=0)
        self.rows += e.shape[0]
        self.diff_sq = capped(
            self.diff_sq + float(torch.where(finite, a - e, 0).abs().square().sum())
        )
        self.ref_sq = capped(self.ref_sq + float(torch.where(finite, e, 0).abs().square().sum()))

    def spread_sq(self) -> float:
        """``sum |e - mean|^2`` over the rows, the mean taken per position."""
        mean_sq = self.total.abs().square() / self.count.clamp_min(1)
        return capped(float((self.squares - mean_sq).clamp_min(0).sum()))


@attrs.define
class Spreads:
    """What one check saw of each floating leaf, over its calls (mutable; it stays in the check)."""

    groups: dict[tuple[str, tuple[int, ...]], _Group] = attrs.field(factory=dict)
    eps: dict[str, float] = attrs.field(factory=dict)

    def add(self, actual: Any, expected: Any, batch_size: int) -> None:
        """One call's outputs (already compared: the same structure and shapes)."""
        found = dict(leaves(actual))
        for path, leaf in leaves(expected):
            e = as_tensor_if_array(leaf)
            a = as_tensor_if_array(found.get(path))
            if not (isinstance(e, torch.Tensor) and isinstance(a, torch.Tensor)):
                continue
            if not (e.is_floating_point() or e.is_complex()) or not e.numel():
                continue
            self.eps[path] = max(self.eps.get(path, 0.0), _rounding(e))
            wide = torch.complex128 if e.is_complex() or a.is_complex() else torch.float64
            e_w, a_w = e.detach().to(wide), a.detach().to(e.device, wide)
            batched = e.ndim >= 1 and e.shape[0] == batch_size
            n = batch_size if batched else 1
            rows_e, rows_a = e_w.reshape(n, -1), a_w.reshape(n, -1)
            key = (path, tuple(e.shape[1:]) if batched else tuple(e.shape))
            group = self.groups.get(key)
            if group is None:
                first = rows_e[0]
                shift = torch.where(torch.isfinite(first), first, 0)
                group = self.groups[key] = _Group(
                    shift=shift,
                    count=torch.zeros_like(shift, dtype=torch.int64),
                    total=torch.zeros_like(shift),
                    squares=torch.zeros_like(shift, dtype=torch.float64),
                )
            group.add(rows_a, rows_e)

    def by_leaf(self) -> dict[str, Spread]:
        """Each leaf's :class:`Spread`, its groups summed, in the order first seen."""
        found: dict[str, Spread] = {}
        for (path, _), group in self.groups.items():
            held = found.get(path)
            found[path] = Spread(
                n_inputs=group.rows + (held.n_inputs if held else 0),
                diff_sq=capped(group.diff_sq + (held.diff_sq if held else 0.0)),
                spread_sq=capped(group.spread_sq() + (held.spread_sq if held else 0.0)),
                ref_sq=capped(group.ref_sq + (held.ref_sq if held else 0.0)),
                eps=self.eps[path],
            )
        return found


def _rounding(e: torch.Tensor) -> float:
    """The rounding unit of eager's values (float32 on CUDA with TF32 allowed: float16's)."""
    if e.dtype == torch.float32 and e.device.type in TF32_DEVICES and tf32_allowed():
        return eps_of(torch.float16)
    return eps_of(e.dtype)
