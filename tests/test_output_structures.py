"""Any output structure: containers, dataclasses and registered pytree nodes (a cache object).

``FakeCache`` stands in for transformers' ``DynamicCache``: a plain object that registers itself
with ``torch.utils._pytree.register_pytree_node`` (with key paths, as transformers does), so its
tensors are compared like any other output. ``KeylessNode`` registers without key paths.
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils import _pytree

from aitune_fp.correctness.check import check_correctness
from aitune_fp.correctness.compare import check_comparable, compare_outputs
from aitune_fp.correctness.failures import CorrectnessError
from aitune_fp.inputs import GraphSpec, Sample


class FakeCache:
    """A DynamicCache-like object: per-layer key and value tensors, and a non-tensor setting."""

    def __init__(
        self, keys: list[torch.Tensor], values: list[torch.Tensor], window: int = 0
    ) -> None:
        self.key_cache = list(keys)
        self.value_cache = list(values)
        self.window = window


def _cache_flatten(cache: FakeCache) -> tuple[list[Any], Any]:
    return [cache.key_cache, cache.value_cache], cache.window


def _cache_flatten_with_keys(cache: FakeCache) -> tuple[list[tuple[Any, Any]], Any]:
    return [
        (_pytree.GetAttrKey("key_cache"), cache.key_cache),
        (_pytree.GetAttrKey("value_cache"), cache.value_cache),
    ], cache.window


def _cache_unflatten(children: Any, window: Any) -> FakeCache:
    keys, values = children
    return FakeCache(keys, values, window)


class KeylessNode:
    """A pytree node registered without key paths: its children are named by position."""

    def __init__(self, first: torch.Tensor, second: torch.Tensor) -> None:
        self.first = first
        self.second = second


class Opaque:
    """An output object that is neither a container nor a registered pytree node."""

    def __init__(self, tensor: torch.Tensor) -> None:
        self.tensor = tensor


if FakeCache not in _pytree.SUPPORTED_NODES:
    _pytree.register_pytree_node(
        FakeCache,
        _cache_flatten,
        _cache_unflatten,
        flatten_with_keys_fn=_cache_flatten_with_keys,
    )
if KeylessNode not in _pytree.SUPPORTED_NODES:
    _pytree.register_pytree_node(
        KeylessNode,
        lambda node: ([node.first, node.second], None),
        lambda children, _: KeylessNode(*children),
    )


@dataclasses.dataclass
class Output:
    """A dataclass output, as many model libraries return."""

    logits: torch.Tensor
    hidden: tuple[torch.Tensor, ...] = ()


class ModelOutputLike(OrderedDict):  # type: ignore[type-arg]
    """transformers' ``ModelOutput``: an OrderedDict subclass with attribute access."""

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError as exc:
            raise AttributeError(name) from exc


def make_cache(layers: int = 2, seed: int = 0, window: int = 0) -> FakeCache:
    gen = torch.Generator().manual_seed(seed)
    keys = [torch.randn(2, 3, generator=gen) for _ in range(layers)]
    values = [torch.randn(2, 3, generator=gen) for _ in range(layers)]
    return FakeCache(keys, values, window)


def copy_of(value: Any) -> Any:
    return _pytree.tree_map(lambda x: x.clone() if isinstance(x, torch.Tensor) else x, value)


class TestCacheObjects:
    def test_identical_cache_passes_and_every_tensor_is_compared(self) -> None:
        """A registered cache object is flattened: all its tensors count as compared elements."""
        expected = {"logits": torch.ones(2, 4), "cache": make_cache(layers=3)}
        found = compare_outputs(copy_of(expected), expected)
        assert found.n_elements == 8 + 3 * 2 * 6

    def test_a_wrong_cache_tensor_fails_with_a_readable_path(self) -> None:
        """The failing leaf is named ``output['cache'].key_cache[1]``, like attribute access."""
        expected = {"logits": torch.ones(2, 4), "cache": make_cache()}
        actual = copy_of(expected)
        actual["cache"].key_cache[1] = actual["cache"].key_cache[1] + 1.0
        with pytest.raises(CorrectnessError, match=r"output\['cache'\]\.key_cache\[1\]") as info:
            compare_outputs(actual, expected)
        assert info.value.check == "values"
        assert info.value.path == "output['cache'].key_cache[1]"

    def test_value_cache_is_compared_too(self) -> None:
        expected = make_cache()
        actual = copy_of(expected)
        actual.value_cache[0][0, 0] += 0.5
        with pytest.raises(CorrectnessError) as info:
            compare_outputs(actual, expected)
        assert info.value.path == "output.value_cache[0]"

    def test_nan_in_a_cache_is_found_first(self) -> None:
        """The finite check walks into cache objects and says the reference is finite there."""
        expected = {"cache": make_cache()}
        actual = copy_of(expected)
        actual["cache"].value_cache[1][1, 2] = float("nan")
        with pytest.raises(CorrectnessError, match="finite there") as info:
            compare_outputs(actual, expected)
        assert info.value.check == "finite"
        assert info.value.path == "output['cache'].value_cache[1]"

    def test_a_different_number_of_layers_is_a_structure_error(self) -> None:
        with pytest.raises(CorrectnessError, match="expected 3 items but got 2") as info:
            compare_outputs(make_cache(layers=2), make_cache(layers=3))
        assert info.value.check == "structure"
        assert info.value.path == "output.key_cache"

    def test_a_different_non_tensor_part_is_a_structure_error(self) -> None:
        """The node's context (what is not a child) must match: it names both values."""
        with pytest.raises(CorrectnessError, match=r"FakeCache.*expected 4.*got 0") as info:
            compare_outputs(make_cache(window=0), make_cache(window=4))
        assert info.value.check == "structure"
        assert info.value.path == "output"

    def test_another_type_in_place_of_the_cache_is_a_structure_error(self) -> None:
        expected = {"cache": make_cache()}
        actual = {"cache": (expected["cache"].key_cache, expected["cache"].value_cache)}
        with pytest.raises(CorrectnessError, match="expected a FakeCache but got tuple") as info:
            compare_outputs(actual, expected)
        assert info.value.check == "structure"
        assert info.value.path == "output['cache']"

    def test_keyless_node_children_are_named_by_position(self) -> None:
        expected = KeylessNode(torch.zeros(2), torch.ones(2))
        actual = KeylessNode(torch.zeros(2), torch.full((2,), 2.0))
        with pytest.raises(CorrectnessError) as info:
            compare_outputs(actual, expected)
        assert info.value.path == "output[1]"
        assert compare_outputs(copy_of(expected), expected).n_elements == 4

    def test_check_correctness_on_a_model_returning_a_cache(self) -> None:
        """The whole check (every batch size, grad mode) passes a model returning its cache."""
        torch.manual_seed(0)
        layer = torch.nn.Linear(8, 8).eval()

        def model(x: torch.Tensor) -> dict[str, Any]:
            hidden = layer(x)
            return {"logits": hidden.sum(-1), "cache": FakeCache([hidden], [hidden * 2], 1)}

        def broken(x: torch.Tensor) -> dict[str, Any]:
            out = model(x)
            out["cache"].value_cache[0] = out["cache"].value_cache[0] + 1.0
            return out

        spec = GraphSpec(4, min_batch_size=1)
        data = [Sample((torch.randn(2, 8),))]
        assert check_correctness(model, model, spec, data).n_elements > 0
        with pytest.raises(CorrectnessError, match=r"output\['cache'\]\.value_cache\[0\]"):
            check_correctness(broken, model, spec, data)


class TestOtherStructures:
    def test_dataclass_fields_are_compared_by_name(self) -> None:
        expected = Output(logits=torch.ones(3), hidden=(torch.zeros(2), torch.ones(2)))
        assert compare_outputs(copy_of_dc(expected), expected).n_elements == 7
        actual = Output(logits=torch.ones(3), hidden=(torch.zeros(2), torch.zeros(2)))
        with pytest.raises(CorrectnessError) as info:
            compare_outputs(actual, expected)
        assert info.value.path == "output.hidden[1]"

    def test_dataclass_type_must_match(self) -> None:
        expected = Output(logits=torch.ones(3))
        with pytest.raises(CorrectnessError, match="expected a Output but got dict") as info:
            compare_outputs({"logits": torch.ones(3), "hidden": ()}, expected)
        assert info.value.check == "structure"

    def test_model_output_like_mapping_keeps_mapping_paths(self) -> None:
        expected = ModelOutputLike(logits=torch.ones(2), past=make_cache(layers=1))
        actual = ModelOutputLike(logits=torch.ones(2), past=make_cache(layers=1))
        actual["past"].key_cache[0] = actual["past"].key_cache[0] * 3
        with pytest.raises(CorrectnessError) as info:
            compare_outputs(actual, expected)
        assert info.value.path == "output['past'].key_cache[0]"

    def test_an_unregistered_object_names_its_type_and_the_fix(self) -> None:
        """Neither a pytree nor a known container: the error names the type and how to fix it."""
        with pytest.raises(CorrectnessError) as info:
            compare_outputs({"x": Opaque(torch.ones(1))}, {"x": Opaque(torch.ones(1))})
        message = str(info.value)
        assert info.value.check == "type"
        assert info.value.path == "output['x']"
        assert "cannot compare an output of type" in message
        assert "Opaque" in message
        assert "register_pytree_node" in message


def copy_of_dc(value: Output) -> Output:
    return Output(logits=value.logits.clone(), hidden=tuple(h.clone() for h in value.hidden))


# ---- property: any nesting of supported structures ---------------------------------------------


def _tensor(draw: Any) -> torch.Tensor:
    shape = draw(st.lists(st.integers(1, 3), min_size=0, max_size=2))
    seed = draw(st.integers(0, 2**16))
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed))


@st.composite
def trees(draw: Any, depth: int = 3) -> Any:
    """A nested output: tensors in dicts, lists, tuples, dataclasses and cache objects."""
    if depth == 0 or draw(st.booleans()):
        return _tensor(draw)
    kind = draw(st.sampled_from(["dict", "list", "tuple", "dataclass", "cache"]))
    if kind == "cache":
        layers = draw(st.integers(1, 3))
        return FakeCache(
            [_tensor(draw) for _ in range(layers)], [_tensor(draw) for _ in range(layers)]
        )
    if kind == "dataclass":
        return Output(
            logits=_tensor(draw), hidden=tuple(draw(st.lists(trees(depth - 1), max_size=2)))
        )
    children = draw(st.lists(trees(depth - 1), min_size=1, max_size=3))
    if kind == "dict":
        return {f"k{i}": child for i, child in enumerate(children)}
    return children if kind == "list" else tuple(children)


def _paths(value: Any, path: str = "output") -> list[tuple[str, torch.Tensor]]:
    """Each tensor with the path the library should name it by (written independently)."""
    if isinstance(value, torch.Tensor):
        return [(path, value)]
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in _paths(v, f"{path}[{k!r}]")]
    if isinstance(value, (list, tuple)):
        return [p for i, v in enumerate(value) for p in _paths(v, f"{path}[{i}]")]
    if isinstance(value, Output):
        return _paths(value.logits, f"{path}.logits") + _paths(value.hidden, f"{path}.hidden")
    assert isinstance(value, FakeCache)
    return _paths(value.key_cache, f"{path}.key_cache") + _paths(
        value.value_cache, f"{path}.value_cache"
    )


@settings(max_examples=60, deadline=None)
@given(tree=trees(), data=st.data())
def test_any_nesting_compares_every_tensor_and_names_the_wrong_one(tree: Any, data: Any) -> None:
    """A copy passes with every element counted; one perturbed tensor fails at its own path."""
    leaves = _paths(tree)
    found = compare_outputs(_deep_copy(tree), tree)
    assert found.n_elements == sum(t.numel() for _, t in leaves)
    index = data.draw(st.integers(0, len(leaves) - 1))
    target_path, target = leaves[index]
    with torch.no_grad():
        target.add_(10.0)  # now the reference differs from the untouched copy at that leaf
    with pytest.raises(CorrectnessError) as info:
        compare_outputs(_deep_copy_before(tree, target, 10.0), tree)
    assert info.value.path == target_path
    assert info.value.check == "values"


def _deep_copy(value: Any) -> Any:
    if isinstance(value, Output):
        return Output(logits=value.logits.clone(), hidden=_deep_copy(value.hidden))
    return copy_of(value) if not isinstance(value, (list, tuple, dict)) else _container(value)


def _container(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _deep_copy(v) for k, v in value.items()}
    items = [_deep_copy(v) for v in value]
    return items if isinstance(value, list) else tuple(items)


def _deep_copy_before(tree: Any, target: torch.Tensor, shift: float) -> Any:
    """A copy of ``tree`` where ``target`` (already shifted in ``tree``) has its old values."""
    copied = _deep_copy(tree)
    for (_, original), (_, clone) in zip(_paths(tree), _paths(copied), strict=True):
        if original is target:
            clone.sub_(shift)
    return copied


class TestCheckComparable:
    def test_supported_structures_pass_whatever_their_values(self) -> None:
        """Only the structure is checked: NaN in eager's own output is not its business."""
        check_comparable(
            {
                "logits": torch.tensor([float("nan"), 1.0]),
                "cache": make_cache(),
                "extra": Output(logits=torch.ones(1)),
                "meta": [None, 1, 2.0, "s", b"b", True, torch.Size([2])],
            }
        )

    @pytest.mark.parametrize("bad", [Opaque(torch.ones(1)), object(), 1j, {1, 2}])
    def test_the_first_leaf_that_cannot_be_compared_is_named(self, bad: object) -> None:
        cache = FakeCache([torch.ones(1)], [bad])  # type: ignore[list-item]
        with pytest.raises(CorrectnessError, match="register_pytree_node") as info:
            check_comparable({"ok": torch.ones(1), "cache": cache})
        assert info.value.path == "output['cache'].value_cache[0]"
        assert info.value.check == "type"
        assert type(bad).__qualname__ in str(info.value)
