"""``Closeness``: the pluggable check that a candidate computes what eager computes."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import attrs
import torch

from aitune_fp.core._checks import finite, of_type, one_of, optional, share
from aitune_fp.core.accuracy import CRITERIA_MODES, CriteriaMode, NoiseFloor, accuracy_conflict
from aitune_fp.core.mismatch import Mismatch
from aitune_fp.correctness.check import AccuracyMetric, check_correctness, metric_name
from aitune_fp.correctness.compare import compare_outputs
from aitune_fp.correctness.tolerances import TIERS, Tolerances
from aitune_fp.errors import InvalidTypeError, InvalidValueError, error_name
from aitune_fp.inputs import BatchSpec, Sample, as_sample

#: A user's own held-out inputs: ``generator(recorded_samples, seed) -> samples`` (each a
#: ``Sample`` or an ``(args, kwargs)`` pair), checked beside the tool's own draws.
InputGenerator = Callable[[tuple[Sample, ...], int], Iterable[Any]]


def _callable_or_none(signature: str) -> Callable[[object, attrs.Attribute[Any], object], None]:
    """Validator: None or a callable ``signature`` (named in the error)."""

    def check(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
        if value is not None and not callable(value):
            raise InvalidTypeError(
                f"{attribute.name} must be None or a callable{signature}, got {value!r}"
            )

    return check


#: The settings that adjust a backend's budget (None: left as the budget has it).
_ADJUSTS = ("rel_l2", "outlier_share", "noise_factor")


@attrs.frozen(kw_only=True)
class Closeness:
    """The pipeline's check that a candidate computes what eager computes (pluggable)."""

    enabled: bool = attrs.field(default=True, validator=attrs.validators.instance_of(bool))
    tolerances: Tolerances | None = attrs.field(
        default=None, validator=attrs.validators.optional(attrs.validators.instance_of(Tolerances))
    )
    noise_floor: NoiseFloor | None = attrs.field(
        default=None, validator=attrs.validators.optional(attrs.validators.instance_of(NoiseFloor))
    )
    accuracy: AccuracyMetric | None = attrs.field(
        default=None, validator=_callable_or_none("(reference_outputs, candidate_outputs) -> float")
    )
    max_degradation: float = attrs.field(default=0.0, validator=finite(minimum=0))
    criteria: CriteriaMode = attrs.field(default="auto", validator=one_of(CRITERIA_MODES))
    rel_l2: float | None = optional(finite(minimum=0))
    outlier_share: float | None = optional(share)
    noise_factor: float | None = optional(finite(minimum=0))
    calibrate: bool = attrs.field(default=False, validator=of_type(bool))
    input_generator: InputGenerator | None = attrs.field(
        default=None, validator=_callable_or_none("(recorded_samples, seed) -> samples")
    )

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
        for key in ("outlier_share", "noise_factor"):
            if getattr(self, key) is not None:
                changes[key] = getattr(self, key)
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
            noise_floor=self.noise_floor,
            accuracy=self.accuracy,
            max_degradation=self.max_degradation,
            heldout=heldout,
            heldout_seed=heldout_seed,
        )

    def generated(
        self, recorded: Sequence[Sample], seed: int, graph_spec: BatchSpec
    ) -> tuple[Sample, ...]:
        """The user's held-out inputs (``input_generator``), checked to fit; none without one."""
        if self.input_generator is None:
            return ()
        name = f"input_generator {metric_name(self.input_generator)}"
        try:
            made = list(self.input_generator(tuple(recorded), seed))
        except Exception as exc:
            raise InvalidValueError(f"{name} failed: {error_name(exc)}: {exc}") from exc
        first = as_sample(recorded[0]) if recorded else None
        samples: list[Sample] = []
        for index, item in enumerate(made):
            try:
                sample = as_sample(item)
            except (TypeError, ValueError) as exc:
                raise InvalidTypeError(
                    f"{name} returned item {index}, not a sample: {exc}"
                ) from exc
            if first is not None and (
                len(sample.args) != len(first.args) or set(sample.kwargs) != set(first.kwargs)
            ):
                raise InvalidValueError(
                    f"{name} returned item {index} with other inputs than the recorded samples"
                )
            try:
                graph_spec.make_batch(sample, graph_spec.min_batch_size)
            except (TypeError, ValueError) as exc:
                raise InvalidValueError(
                    f"{name} returned item {index}, which the graph spec cannot batch: {exc}"
                ) from exc
            samples.append(sample)
        return tuple(samples)

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
