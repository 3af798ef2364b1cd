"""Held-out inputs across the domain a user calls with (issue 49), not the recorded envelope.

A candidate wrong only on values beyond the recorded range (a statically calibrated backend
clamps what it never saw), only on non-contiguous or ``channels_last`` inputs, only when an
input requires grad, or only on token ids beyond those recorded is rejected, the message naming
the held-out input that showed it; the honest twin of each (as fast, correct) is accepted. The
pure parts (the draws, the layouts, the envelope) are checked on random tensors.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from aitune_fp.adapters.validation import validation_of, with_performance_validation
from aitune_fp.core.config import ProfilingConfig
from aitune_fp.correctness.check import check_correctness
from aitune_fp.correctness.closeness import Closeness
from aitune_fp.correctness.envelope import beyond, envelope_of, layout_of, restyled, styled
from aitune_fp.correctness.failures import CorrectnessError
from aitune_fp.errors import InvalidTypeError, InvalidValueError
from aitune_fp.inputs import GraphSpec, Sample
from aitune_fp.isolation.domain import embedding_limits, heldout_domain
from aitune_fp.isolation.heldout import heldout_samples
from aitune_fp.pipeline.strategies import OneBackendStrategy
from aitune_fp.pipeline.values import NoValidBackendError
from tests.factories import tune_one
from tests.validation_helpers import CLOCK, _ModuleBackend

# --- the models: a dense one (float input), a token one (ids read by an embedding) -----------


class Dense(torch.nn.Module):
    """A linear map; eager also spends ``pause`` of real time (and fake time on CLOCK)."""

    def __init__(self, pause: float = 0.0) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.fc = torch.nn.Linear(16, 8)
        self.pause = pause

    def work(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        CLOCK.advance(4e-4)
        if self.pause:
            time.sleep(self.pause)
        return self.work(x)


class Tokens(torch.nn.Module):
    """Token ids through an embedding of 64 rows, pooled, then a linear head."""

    def __init__(self, pause: float = 0.0) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.emb = torch.nn.Embedding(64, 16)
        self.fc = torch.nn.Linear(16, 8)
        self.pause = pause

    def work(self, ids: torch.Tensor) -> torch.Tensor:
        return self.fc(self.emb(ids).mean(dim=1))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        CLOCK.advance(4e-4)
        if self.pause:
            time.sleep(self.pause)
        return self.work(ids)


def _dense_data() -> list[Sample]:
    torch.manual_seed(1)
    return [Sample((torch.randn(8, 16),))]


def _token_data() -> list[Sample]:
    torch.manual_seed(1)
    return [Sample((torch.randint(0, 24, (8, 12)),))]  # ids 0..23 of the 64 the model reads


# --- the candidates: each wrong only outside the envelope, and its honest twin --------------


def _as_if_contiguous(x: torch.Tensor) -> torch.Tensor:
    """What a kernel that assumes a contiguous input reads: the storage in row-major order."""
    strides = torch.empty(x.shape).stride()
    return torch.as_strided(x.detach(), x.shape, strides, x.storage_offset())


class Candidate(_ModuleBackend):
    """One of the candidates below by ``tag``; built on the recorded samples, like a backend."""

    def _build(self, given: Any) -> None:
        super()._build(given)
        first = given.data[0].args[0]
        self.lo, self.hi = float(first.min()), float(first.max())  # what calibration saw

    def _infer(self, *args: Any, **kwargs: Any) -> Any:
        CLOCK.advance(1e-4)
        (x,) = args
        with torch.no_grad():
            return WRONG.get(self.tag, HONEST.get(self.tag))(self, x)  # type: ignore[misc]


def _clamps(c: Candidate, x: torch.Tensor) -> torch.Tensor:
    return c.module.work(x.clamp(c.lo, c.hi))


def _strides_ignored(c: Candidate, x: torch.Tensor) -> torch.Tensor:
    return c.module.work(_as_if_contiguous(x))


def _grad_path_wrong(c: Candidate, x: torch.Tensor) -> torch.Tensor:
    out = c.module.work(x)
    return out.flip(0) if x.requires_grad else out


def _ids_clamped(c: Candidate, x: torch.Tensor) -> torch.Tensor:
    return c.module.work(x.clamp(max=int(c.hi)))


def _honest(c: Candidate, x: torch.Tensor) -> torch.Tensor:
    return c.module.work(x)


WRONG: dict[str, Callable[[Candidate, torch.Tensor], torch.Tensor]] = {
    "clamps": _clamps,
    "strides": _strides_ignored,
    "grad": _grad_path_wrong,
    "ids": _ids_clamped,
}
HONEST = {"honest": _honest}
#: What the rejection of each wrong candidate names: the held-out input that showed it.
SHOWN_BY = {
    "clamps": "values beyond the recorded range",
    "strides": "non-contiguous",
    "grad": "requires grad",
    "ids": "values beyond the recorded range",
}


def _case(tag: str, pause: float = 0.0) -> tuple[torch.nn.Module, list[Sample]]:
    if tag == "ids":
        return Tokens(pause).eval(), _token_data()
    return Dense(pause).eval(), _dense_data()


# --- the correctness check ------------------------------------------------------------------


def _domain(model: torch.nn.Module, data: list[Sample], seed: int = 5) -> tuple[Sample, ...]:
    limits = embedding_limits(model, data[0])
    return heldout_domain(data, seed, id_limits=limits)


def _built(tag: str, model: torch.nn.Module, data: list[Sample], folder: Path) -> Candidate:
    candidate = Candidate(tag)
    candidate.build(model, GraphSpec(8), data, "cpu", folder)
    return candidate


def _checked(tag: str, folder: Path, **kwargs: Any) -> Any:
    model, data = _case(tag)
    candidate = _built(tag, model, data, folder)
    return check_correctness(
        candidate,
        model,
        GraphSpec(8),
        data,
        heldout=_domain(model, data),
        heldout_seed=5,
        **kwargs,
    )


@pytest.mark.parametrize("tag", sorted(WRONG))
def test_a_candidate_wrong_only_outside_the_envelope_is_rejected_naming_the_input(
    tag: str, tmp_path: Path
) -> None:
    model, data = _case(tag)
    candidate = _built(tag, model, data, tmp_path)
    # the recorded samples and the near draws alone let it through (as before)
    check_correctness(
        candidate, model, GraphSpec(8), data, heldout=heldout_samples(data, 5), heldout_seed=5
    )
    with pytest.raises(CorrectnessError) as caught:
        _checked(tag, tmp_path)
    text = str(caught.value)
    assert "held-out sample" in text and "(seed 5;" in text
    assert SHOWN_BY[tag] in text


@pytest.mark.parametrize("tag", sorted(WRONG))
def test_the_honest_twin_of_each_is_accepted(tag: str, tmp_path: Path) -> None:
    model, data = _case(tag)
    candidate = _built("honest", model, data, tmp_path)
    found = check_correctness(
        candidate, model, GraphSpec(8), data, heldout=_domain(model, data), heldout_seed=5
    )
    assert found.max_abs_error < 1e-5
    assert not found.notes


def test_a_variant_eager_rejects_is_dropped_and_said() -> None:
    """Eager raises on a non-contiguous input: the variant is dropped, not the candidate's fault."""

    class Picky(Dense):
        def work(self, x: torch.Tensor) -> torch.Tensor:
            if not x.is_contiguous():
                raise RuntimeError("a kernel of eager's own needs a contiguous input")
            return self.fc(x)

    model = Picky().eval()
    data = _dense_data()
    found = check_correctness(
        lambda x: model.work(x.contiguous()),
        model,
        GraphSpec(8),
        data,
        heldout=_domain(model, data),
        heldout_seed=5,
    )
    assert any("non-contiguous" in note and "dropped" in note for note in found.notes)


def test_a_variant_whose_eager_output_differs_is_dropped() -> None:
    """Eager's own output changes with the layout: that variant is no reference; it is dropped."""

    class LayoutSensitive(Dense):
        def work(self, x: torch.Tensor) -> torch.Tensor:
            return self.fc(x) + (0.0 if x.is_contiguous() else 1.0)

    model = LayoutSensitive().eval()
    data = _dense_data()
    found = check_correctness(
        lambda x: model.fc(x), model, GraphSpec(8), data, heldout=_domain(model, data)
    )
    assert any("non-contiguous" in n and "eager's output differs" in n for n in found.notes)


def test_channels_last_variant_of_an_image_input_catches_a_layout_bug() -> None:
    torch.manual_seed(0)
    conv = torch.nn.Conv2d(3, 4, 3).eval()
    data = [Sample((torch.randn(2, 3, 8, 8),))]
    domain = heldout_domain(data, 3)
    assert any(layout_of(s.args[0]) == "channels_last" for s in domain), (
        "no channels_last variant of a 4-D float input"
    )

    def nchw_only(x: torch.Tensor) -> torch.Tensor:
        last = x.is_contiguous(memory_format=torch.channels_last) and not x.is_contiguous()
        return conv(_as_if_contiguous(x)) if last else conv(x)

    with torch.no_grad(), pytest.raises(CorrectnessError, match="channels_last"):
        check_correctness(nchw_only, conv, GraphSpec(2), data, heldout=domain)
    with torch.no_grad():
        check_correctness(conv, conv, GraphSpec(2), data, heldout=domain)


def test_eager_failing_on_ids_beyond_its_table_drops_that_draw() -> None:
    """No embedding was found for the ids (say the limit was wrong): eager's IndexError drops it."""
    model = Tokens().eval()
    data = _token_data()
    domain = heldout_domain(data, 5, id_limits={0: 1000})  # a wrong limit, larger than the table
    found = check_correctness(model, model, GraphSpec(8), data, heldout=domain, heldout_seed=5)
    assert any("dropped" in note and "eager raised" in note for note in found.notes)


# --- through a tune, on the default worker path --------------------------------------------

_CONFIG = ProfilingConfig(looks=(10, 20, 40), max_seconds=2.0, warmup_max_calls=8)
_REAL = ProfilingConfig(looks=(10, 20), max_seconds=10.0, warmup_max_calls=10)


def _tune(tag: str, data_tag: str, tmp_path: Path, pause: float = 0.0, **kwargs: Any) -> Any:
    model, data = _case(data_tag, pause)
    kwargs.setdefault("profiling_config", _CONFIG)
    return tune_one(Candidate(tag), model, data, tmp_path, **kwargs)


@pytest.mark.parametrize("tag", sorted(WRONG))
def test_a_tune_in_a_worker_rejects_it_at_correctness_naming_the_input(
    tag: str, tmp_path: Path
) -> None:
    report = _tune(tag, tag, tmp_path)
    assert report.isolation == "process"
    (failure,) = report.failures
    assert failure.stage == "correctness"
    assert SHOWN_BY[tag] in failure.reason and "held-out sample" in failure.reason
    assert not report.results


@pytest.mark.parametrize("tag", sorted(WRONG))
def test_a_tune_accepts_the_honest_twin_in_process(tag: str, tmp_path: Path) -> None:
    report = _tune("honest", tag, tmp_path, timer=CLOCK)
    assert not report.failures
    (result,) = report.results
    assert result.passed  # 4x faster on the fake clock, and correct on the whole domain


@pytest.mark.slow
@pytest.mark.parametrize("data_tag", ["clamps", "ids"])
def test_a_tune_in_a_worker_accepts_the_honest_twin(data_tag: str, tmp_path: Path) -> None:
    report = _tune("honest", data_tag, tmp_path, pause=0.002, profiling_config=_REAL)
    assert report.isolation == "process"
    assert not report.failures
    (result,) = report.results
    assert result.passed


def test_a_users_input_generator_adds_its_samples(tmp_path: Path) -> None:
    """The domain is special (a mask the tool cannot guess): the user's draws are checked too."""
    seen: list[int] = []

    def negatives(recorded: tuple[Sample, ...], seed: int) -> list[Sample]:
        seen.append(seed)
        return [Sample((-(s.args[0].abs() + 100.0),)) for s in recorded]

    class OnlyPositive(Candidate):
        def _infer(self, *args: Any, **kwargs: Any) -> Any:
            CLOCK.advance(1e-4)
            with torch.no_grad():
                return self.module.work(args[0].clamp(min=-50.0))  # wrong only below -50

    def tune(**kwargs: Any) -> Any:
        model, data = _case("clamps")
        strategy = with_performance_validation(
            OneBackendStrategy(OnlyPositive("negatives")),
            profiling_config=_CONFIG,
            timer=CLOCK,
            **kwargs,
        )
        strategy.tune(model, "m", GraphSpec(8), data, "cpu", tmp_path)
        return validation_of(strategy).last_report

    assert not tune().failures  # the tool's own draws do not reach below -50
    (failure,) = tune(closeness=Closeness(input_generator=negatives)).failures
    assert failure.stage == "correctness" and "held-out sample" in failure.reason
    assert seen, "the generator was not called"


def test_a_users_input_generator_that_fails_fails_the_baseline_naming_it(tmp_path: Path) -> None:
    def broken(recorded: tuple[Sample, ...], seed: int) -> list[Sample]:
        raise KeyError("no such mask")

    model, data = _case("clamps")
    strategy = with_performance_validation(
        OneBackendStrategy(Candidate("honest")),
        profiling_config=_CONFIG,
        closeness=Closeness(input_generator=broken),
    )
    with pytest.raises(NoValidBackendError, match="input_generator broken failed: KeyError"):
        strategy.tune(model, "m", GraphSpec(8), data, "cpu", tmp_path)
    report = validation_of(strategy).last_report
    assert report is not None and report.baseline_error is not None
    assert "input_generator broken failed: KeyError" in report.baseline_error
    assert not report.results


def test_a_users_input_generator_is_checked() -> None:
    with pytest.raises(InvalidTypeError, match="input_generator"):
        Closeness(input_generator=3)  # type: ignore[arg-type]
    closeness = Closeness(input_generator=lambda recorded, seed: ["not a sample"])
    with pytest.raises(InvalidTypeError, match="input_generator"):
        closeness.generated(tuple(_dense_data()), 0, GraphSpec(8))
    two = Closeness(input_generator=lambda recorded, seed: [Sample((torch.randn(2, 16), 1))])
    with pytest.raises(InvalidValueError, match="input_generator"):
        two.generated(tuple(_dense_data()), 0, GraphSpec(8))  # not the recorded inputs
    ragged = Closeness(input_generator=lambda r, s: [Sample((torch.randn(2, 16),), {"y": 1})])
    with pytest.raises(InvalidValueError, match="input_generator"):
        ragged.generated(tuple(_dense_data()), 0, GraphSpec(8))
    broken = Closeness(input_generator=lambda recorded, seed: 1 / 0)
    with pytest.raises(InvalidValueError, match="input_generator <lambda> failed"):
        broken.generated(tuple(_dense_data()), 0, GraphSpec(8))
    fine = Closeness(input_generator=lambda recorded, seed: [((recorded[0].args[0] * 2,), {})])
    (made,) = fine.generated(tuple(_dense_data()), 0, GraphSpec(8))
    assert isinstance(made, Sample)


# --- the draws (pure parts) -----------------------------------------------------------------

_floats = st.floats(-1e3, 1e3, allow_nan=False, allow_infinity=False, width=32)


@settings(max_examples=40)
@given(st.lists(_floats, min_size=2, max_size=40).filter(lambda v: min(v) < max(v)), st.integers())
def test_a_wide_draw_leaves_the_recorded_range(values: list[float], seed: int) -> None:
    recorded = Sample((torch.tensor(values).reshape(-1, 1),))
    wide = heldout_domain([recorded], seed)[1]  # near draw, then the wide one
    x, y = recorded.args[0], wide.args[0]
    assert y.shape == x.shape and y.dtype == x.dtype
    assert bool(torch.isfinite(y).all())
    assert float(y.min()) < float(x.min()) or float(y.max()) > float(x.max())
    assert beyond(wide, envelope_of([recorded]))


@settings(max_examples=40)
@given(st.integers(2, 50), st.integers(0, 40), st.integers(1, 200), st.integers())
def test_ids_reach_beyond_the_recorded_yet_stay_below_the_table(
    vocab: int, low: int, extra: int, seed: int
) -> None:
    ids = torch.arange(low, low + vocab).repeat(2).reshape(2, -1)
    limit = low + vocab + extra
    domain = heldout_domain([Sample((ids,))], seed, id_limits={0: limit})
    drawn = torch.cat([s.args[0].flatten() for s in domain])
    assert int(drawn.min()) >= 0 and int(drawn.max()) <= limit - 1
    assert int(drawn.max()) > low + vocab - 1  # beyond the recorded ids


@settings(max_examples=40)
@given(st.integers(2, 50), st.integers(0, 40), st.integers())
def test_ids_without_a_known_table_stay_within_the_recorded_range(
    vocab: int, low: int, seed: int
) -> None:
    ids = torch.arange(low, low + vocab, dtype=torch.int64).repeat(2).reshape(2, -1)
    for sample in heldout_domain([Sample((ids,))], seed):
        assert low <= int(sample.args[0].min()) and int(sample.args[0].max()) <= low + vocab - 1


@settings(max_examples=60)
@given(
    st.lists(st.integers(1, 4), min_size=1, max_size=5),
    st.sampled_from(["contiguous", "strided", "channels_last"]),
    st.booleans(),
)
def test_a_styled_copy_keeps_the_values_and_takes_the_layout(
    shape: list[int], layout: str, grad: bool
) -> None:
    x = torch.randn(shape)
    if layout == "channels_last" and x.dim() not in (4, 5):
        layout = "contiguous"
    y = styled(x, layout, grad)  # type: ignore[arg-type]
    assert torch.equal(y.detach(), x) and y is not x
    assert y.requires_grad == grad and y.is_leaf
    assert layout_of(y) in ("contiguous", layout)  # a shape may not admit the layout
    if layout == "strided" and max(shape) > 1:
        assert layout_of(y) == "strided"
    # a batch made from it (rows tiled to 3) takes its style again
    (batch,) = restyled(GraphSpec(8).make_batch(Sample((y,)), 3), Sample((y,))).args
    assert torch.equal(batch.detach(), x[torch.arange(3) % x.shape[0]])
    assert batch.requires_grad == grad and batch.is_leaf
    assert layout_of(batch) in ("contiguous", layout_of(y))
    if layout_of(y) == "strided":
        assert layout_of(batch) == "strided"


def test_the_domain_holds_each_variant_once_per_recorded_sample() -> None:
    data = [Sample((torch.randn(4, 16),)), Sample((torch.randn(2, 16),))]
    domain = heldout_domain(data, 0)
    envelope = envelope_of(data)
    said = [" ".join(beyond(s, envelope)) for s in domain]
    assert sum("beyond the recorded range" in s for s in said) == 2
    assert sum("non-contiguous" in s for s in said) == 2
    assert sum("requires grad" in s for s in said) == 2
    assert heldout_domain(data, 0)[3].args[0].shape == (4, 16)  # in order, shapes kept
    assert [s.args[0].shape[0] for s in domain[:2]] == [4, 2]  # the near draws first


def test_embedding_limits_name_the_input_an_embedding_reads() -> None:
    class Two(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.words = torch.nn.Embedding(100, 4)
            self.kinds = torch.nn.Embedding(3, 4)
            self.places = torch.nn.Embedding(50, 4)

        def forward(self, ids: torch.Tensor, kinds: torch.Tensor, *, mask: torch.Tensor) -> Any:
            places = torch.arange(ids.shape[1])  # not an input: no limit from it
            return (self.words(ids.view(-1)) + self.kinds(kinds.flatten())).sum() + self.places(
                places
            ).sum() * mask.sum()

    sample = Sample(
        (torch.randint(0, 30, (2, 5)), torch.zeros(2, 5, dtype=torch.long)),
        {"mask": torch.ones(2, 5, dtype=torch.long)},
    )
    assert embedding_limits(Two(), sample) == {0: 100, 1: 3}
