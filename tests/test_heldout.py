"""Specs of the held-out inputs: batches a memorising candidate has not seen (real CPU tensors)."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from aitune_fp.correctness.compare import compare_outputs
from aitune_fp.correctness.failures import CorrectnessError
from aitune_fp.errors import InvalidTypeError, InvalidValueError
from aitune_fp.inputs import Sample
from aitune_fp.isolation.heldout import (
    NOISE_SCALE,
    HeldoutUnavailableError,
    heldout_batches,
    heldout_draws,
    heldout_samples,
)


def _tensors(sample: Sample) -> dict[Any, torch.Tensor]:
    return {k: v for k, v in sample.items() if isinstance(v, torch.Tensor)}


def _same_values(a: Sample, b: Sample) -> bool:
    ta, tb = _tensors(a), _tensors(b)
    return ta.keys() == tb.keys() and all(torch.equal(ta[k], tb[k]) for k in ta)


def _recorded(seed: int = 0) -> Sample:
    gen = torch.Generator().manual_seed(seed)
    return Sample(
        (
            torch.randn(6, 3, 4, generator=gen),
            torch.randint(10, 20, (6, 5), generator=gen),
            "mode",
            3,
        ),
        {
            "mask": torch.rand(6, 5, generator=gen) > 0.5,
            "half": torch.rand(6, 8, generator=gen).to(torch.float16),
            "scale": torch.tensor(2.0),
            "nested": [torch.ones(2)],
        },
    )


def _snapshot(sample: Sample) -> dict[Any, torch.Tensor]:
    return {k: v.clone() for k, v in _tensors(sample).items()}


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 5), st.integers(0, 2**63 - 1))
def test_a_draw_by_seed_is_the_held_out_batch_of_that_seed(recorded_seed: int, seed: int) -> None:
    """The timed calls' draws read the inputs once, and give what heldout_batches gives."""
    recorded = _recorded(recorded_seed)
    assert _same_values(heldout_draws(recorded)(seed), heldout_batches(recorded, 1, seed)[0])


class TestStructure:
    def test_structure_dtype_shape_device_kept(self) -> None:
        """Same positional count, keyword names, dtypes, shapes and devices; non-tensors shared."""
        recorded = _recorded()
        for derived in heldout_batches(recorded, 3, seed=1):
            assert len(derived.args) == len(recorded.args)
            assert derived.kwargs.keys() == recorded.kwargs.keys()
            for (key, new), (_, old) in zip(derived.items(), recorded.items(), strict=True):
                if isinstance(old, torch.Tensor):
                    assert isinstance(new, torch.Tensor), key
                    assert (new.dtype, new.shape, new.device) == (old.dtype, old.shape, old.device)
                    assert new.data_ptr() != old.data_ptr(), key
                elif key == "nested":
                    assert torch.equal(new[0], old[0])
                    assert new[0] is not old[0]
                else:
                    assert new is old

    def test_floats_stay_in_observed_range(self) -> None:
        """Noise is clamped to each floating tensor's [min, max]."""
        recorded = _recorded()
        for derived in heldout_batches(recorded, 5, seed=2):
            for key in (0, "half"):
                new, old = _input(derived, key), _input(recorded, key)
                assert new.min() >= old.min()
                assert new.max() <= old.max()

    def test_floats_are_close_to_the_recorded_rows(self) -> None:
        """Without shuffling (one row), the noise is small: a few NOISE_SCALE stds at most."""
        old = torch.randn(1, 1000, generator=torch.Generator().manual_seed(0))
        (derived,) = heldout_batches(Sample((old,)), 1, seed=0)
        change = (derived.args[0] - old).abs()
        assert change.max() <= 6 * NOISE_SCALE * old.std()
        assert change.mean() > 0

    def test_integers_and_bools_keep_their_vocabulary(self) -> None:
        """Integer and bool tensors only hold values they held when recorded."""
        recorded = _recorded()
        for derived in heldout_batches(recorded, 5, seed=3):
            for key in (1, "mask"):
                old_values = set(torch.unique(_input(recorded, key)).tolist())
                assert set(torch.unique(_input(derived, key)).tolist()) <= old_values

    def test_rows_stay_together(self) -> None:
        """One permutation for every batched input: row i of one input goes with row i of another."""
        rows = torch.arange(8)[:, None]
        recorded = Sample((rows.expand(8, 20).clone(), rows.expand(8, 20) * 100))
        shuffled = False
        for derived in heldout_batches(recorded, 6, seed=4):
            a, b = derived.args
            row_a = a.mode(dim=1).values
            row_b = b.mode(dim=1).values
            assert torch.equal(row_a * 100, row_b)
            shuffled |= not torch.equal(row_a, torch.arange(8))
        assert shuffled

    def test_batch_axes_are_honoured(self) -> None:
        """A declared batch axis is shuffled on; an unbatched input keeps its rows in place."""
        seq = torch.arange(5)[None, :, None].expand(3, 5, 40).clone()  # batch axis 1
        table = torch.arange(30).reshape(3, 10)  # not batched
        axes: dict[int | str, int | None] = {0: 1, 1: None}
        for derived in heldout_batches(Sample((seq, table)), 4, seed=5, batch_axes=axes):
            new_seq, new_table = derived.args
            assert new_seq.shape == seq.shape
            column = new_seq.mode(dim=2).values.mode(dim=0).values
            assert sorted(column.tolist()) == list(range(5))
            assert (new_table == table).float().mean() > 0.8  # resampled in place, not shuffled

    def test_complex_and_nonfinite_inputs(self) -> None:
        """Complex tensors are varied as real and imaginary parts; NaN and inf stay put."""
        z = torch.randn(4, 6, dtype=torch.complex64)
        x = torch.randn(4, 6)
        x[0, 0], x[1, 1] = float("nan"), float("inf")
        (derived,) = heldout_batches(Sample((z, x)), 1, seed=6, batch_axes={0: None, 1: None})
        new_z, new_x = derived.args
        assert new_z.dtype == torch.complex64
        assert not torch.equal(new_z, z)
        assert torch.isnan(new_x[0, 0])
        assert torch.isinf(new_x[1, 1])
        finite = torch.isfinite(x)
        assert new_x[finite].min() >= x[finite].min()
        assert new_x[finite].max() <= x[finite].max()

    def test_requires_grad_is_kept(self) -> None:
        """An input that required grad gives a new leaf that does too."""
        x = torch.randn(3, 4, requires_grad=True)
        (derived,) = heldout_batches(Sample((x,)), 1, seed=0)
        assert derived.args[0].requires_grad
        assert derived.args[0].is_leaf


class TestDistinct:
    @pytest.mark.parametrize("n", [1, 2, 8])
    def test_every_batch_differs_from_the_recorded_and_each_other(self, n: int) -> None:
        """No derived batch equals the recorded one or another derived one."""
        recorded = _recorded()
        derived = heldout_batches(recorded, n, seed=7)
        assert len(derived) == n
        for batch in derived:
            assert not _same_values(batch, recorded)
        for a, b in itertools.combinations(derived, 2):
            assert not _same_values(a, b)

    def test_small_vocabulary_is_forced_to_differ(self) -> None:
        """A tiny integer input still gives distinct batches (redrawn until it differs)."""
        recorded = Sample((torch.tensor([[0, 1, 1, 0]]),))
        derived = heldout_batches(recorded, 6, seed=8)
        values = {tuple(batch.args[0].flatten().tolist()) for batch in derived}
        assert len(values) == 6
        assert (0, 1, 1, 0) not in values

    def test_single_row_single_value_batch(self) -> None:
        """Shuffling one row changes nothing, so the values must."""
        recorded = Sample((torch.tensor([[3.0, 5.0]]),))
        for batch in heldout_batches(recorded, 4, seed=9):
            assert not torch.equal(batch.args[0], recorded.args[0])

    def test_constant_float_input_is_varied_when_nothing_else_can(self) -> None:
        """All-zeros dummy input: noise around the value (the one case outside the range)."""
        recorded = Sample((torch.zeros(2, 8), torch.ones(2, 8, dtype=torch.long)))
        derived = heldout_batches(recorded, 3, seed=10)
        for batch in derived:
            assert not torch.equal(batch.args[0], recorded.args[0])
            assert batch.args[0].abs().max() < 1.0
            assert torch.equal(batch.args[1], recorded.args[1])  # vocabulary {1}: kept

    def test_constant_float_input_kept_when_others_vary(self) -> None:
        """A one-valued float input is left alone when another input can change."""
        recorded = Sample((torch.randn(4, 3), torch.full((4, 2), 7.0)))
        for batch in heldout_batches(recorded, 3, seed=11):
            assert torch.equal(batch.args[1], recorded.args[1])

    def test_nothing_to_vary_raises(self) -> None:
        """Only one-valued integer inputs or no tensor at all: no held-out batch exists."""
        with pytest.raises(HeldoutUnavailableError, match="no input can change"):
            heldout_batches(Sample((torch.ones(4, 3, dtype=torch.long), 2.0)), 1, seed=0)
        with pytest.raises(HeldoutUnavailableError, match="tensor inputs: none"):
            heldout_batches(Sample((1, "a")), 1, seed=0)

    def test_too_many_batches_for_the_vocabulary_raises(self) -> None:
        """Two bools hold four values; five distinct batches besides the recorded cannot exist."""
        recorded = Sample((torch.tensor([True, False]),), {})
        assert len(heldout_batches(recorded, 3, seed=0, batch_axes={0: None})) == 3
        with pytest.raises(HeldoutUnavailableError, match=r"batch 4 of n=5.*inputs 0"):
            heldout_batches(recorded, 5, seed=0, batch_axes={0: None})


class TestCallerAndSeed:
    def test_caller_tensors_untouched(self) -> None:
        """Values, and the tensors themselves, are the caller's as before."""
        recorded = _recorded()
        before = _snapshot(recorded)
        nested = recorded.kwargs["nested"][0]
        heldout_batches(recorded, 4, seed=12)
        heldout_samples([recorded], seed=12)
        after = _tensors(recorded)
        assert all(torch.equal(before[k], after[k]) for k in before)
        assert torch.equal(nested, torch.ones(2))

    def test_same_seed_same_batches(self) -> None:
        """The batches are a function of the recorded batch and the seed."""
        a = heldout_batches(_recorded(), 3, seed=13)
        b = heldout_batches(_recorded(), 3, seed=13)
        assert all(_same_values(x, y) for x, y in zip(a, b, strict=True))
        c = heldout_batches(_recorded(), 3, seed=14)
        assert not any(_same_values(x, y) for x, y in zip(a, c, strict=True))

    @pytest.mark.parametrize("seed", [-1, 2**64 + 5, 2**80])
    def test_any_int_seed(self, seed: int) -> None:
        """Negative and huge seeds are accepted (folded into torch's range)."""
        assert len(heldout_batches(_recorded(), 1, seed=seed)) == 1

    @pytest.mark.parametrize("bad", [0, -2])
    def test_bad_n_value(self, bad: int) -> None:
        """n below 1 is a value error naming it."""
        with pytest.raises(InvalidValueError, match=rf"n must be >= 1, got {bad}"):
            heldout_batches(_recorded(), bad, seed=0)

    @pytest.mark.parametrize("bad", [1.0, True, None])
    def test_bad_n_type(self, bad: object) -> None:
        """A non-int n is a type error naming it."""
        with pytest.raises(InvalidTypeError, match="n must be an integer") as info:
            heldout_batches(_recorded(), bad, seed=0)  # type: ignore[arg-type]
        assert repr(bad) in str(info.value)

    @pytest.mark.parametrize("bad", [1.5, "1", None])
    def test_bad_seed(self, bad: object) -> None:
        """A non-int seed is a type error naming it."""
        with pytest.raises(InvalidTypeError, match="seed") as info:
            heldout_batches(_recorded(), 1, seed=bad)  # type: ignore[arg-type]
        assert repr(bad) in str(info.value)

    def test_declared_axes_that_do_not_fit_raise(self) -> None:
        """Declared batch axes are checked as GraphSpec checks them."""
        with pytest.raises(InvalidValueError, match="axis 3"):
            heldout_batches(Sample((torch.randn(2, 3),)), 1, seed=0, batch_axes={0: 3})

    def test_plain_pair_is_accepted(self) -> None:
        """An (args, kwargs) pair works like a Sample."""
        (derived,) = heldout_batches(((torch.randn(2, 3),), {}), 1, seed=0)
        assert derived.args[0].shape == (2, 3)


class TestHeldoutSamples:
    def test_one_per_sample_each_differs(self) -> None:
        """One derived sample per recorded one, in order, each different from its own."""
        recorded = [_recorded(s) for s in range(3)]
        derived = heldout_samples(recorded, seed=0)
        assert len(derived) == 3
        for old, new in zip(recorded, derived, strict=True):
            assert not _same_values(old, new)
            assert new.args[0].shape == old.args[0].shape

    def test_unknown_batch_axis_is_only_perturbed(self) -> None:
        """Inputs disagreeing on axis 0 (batch axis unknown): values vary, rows stay in place."""
        rows = torch.arange(5)[:, None].expand(5, 30).clone()
        recorded = Sample((rows, torch.randn(3, 4)))
        (derived,) = heldout_samples([recorded], seed=1)
        assert torch.equal(derived.args[0].mode(dim=1).values, torch.arange(5))
        assert not torch.equal(derived.args[1], recorded.args[1])

    def test_deterministic_and_empty(self) -> None:
        """Same seed, same samples; no samples, no derived ones."""
        a = heldout_samples([_recorded()], seed=3)
        b = heldout_samples([_recorded()], seed=3)
        assert _same_values(a[0], b[0])
        assert heldout_samples([], seed=0) == ()

    def test_unavailable_names_the_sample(self) -> None:
        """A sample that cannot be varied is named by its index."""
        samples = [_recorded(), Sample((torch.zeros(3, dtype=torch.long),))]
        with pytest.raises(HeldoutUnavailableError, match="sample 1"):
            heldout_samples(samples, seed=0)

    @pytest.mark.parametrize("bad", ["abc", 5, Sample()])
    def test_bad_samples_type(self, bad: object) -> None:
        """A string, a number or a single Sample is not a sequence of samples."""
        with pytest.raises(InvalidTypeError, match="samples"):
            heldout_samples(bad, seed=0)  # type: ignore[arg-type]


class _Memoriser:
    """A fake backend that caches its output by input shape and replays the first one it saw."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.model = model
        self.cache: dict[tuple[tuple[int, ...], ...], Any] = {}

    def __call__(self, *args: torch.Tensor) -> Any:
        key = tuple(tuple(a.shape) for a in args)
        if key not in self.cache:
            self.cache[key] = self.model(*args)
        return self.cache[key]


class TestMemorisingCandidate:
    @torch.no_grad()
    def test_floating_model(self) -> None:
        """Right on the recorded batch it warmed up on, wrong on a held-out one."""
        torch.manual_seed(0)
        model = torch.nn.Linear(16, 4).eval()
        recorded = Sample((torch.randn(8, 16),))
        candidate = _Memoriser(model)
        compare_outputs(recorded.call(candidate), recorded.call(model))  # passes: memorised
        (heldout,) = heldout_batches(recorded, 1, seed=0)
        with pytest.raises(CorrectnessError, match="values"):
            compare_outputs(heldout.call(candidate), heldout.call(model))

    @torch.no_grad()
    def test_single_row_token_model(self) -> None:
        """One row of token ids (nothing to shuffle): resampled ids catch it too."""
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Embedding(50, 8), torch.nn.Flatten()).eval()
        recorded = Sample((torch.randint(0, 50, (1, 12)),))
        candidate = _Memoriser(model)
        compare_outputs(recorded.call(candidate), recorded.call(model))
        for heldout in heldout_batches(recorded, 3, seed=1):
            with pytest.raises(CorrectnessError):
                compare_outputs(heldout.call(candidate), heldout.call(model))


_DTYPES = [
    torch.float32,
    torch.float64,
    torch.float16,
    torch.bfloat16,
    torch.int64,
    torch.int32,
    torch.uint8,
    torch.bool,
]


def _make(dtype: torch.dtype, shape: tuple[int, ...], levels: int, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    if dtype.is_floating_point:
        return (torch.randn(shape, generator=gen) * 3 + 1).to(dtype)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=gen).bool()
    return torch.randint(0, levels, shape, generator=gen).to(dtype) + 1


tensor_specs = st.tuples(
    st.sampled_from(_DTYPES),
    st.lists(st.integers(min_value=1, max_value=5), min_size=0, max_size=3),
    st.integers(min_value=1, max_value=6),
    st.integers(min_value=0, max_value=2**31),
)


class TestProperties:
    @settings(max_examples=60)
    @given(
        st.integers(min_value=1, max_value=6),
        st.lists(tensor_specs, min_size=1, max_size=3),
        st.integers(min_value=1, max_value=4),
        st.integers(min_value=0, max_value=2**40),
    )
    def test_random_batches(
        self,
        batch: int,
        specs: list[tuple[torch.dtype, list[int], int, int]],
        n: int,
        seed: int,
    ) -> None:
        """Shapes, dtypes, ranges and vocabularies hold, and batches differ, for any inputs."""
        tensors = [_make(d, (batch, *rest), levels, s) for d, rest, levels, s in specs]
        recorded = Sample(tuple(tensors))
        before = _snapshot(recorded)
        try:
            derived = heldout_batches(recorded, n, seed)
        except HeldoutUnavailableError:
            # only when no floating input exists: integer vocabularies can run out
            assert not any(t.is_floating_point() for t in tensors)
            return
        assert all(torch.equal(before[k], v) for k, v in _tensors(recorded).items())
        assert len(derived) == n
        for sample in derived:
            assert not _same_values(sample, recorded)
            for old, new in zip(tensors, sample.args, strict=True):
                assert (new.dtype, new.shape) == (old.dtype, old.shape)
                if old.is_floating_point() and old.min() < old.max():
                    assert old.min() <= new.min()
                    assert new.max() <= old.max()
                elif not old.is_floating_point():
                    assert set(torch.unique(new).tolist()) <= set(torch.unique(old).tolist())
        for a, b in itertools.combinations(derived, 2):
            assert not _same_values(a, b)


@pytest.mark.gpu
def test_cuda_inputs_stay_on_device_with_cpu_values() -> None:
    """A CUDA batch gives CUDA batches, with the values a CPU batch gets for the same seed."""
    recorded = _recorded()
    on_gpu = Sample(
        tuple(v.cuda() if isinstance(v, torch.Tensor) else v for v in recorded.args),
        {k: v.cuda() if isinstance(v, torch.Tensor) else v for k, v in recorded.kwargs.items()},
    )
    cpu = heldout_batches(recorded, 2, seed=0)
    gpu = heldout_batches(on_gpu, 2, seed=0)
    for a, b in zip(cpu, gpu, strict=True):
        for key, value in _tensors(b).items():
            assert value.device.type == "cuda"
            assert torch.allclose(value.cpu().float(), _input(a, key).float(), atol=1e-6)


def _input(sample: Sample, key: int | str) -> Any:
    return sample.args[key] if isinstance(key, int) else sample.kwargs[key]
