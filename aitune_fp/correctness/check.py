"""The correctness check a candidate must pass before it is timed, and the pluggable Closeness.

For every recorded sample, at every batch size the candidate serves, the candidate and the eager
reference run on fresh copies of the same batch and their outputs are compared
(``compare.py``). A user's own accuracy metric, when given, is averaged over those calls and
its degradation from eager's held against a budget.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs
import torch

from aitune_fp._tree import clone_inputs, flatten_tensors
from aitune_fp.core._checks import check_finite, finite, of_type, one_of
from aitune_fp.core.accuracy import (
    CRITERIA_MODES,
    CriteriaMode,
    Criterion,
    NoiseFloor,
    accuracy_conflict,
    judge_variation,
    metric_criterion,
    worst_per_criterion,
)
from aitune_fp.core.mismatch import Mismatch
from aitune_fp.correctness._errors import CorrectnessError, ReferenceFailedError
from aitune_fp.correctness._values import Walk
from aitune_fp.correctness.compare import check_expected_dtype, compare_outputs, compare_tree
from aitune_fp.correctness.tolerances import TIERS, Tolerances
from aitune_fp.correctness.variation import Spreads
from aitune_fp.errors import InvalidTypeError, InvalidValueError, error_name
from aitune_fp.inputs import BatchSpec, Sample, as_sample
from aitune_fp.profiling.watchdog import progress

__all__ = ["AccuracyMetric", "Closeness", "check_correctness", "served_batch_sizes"]

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
    """Check ``candidate`` against ``reference`` on every sample at every batch size it serves.

    The batch sizes: :func:`served_batch_sizes` (the two ends, every power of two between them,
    and ``batch_sizes`` within the range). Both run under ``torch.no_grad()`` on their own fresh
    copies of each batch, so the stored samples are never mutated; with ``grad_mode`` the
    candidate is also called once with grad enabled (the first sample at the largest size),
    since a user's call may run either way. ``noise_floor``: eager's own error per output leaf
    (:func:`eager_noise_floor`). ``accuracy``: a user metric; its mean drop from eager's own
    score over the calls must stay within ``max_degradation``. ``heldout``: samples derived
    from ``data`` (drawn with ``heldout_seed``), checked after it and named as such. Over all
    the calls, each floating leaf's error is also held against eager's variation across the
    inputs (``Tolerances.variation``). Returns the worst mismatch over
    all of them against the budget (a pass still says how close it came). Raises
    :class:`CorrectnessError` naming the sample, batch size, output path and failed check; a
    failing reference raises :class:`ReferenceFailedError` (not the candidate's fault).
    """
    check_expected_dtype(expected_dtype)
    _check_metric(accuracy, max_degradation)
    data_value: object = data
    if isinstance(data_value, (str, bytes)) or not isinstance(data_value, Sequence):
        raise InvalidTypeError(f"data must be a sequence of samples, got {type(data).__name__}")
    held_value: object = heldout
    if isinstance(held_value, (str, bytes)) or not isinstance(held_value, Sequence):
        raise InvalidTypeError(
            f"heldout must be a sequence of samples, got {type(heldout).__name__}"
        )
    if not data:
        raise InvalidValueError(
            f"data must hold at least one sample for the correctness check "
            f"(graph spec {graph_spec.name!r}), got none"
        )
    walk = Walk(
        tol=tolerances if tolerances is not None else Tolerances(),
        expected_dtype=expected_dtype,
        noise_floor=noise_floor,
    )
    prefix = f"{name}: " if name else ""
    sizes = served_batch_sizes(
        graph_spec.min_batch_size, graph_spec.get_max_batch_size(), batch_sizes
    )
    baselines: list[float] = []
    scores: list[float] = []
    seed = "" if heldout_seed is None else f" (seed {heldout_seed})"
    labelled = [(f"sample {i}", i, s, False) for i, s in enumerate(data)]
    labelled += [(f"held-out sample {i}{seed}", i, s, True) for i, s in enumerate(heldout)]
    cases = [(*item, size, False) for item in labelled for size in sizes]
    if grad_mode:
        cases.append((*labelled[0], sizes[-1], True))
    kept: tuple[Any, list[torch.Tensor], str] | None = None
    spreads, recorded = Spreads(), Spreads()
    for label, index, item, held, size, with_grad in cases:
        batch = graph_spec.make_batch(as_sample(item), size)
        where = f"{label} at batch size {size}{' with grad enabled' if with_grad else ''}"
        args, kwargs = clone_inputs(batch.args, batch.kwargs)
        try:
            with torch.no_grad():
                expected = reference(*args, **kwargs)
            progress()  # a call completed: a slow check that keeps going is not hung
        except Exception as exc:
            raise ReferenceFailedError(
                f"{prefix}the reference (eager) failed on {where}: {type(exc).__name__}: {exc}"
            ) from exc
        eager_changed = changed_inputs(batch, args, kwargs)
        args, kwargs = clone_inputs(batch.args, batch.kwargs)
        try:
            with torch.set_grad_enabled(with_grad):
                actual = candidate(*args, **kwargs)
            progress()
            if with_grad:  # eager's reference was computed without: only the values compare
                actual = _detached(actual)
        except Exception as exc:
            raise CorrectnessError(
                f"{prefix}{where}: output: the candidate raised {error_name(exc)}: {exc}",
                path="output",
                check="exception",
                sample_index=index,
                batch_size=size,
            ) from exc
        try:
            _same_changes(changed_inputs(batch, args, kwargs), eager_changed)
            _still_held(kept, prefix)  # the previous call's output, kept as a caller would
            compare_tree(actual, expected, "output", walk)
            kept = (actual, _tensor_copies(actual), where)
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
    inputs = f"recorded samples: {len(data)}"
    inputs += f", held-out: {len(heldout)}{seed}" if heldout else ""
    inputs += f"; batch sizes {', '.join(map(str, sizes))}"
    found = _judge_variation(Mismatch.combine(walk.tally), spreads, recorded, walk.tol.variation)
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
            f"{prefix}output: the accuracy metric {_metric_name(accuracy)} dropped from eager's "
            f"(mean over {len(scores)} calls): {metric.describe()}",
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


def _check_metric(accuracy: object, max_degradation: object) -> None:
    """Refuse a metric that is not callable, or a degradation budget that is not a number >= 0."""
    if accuracy is not None and not callable(accuracy):
        raise InvalidTypeError(
            f"accuracy must be None or a callable(reference_outputs, candidate_outputs) -> float, "
            f"got {accuracy!r}"
        )
    check_finite("max_degradation", max_degradation, minimum=0)


def _metric_name(accuracy: AccuracyMetric) -> str:
    """The metric's name for messages."""
    return getattr(accuracy, "__name__", type(accuracy).__name__)


def _score(accuracy: AccuracyMetric, expected: Any, actual: Any, what: str) -> float:
    """One call of the user's metric, checked to be a finite real number."""
    try:
        value: object = accuracy(expected, actual)
    except Exception as exc:
        raise InvalidValueError(
            f"the accuracy metric {_metric_name(accuracy)} failed on {what}: "
            f"{type(exc).__name__}: {exc}"
        ) from exc
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise InvalidTypeError(
            f"the accuracy metric {_metric_name(accuracy)} must return a finite float, got "
            f"{value!r} on {what}"
        )
    return float(value)


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


def changed_inputs(batch: Sample, args: Sequence[Any], kwargs: Mapping[str, Any]) -> set[str]:
    """The inputs (``args[i]``, ``kwargs['k']``) whose tensors a call changed in place.

    ``args`` and ``kwargs`` are the copies of ``batch`` the call was given.
    """
    given = Sample(tuple(args), kwargs)
    return {
        f"args[{key}]" if isinstance(key, int) else f"kwargs[{key!r}]"
        for (key, before), (_, after) in zip(batch.items(), given.items(), strict=True)
        if any(
            a.shape != b.shape or not torch.equal(a.detach(), b.detach())
            for a, b in zip(flatten_tensors(after), flatten_tensors(before), strict=False)
        )
    }


def _same_changes(candidate: set[str], eager: set[str]) -> None:
    """Raise when the candidate changed an input in place that eager leaves alone."""
    extra = sorted(candidate - eager)
    if extra:
        raise CorrectnessError(
            f"input {extra[0]}: the candidate changes it in place where eager does not (a "
            "caller's tensor would change under it)",
            path=f"input {extra[0]}",
            check="inputs",
        )


def _tensor_copies(value: Any) -> list[torch.Tensor]:
    """A copy of every tensor in an output, to tell later whether the output still holds."""
    from torch.utils import _pytree

    return [t.detach().clone() for t in _pytree.tree_leaves(value) if isinstance(t, torch.Tensor)]


def _still_held(kept: tuple[Any, list[torch.Tensor], str] | None, prefix: str) -> None:
    """Raise when an output the caller kept changed under the next call (a static buffer)."""
    if kept is None:
        return
    from torch.utils import _pytree

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


def _detached(value: Any) -> Any:
    """``value`` with every tensor in it detached (an output computed with grad enabled)."""
    from torch.utils import _pytree

    return _pytree.tree_map(lambda x: x.detach() if isinstance(x, torch.Tensor) else x, value)


def _metric_or_none(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    """Validator: None or a callable."""
    if value is not None and not callable(value):
        raise InvalidTypeError(
            f"{attribute.name} must be None or a callable(reference_outputs, candidate_outputs) "
            f"-> float, got {value!r}"
        )


def _share(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    """Validator: a finite number in [0, 1]."""
    if check_finite(attribute.name, value, minimum=0) > 1:
        raise InvalidValueError(f"{attribute.name} must be at most 1, got {value!r}")


_optional = attrs.validators.optional
#: The settings that adjust a backend's budget (None: left as the budget has it).
_ADJUSTS = ("rel_l2", "outlier_share", "noise_factor")


@attrs.frozen(kw_only=True)
class Closeness:
    """The pipeline's check that a candidate computes what eager computes (pluggable).

    ``check`` runs once, after the build: every sample at every batch size it serves
    (:func:`served_batch_sizes`), and once with grad enabled.
    ``spot`` runs on outputs of timed calls. ``tolerances``: one budget for every candidate;
    None gives each backend its own (its ``tolerances`` attribute, else the default tiers).
    ``noise_floor``: eager's own error per output leaf (:func:`eager_noise_floor`), which lifts
    a leaf's rel-L2 budget to ``noise_factor`` times it where that is larger. ``accuracy``: a
    user metric ``metric(reference_outputs, candidate_outputs) -> float`` (higher is better);
    the candidate's mean drop from eager's own score, ``metric(reference, reference)``, must
    stay within ``max_degradation`` (checked by ``check`` only; spot checks skip it).
    ``enabled=False`` skips both, for backends whose values differ by design.

    Settings that adjust whichever budget a backend is held to (its own, or ``tolerances``):
    ``criteria`` (``auto``: the tiers' defaults; ``elementwise``: the element-wise check in every
    tier; ``norm``: the norm criteria in every tier), ``rel_l2`` (the rel-L2 budget of every
    tier), ``outlier_share``, ``noise_factor``. ``calibrate=True``: the tune measures eager's own
    noise floor once, right after the eager baseline (float32 eager against a float64 copy on
    the recorded samples), and every candidate's norm budgets use it (``docs/accuracy.md``).
    """

    enabled: bool = attrs.field(default=True, validator=attrs.validators.instance_of(bool))
    tolerances: Tolerances | None = attrs.field(
        default=None, validator=attrs.validators.optional(attrs.validators.instance_of(Tolerances))
    )
    noise_floor: NoiseFloor | None = attrs.field(
        default=None, validator=attrs.validators.optional(attrs.validators.instance_of(NoiseFloor))
    )
    accuracy: AccuracyMetric | None = attrs.field(default=None, validator=_metric_or_none)
    max_degradation: float = attrs.field(default=0.0, validator=finite(minimum=0))
    criteria: CriteriaMode = attrs.field(default="auto", validator=one_of(CRITERIA_MODES))
    rel_l2: float | None = attrs.field(default=None, validator=_optional(finite(minimum=0)))
    outlier_share: float | None = attrs.field(default=None, validator=_optional(_share))
    noise_factor: float | None = attrs.field(default=None, validator=_optional(finite(minimum=0)))
    calibrate: bool = attrs.field(default=False, validator=of_type(bool))

    def __attrs_post_init__(self) -> None:
        """Refuse settings that would do nothing (``rel_l2`` with element-wise criteria)."""
        given = [k for k in _ADJUSTS if getattr(self, k) is not None]
        given += ["calibrate"] * self.calibrate + ["noise_floor"] * (self.noise_floor is not None)
        problem = accuracy_conflict(self.criteria, given)
        if problem is not None:
            raise InvalidValueError(problem)

    def budget(self, backend: object) -> Tolerances | None:
        """The tolerances ``backend`` is held to (None: the default tiers), adjusted."""
        found = self.tolerances
        if found is None:
            own = getattr(backend, "tolerances", None)
            found = own if isinstance(own, Tolerances) else None
        changes: dict[str, Any] = {}
        if self.criteria != "auto":
            changes["norm_tiers"] = () if self.criteria == "elementwise" else TIERS
        if self.rel_l2 is not None:
            changes.update({f"{tier}_rel_l2": self.rel_l2 for tier in TIERS})
        if self.outlier_share is not None:
            changes["outlier_share"] = self.outlier_share
        if self.noise_factor is not None:
            changes["noise_factor"] = self.noise_factor
        if not changes:
            return found
        return attrs.evolve(found if found is not None else Tolerances(), **changes)

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
        heldout: Sequence[Sample] = (),
        heldout_seed: int | None = None,
    ) -> Mismatch | None:
        """The worst mismatch over the samples (None when switched off); raises on a failure.

        ``heldout``: samples derived from ``data`` with ``heldout_seed``, checked in the same
        pass (eager's variation is measured over both).
        """
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
            noise_floor=self.noise_floor,
            accuracy=self.accuracy,
            max_degradation=self.max_degradation,
            heldout=heldout,
            heldout_seed=heldout_seed,
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
            output,
            expected,
            expected_dtype=expected_dtype,
            tolerances=tolerances,
            noise_floor=self.noise_floor,
        )
