"""Tests of Sample, as_sample, copy_sample and GraphSpec batching (real CPU tensors)."""

from __future__ import annotations

import math
import subprocess
import sys

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from aitune_fp.inputs import (
    RING_BYTES,
    RING_SLOTS,
    CopyRing,
    GraphSpec,
    Sample,
    as_sample,
    copy_sample,
    ring_size,
)


class TestSample:
    def test_defaults_are_empty(self) -> None:
        """A default Sample calls with no arguments."""
        sample = Sample()
        assert sample.args == ()
        assert dict(sample.kwargs) == {}

    def test_kwargs_are_a_read_only_copy(self) -> None:
        """Changing the caller's dict afterwards does not change the Sample, nor can the Sample be edited."""
        kwargs = {"x": 1}
        sample = Sample((), kwargs)
        kwargs["x"] = 2
        assert sample.kwargs["x"] == 1
        with pytest.raises(TypeError):
            sample.kwargs["x"] = 3  # type: ignore[index]

    def test_list_args_become_a_tuple(self) -> None:
        """Positional arguments given as a list are stored as a tuple."""
        assert Sample([1, 2]).args == (1, 2)

    def test_bad_args_raise(self) -> None:
        """Non-sequence args and non-string kwargs keys are refused with the value named."""
        with pytest.raises(TypeError, match="args"):
            Sample(5)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="kwargs keys"):
            Sample((), {1: 2})  # type: ignore[dict-item]

    def test_call_passes_args_and_kwargs(self) -> None:
        """Sample.call unpacks both parts."""
        assert Sample((1, 2), {"c": 3}).call(lambda a, b, c: a + b + c) == 6

    def test_items_lists_positions_then_names(self) -> None:
        """items() yields positional indices, then keyword names."""
        assert list(Sample(("a", "b"), {"k": "v"}).items()) == [(0, "a"), (1, "b"), ("k", "v")]


class TestAsSample:
    def test_sample_passes_through(self) -> None:
        """A Sample is returned as is."""
        sample = Sample((1,))
        assert as_sample(sample) is sample

    def test_plain_pair_is_accepted(self) -> None:
        """An (args, kwargs) tuple becomes a Sample."""
        sample = as_sample(((1,), {"k": 2}))
        assert sample.args == (1,)
        assert dict(sample.kwargs) == {"k": 2}

    @pytest.mark.parametrize("value", [None, (1, 2, 3), ((1,),), [(), {}], "ab", ((), 5)])
    def test_other_values_raise(self, value: object) -> None:
        """Anything else is a TypeError that says what a sample must be."""
        with pytest.raises(TypeError, match="Sample or an \\(args, kwargs\\) tuple"):
            as_sample(value)


class TestCopySample:
    def test_tensors_are_cloned_other_values_shared(self) -> None:
        """copy_sample gives new tensors with equal values; non-tensors are the same objects."""
        x = torch.arange(4.0)
        obj = object()
        copy = copy_sample(Sample((x, obj), {"y": x}))
        assert copy.args[0] is not x
        assert torch.equal(copy.args[0], x)
        assert copy.args[1] is obj
        assert copy.kwargs["y"].data_ptr() != x.data_ptr()


class TestGraphSpecValidation:
    def test_defaults(self) -> None:
        """The simple spec: max batch 1, axis 0 for every input."""
        spec = GraphSpec()
        assert spec.get_max_batch_size() == 1
        assert spec.axis_of(0) == 0
        assert spec.axis_of("x") == 0

    def test_value_equality_and_hash(self) -> None:
        """Specs compare by value and are hashable (usable as cache keys)."""
        a = GraphSpec(4, batch_axes={"x": None})
        b = GraphSpec(4, batch_axes={"x": None})
        assert a == b
        assert hash(a) == hash(b)
        assert a != GraphSpec(4)

    def test_positional_max_batch_size(self) -> None:
        """GraphSpec(8) is GraphSpec(max_batch_size=8)."""
        assert GraphSpec(8).get_max_batch_size() == 8

    @pytest.mark.parametrize("bad", [0, -1])
    def test_max_batch_size_below_one_raises(self, bad: int) -> None:
        """A max batch size < 1 is refused, naming the field and value."""
        with pytest.raises(ValueError, match=f"max_batch_size must be >= 1, got {bad}"):
            GraphSpec(bad)

    def test_min_above_max_raises(self) -> None:
        """An empty batch-size range is refused."""
        with pytest.raises(ValueError, match="min_batch_size \\(4\\) must be <= max_batch_size"):
            GraphSpec(2, min_batch_size=4)

    def test_bad_axes_raise(self) -> None:
        """batch_axes keys must be indices or names, values ints or None."""
        with pytest.raises(TypeError, match="batch_axes keys"):
            GraphSpec(2, batch_axes={1.5: 0})  # type: ignore[dict-item]
        with pytest.raises(TypeError, match="batch_axes\\['x'\\]"):
            GraphSpec(2, batch_axes={"x": "0"})  # type: ignore[dict-item]
        with pytest.raises(ValueError, match="positional index >= 0"):
            GraphSpec(2, batch_axes={-1: 0})


class TestMakeBatch:
    def test_slices_a_larger_sample(self) -> None:
        """A sample with more rows than needed gives its first batch_size rows."""
        x = torch.arange(10.0).reshape(5, 2)
        batch = GraphSpec(8).make_batch(Sample((x,)), 3)
        assert torch.equal(batch.args[0], x[:3])

    def test_tiles_a_smaller_sample(self) -> None:
        """A smaller sample is repeated cyclically: row i is row i % n."""
        x = torch.tensor([[1.0], [2.0]])
        batch = GraphSpec(8).make_batch(Sample((x,)), 5)
        assert batch.args[0].flatten().tolist() == [1.0, 2.0, 1.0, 2.0, 1.0]

    def test_never_aliases_or_mutates_the_callers_tensors(self) -> None:
        """Writing into the batch leaves the caller's tensors as they were (also at full size)."""
        x = torch.zeros(4, 3)
        y = torch.zeros(3)
        spec = GraphSpec(4, batch_axes={"y": None})
        batch = spec.make_batch(Sample((x,), {"y": y}), 4)
        batch.args[0].add_(1.0)
        batch.kwargs["y"].add_(1.0)
        assert torch.count_nonzero(x) == 0
        assert torch.count_nonzero(y) == 0

    def test_per_input_axis_and_unbatched_inputs(self) -> None:
        """batch_axes picks the axis per input; None and non-tensors are left alone."""
        seq = torch.arange(6.0).reshape(1, 6)  # batch axis 1
        mask = torch.ones(2, 2)  # not batched
        spec = GraphSpec(4, batch_axes={0: 1, "mask": None})
        batch = spec.make_batch(Sample((seq, "mode"), {"mask": mask, "scale": 2.0}), 3)
        assert batch.args[0].shape == (1, 3)
        assert batch.args[1] == "mode"
        assert torch.equal(batch.kwargs["mask"], mask)
        assert batch.kwargs["scale"] == 2.0

    def test_negative_axis_counts_from_the_end(self) -> None:
        """Axis -1 is the last axis."""
        x = torch.arange(4.0).reshape(2, 2)
        batch = GraphSpec(3, batch_axes={0: -1}).make_batch(Sample((x,)), 3)
        assert batch.args[0].shape == (2, 3)

    @pytest.mark.parametrize("size", [0, 9])
    def test_batch_size_outside_the_range_raises(self, size: int) -> None:
        """Batch sizes outside min..max are refused, naming the value."""
        with pytest.raises(ValueError, match=f"batch_size .*got {size}"):
            GraphSpec(8).make_batch(Sample((torch.ones(2),)), size)

    def test_batch_size_below_min_raises(self) -> None:
        """A batch size below min_batch_size is refused."""
        with pytest.raises(ValueError, match=r"2\.\.8"):
            GraphSpec(8, min_batch_size=2).make_batch(Sample((torch.ones(2),)), 1)

    def test_missing_axis_names_the_input(self) -> None:
        """A batched input without its axis (e.g. a 0-d tensor) raises, naming the input."""
        with pytest.raises(ValueError, match="input 'scale' is batched on axis 0 but has shape"):
            GraphSpec(4).make_batch(Sample((torch.ones(2),), {"scale": torch.tensor(1.0)}), 2)
        with pytest.raises(ValueError, match="input 0 is batched on axis 2"):
            GraphSpec(4, batch_axes={0: 2}).make_batch(Sample((torch.ones(2, 2),)), 2)

    def test_declared_non_tensor_raises(self) -> None:
        """An input explicitly declared batched that is not a tensor is refused."""
        with pytest.raises(ValueError, match="input 'k' is declared batched"):
            GraphSpec(4, batch_axes={"k": 0}).make_batch(Sample((), {"k": 3}), 2)

    def test_mismatched_batch_dims_raise(self) -> None:
        """Batched inputs with different batch dimensions are refused, listing them."""
        with pytest.raises(ValueError, match="disagree on the batch dimension \\(0: 2, 1: 3\\)"):
            GraphSpec(4).make_batch(Sample((torch.ones(2, 1), torch.ones(3, 1))), 2)

    def test_empty_batch_axis_raises(self) -> None:
        """A batched tensor with 0 rows cannot be tiled."""
        with pytest.raises(ValueError, match="empty batch axis"):
            GraphSpec(4).make_batch(Sample((torch.ones(0, 2),)), 2)

    def test_plain_pair_is_accepted(self) -> None:
        """make_batch takes an (args, kwargs) tuple too."""
        batch = GraphSpec(2).make_batch(((torch.ones(1, 3),), {}), 2)
        assert batch.args[0].shape == (2, 3)

    def test_batch_dim(self) -> None:
        """batch_dim reports the common batch dimension, None without batched tensors."""
        assert GraphSpec(4).batch_dim(Sample((torch.ones(3, 2),))) == 3
        assert GraphSpec(4).batch_dim(Sample((1, "a"))) is None


def test_import_does_not_load_torch() -> None:
    """aitune_fp.inputs is importable without importing torch."""
    code = "import sys, aitune_fp.inputs; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


class TestMakeBatchProperties:
    @given(
        rows=st.integers(min_value=1, max_value=12),
        size=st.integers(min_value=1, max_value=16),
        axis=st.integers(min_value=0, max_value=2),
    )
    def test_row_i_is_sample_row_i_mod_n(self, rows: int, size: int, axis: int) -> None:
        """For any sample size, batch size and axis, batch row i equals sample row i % n."""
        shape = [2, 3, 2]
        shape[axis] = rows
        x = torch.arange(float(math.prod(shape))).reshape(shape)
        batch = GraphSpec(16, batch_axes={0: axis}).make_batch(Sample((x,)), size).args[0]
        assert batch.shape[axis] == size
        for i in range(size):
            assert torch.equal(batch.select(axis, i), x.select(axis, i % rows))


class TestCopyNested:
    def test_nested_tensors_are_cloned(self) -> None:
        """Tensors inside lists, tuples and dicts get their own copies too."""
        import torch

        from aitune_fp.inputs import Sample, copy_sample

        inner = torch.ones(2)
        original = Sample(([inner, (inner,)],), {"d": {"t": inner}, "n": 3})
        copied = copy_sample(original)
        assert copied.args[0][0] is not inner
        assert copied.args[0][1][0] is not inner
        assert copied.kwargs["d"]["t"] is not inner
        assert copied.kwargs["n"] == 3
        copied.args[0][0].add_(1)
        assert inner.tolist() == [1.0, 1.0]


class TestCopyRing:
    """Each timed call's own copy: K storages filled in turn, so an address repeats exactly
    every K calls (a cache keyed by it hits on every call past the K-th, never by chance)."""

    @given(batch_bytes=st.integers(min_value=0, max_value=2**34))
    def test_ring_size_is_eight_fewer_for_large_batches_at_least_two(
        self, batch_bytes: int
    ) -> None:
        k = ring_size(batch_bytes)
        assert 2 <= k <= RING_SLOTS
        assert k == RING_SLOTS or k * max(batch_bytes, 1) <= RING_BYTES or k == 2

    @given(
        calls=st.integers(min_value=1, max_value=30),
        rows=st.integers(min_value=1, max_value=4),
        transpose=st.booleans(),
    )
    def test_addresses_repeat_exactly_every_k_calls_with_each_calls_values(
        self, calls: int, rows: int, transpose: bool
    ) -> None:
        ring = CopyRing()
        pointers: list[int] = []
        idents: list[int] = []
        for i in range(calls):
            x = torch.full((rows, 3), float(i))
            if transpose:
                x = x.t()  # strides kept: a copy of a non-contiguous input stays non-contiguous
            filled = ring.fill(Sample((x,), {"scale": 2, "y": x + 1}))
            (got,) = filled.args
            assert torch.equal(got, x) and got is not x and got.data_ptr() != x.data_ptr()
            assert got.stride() == x.stride()
            assert filled.kwargs["scale"] == 2 and torch.equal(filled.kwargs["y"], x + 1)
            pointers.append(got.data_ptr())
            idents.append(id(got))
        k = ring.size
        assert k == RING_SLOTS
        for i in range(calls):
            for j in range(i + 1, calls):
                assert (pointers[i] == pointers[j]) == ((j - i) % k == 0)
                assert (idents[i] == idents[j]) == ((j - i) % k == 0)

    def test_the_callers_tensors_are_never_written(self) -> None:
        ring = CopyRing()
        x = torch.arange(6.0)
        for _ in range(RING_SLOTS + 2):
            ring.fill(Sample((x,))).args[0].mul_(0)  # a model that changes its input in place
            assert torch.equal(x, torch.arange(6.0))

    def test_a_slot_that_cannot_hold_the_values_gets_a_new_copy(self) -> None:
        """Another shape, dtype or a grad-requiring tensor is copied anew, never squeezed in."""
        ring = CopyRing()
        first = ring.fill(Sample((torch.zeros(4),))).args[0]
        for _ in range(RING_SLOTS - 1):
            ring.fill(Sample((torch.zeros(4),)))
        for other in (torch.ones(5), torch.ones(4, dtype=torch.float64)):
            got = ring.fill(Sample((other,))).args[0]
            assert torch.equal(got, other) and got.dtype == other.dtype and got is not first
        leaf = torch.ones(4, requires_grad=True)
        got = ring.fill(Sample((leaf,))).args[0]
        assert got.requires_grad and torch.equal(got.detach(), leaf.detach())

    def test_a_large_batch_gets_a_small_ring(self) -> None:
        ring = CopyRing()
        ring.fill(Sample((torch.zeros(RING_BYTES // 4 // 3, dtype=torch.float32),)))
        assert ring.size == 3
