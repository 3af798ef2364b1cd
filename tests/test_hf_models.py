"""The ``hf`` extra: a tiny GPT-2 with its cache on validates end to end (examples/gpt2_tiny.py).

transformers 5 returns a ``DynamicCache`` that is not a pytree node (it registers only while
``torch.export`` runs); its per-layer keys and values are compared like any other output, by
their paths (``output['past_key_values'].layers[1].values``). Marked ``hf``: the extra is part of
README's set-up, so a missing transformers fails here. Random weights, 16 tokens: seconds.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
import transformers  # noqa: F401  # the hf extra: README's set-up installs it; never skipped
from structlog.testing import LogCapture

from aitune_fp.adapters.validation import with_performance_validation
from aitune_fp.backends.eager import TorchEagerBackend
from aitune_fp.cli import main
from aitune_fp.correctness._leaves import leaves
from aitune_fp.correctness.compare import check_comparable, compare_outputs
from aitune_fp.correctness.failures import CorrectnessError
from aitune_fp.models import EmbeddedModel, load_user_model
from aitune_fp.pipeline.strategies import OneBackendStrategy
from tests.validation_helpers import FAST_CONFIG, _ModuleBackend

pytestmark = pytest.mark.hf

EXAMPLE = str(Path(__file__).resolve().parent.parent / "examples" / "gpt2_tiny.py")
#: The cache's key in the output: ``past_key_values`` in transformers 5.18, ``cache`` later.
CACHE_KEYS = ("past_key_values", "cache")


def _cache_key(output: Any) -> str:
    (key,) = [key for key in output if key in CACHE_KEYS]  # iterating gives the keys
    return str(key)


def _cache_leaves(output: Any) -> list[str]:
    cache = f"output[{_cache_key(output)!r}]"
    return [f"{cache}.layers[{i}].{kv}" for i in (0, 1) for kv in ("keys", "values")]


@pytest.fixture(scope="module")
def gpt2() -> EmbeddedModel:
    """The example's GPT-2, loaded as ``--model examples/gpt2_tiny.py:factory`` loads it."""
    return load_user_model(f"{EXAMPLE}:factory")


def _eager(model: EmbeddedModel) -> Any:
    with torch.no_grad():
        return model.sample.call(model.module)


class CacheOff(_ModuleBackend):
    """A float32 candidate whose cache differs from eager's (its logits are right)."""

    def _infer(self, *args: Any, **kwargs: Any) -> Any:
        with torch.no_grad():
            out = self.module(*args, **kwargs)
        layer = out[_cache_key(out)].layers[1]
        layer.values = layer.values + 0.5
        return out


def _validated(backend: Any) -> Any:
    return with_performance_validation(OneBackendStrategy(backend), profiling_config=FAST_CONFIG)


def _tune(strategy: Any, model: EmbeddedModel, tmp_path: Path) -> Any:
    return strategy.tune(model.module, "gpt2", model.graph_spec, [model.sample], "cpu", tmp_path)


def test_the_example_returns_its_cache_and_every_tensor_in_it_is_a_leaf(
    gpt2: EmbeddedModel,
) -> None:
    """The cache is no pytree node here, yet its keys and values are leaves with their paths."""
    from torch.utils import _pytree

    out = _eager(gpt2)
    cache = out[_cache_key(out)]
    assert type(cache).__name__ == "DynamicCache"
    assert type(cache) not in _pytree.SUPPORTED_NODES
    check_comparable(out)
    assert [path for path, _ in leaves(out)] == [
        "output['logits']",
        *_cache_leaves(out),
    ]
    found = compare_outputs(_eager(gpt2), out)
    logits = 2 * 16 * 1000
    assert found.n_elements == logits + 4 * 2 * 2 * 16 * 32  # 2 layers x keys, values


def test_bf16_with_the_cache_on_is_compared_and_measured(
    gpt2: EmbeddedModel, tmp_path: Path, logs: LogCapture
) -> None:
    """eager-bf16 reaches a verdict: its bfloat16 cache is judged, not refused for its type."""
    strategy = _validated(TorchEagerBackend(dtype=torch.bfloat16))
    _tune(strategy, gpt2, tmp_path)
    assert not strategy.candidate_failures
    (checked,) = [e for e in logs.entries if e["event"].endswith(".correctness_checked")]
    per_call = 2 * 16 * 1000 + 4 * 2 * 2 * 16 * 32  # logits and the cache, at batch 2
    assert checked["n_elements"] > per_call  # every batch size and sample, cache included
    (result,) = strategy.perf_validation_results
    assert result.verdict is not None
    assert result.budget_used is not None and result.budget_used <= 1.0


def test_a_candidate_whose_cache_differs_is_rejected_naming_the_cache_path(
    gpt2: EmbeddedModel, tmp_path: Path
) -> None:
    """Right logits, wrong cache: rejected at correctness, the failing cache tensor named."""
    strategy = _validated(CacheOff())
    backend = _tune(strategy, gpt2, tmp_path)
    assert backend is strategy.baseline_backend
    (failure,) = strategy.candidate_failures
    assert failure.stage == "correctness"
    assert _cache_leaves(_eager(gpt2))[3] in failure.reason  # ...layers[1].values
    assert not strategy.perf_validation_results


def test_a_bf16_cache_compares_with_the_float32_one(gpt2: EmbeddedModel, tmp_path: Path) -> None:
    """The cache's own settings (its dtype) are not compared: a bfloat16 cache is no mismatch."""
    half = TorchEagerBackend(dtype=torch.bfloat16)
    half.build(gpt2.module, gpt2.graph_spec, [gpt2.sample], "cpu", tmp_path)
    with torch.no_grad():
        actual = gpt2.sample.call(half)
    assert actual[_cache_key(actual)].layers[0].keys.dtype == torch.bfloat16
    found = compare_outputs(actual, _eager(gpt2), expected_dtype=torch.bfloat16)
    assert {c.name for c in found.criteria} >= {"rel_l2", "outlier_share"}
    assert all(c.passed for c in found.criteria)


OPAQUE_GPT2 = f"""
import importlib.util

spec = importlib.util.spec_from_file_location("gpt2_tiny_example", {EXAMPLE!r})
example = importlib.util.module_from_spec(spec)
spec.loader.exec_module(example)


class Holder:
    def __init__(self, cache):
        self.cache = cache


class Wrapped(example.torch.nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids):
        out = self.model(input_ids=input_ids, use_cache=True)
        return {{"logits": out.logits, "state": Holder(out[1])}}


def make():
    model, sample = example.factory()
    return Wrapped(model), sample.kwargs["input_ids"]
"""


def test_an_object_that_is_no_pytree_fails_up_front_naming_the_type_and_the_fix(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The cache inside an unregistered holder: exit 2 at eager's up-front call, one line."""
    path = tmp_path / "opaque_gpt2.py"
    path.write_text(OPAQUE_GPT2)
    argv = ["tune", "--model", f"{path}:make", "--backends", "eager-bf16", "-q"]
    assert main([*argv, "--cache-dir", str(tmp_path / "c")]) == 2
    captured = capsys.readouterr()
    line = captured.err.strip().splitlines()[-1]
    assert line.startswith("aitune-fp: error: ")
    assert "output['state']: cannot compare an output of type" in line
    assert "Holder" in line and "register_pytree_node" in line
    model = load_user_model(f"{path}:make")
    with pytest.raises(CorrectnessError, match="Holder") as info:
        check_comparable(_eager(model))
    assert (info.value.path, info.value.check) == ("output['state']", "type")


@pytest.mark.slow  # a real deadline or process: seconds of waiting
def test_tune_on_the_command_line_compares_the_candidates(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``aitune-fp tune --model examples/gpt2_tiny.py:factory``: verdicts, no output-type failure."""
    argv = ["tune", "--model", f"{EXAMPLE}:factory", "--backends", "eager-bf16,int8-dynamic"]
    argv += ["--threads", "1", "--max-seconds", "2", "--cache-dir", str(tmp_path / "c")]
    assert main(argv) == 0
    captured = capsys.readouterr()
    text = captured.out + captured.err
    assert "cannot compare" not in text and "failed" not in text
    for backend in ("TorchEagerBackend(dtype=torch.bfloat16)", "Int8DynamicBackend()"):
        assert f"📊 {backend}: batch size 2, speedup" in text  # compared, then timed


def _encoder_decoder_cache(layers: int = 2, shift: float = 0.0) -> Any:
    """An ``EncoderDecoderCache`` of two ``DynamicCache`` (self- and cross-attention)."""
    from transformers.cache_utils import DynamicCache, EncoderDecoderCache

    gen = torch.Generator().manual_seed(0)
    own, cross = DynamicCache(), DynamicCache()
    for layer in range(layers):
        own.update(
            torch.randn(1, 2, 3, 4, generator=gen), torch.randn(1, 2, 3, 4, generator=gen), layer
        )
        keys, values = (
            torch.randn(1, 2, 5, 4, generator=gen),
            torch.randn(1, 2, 5, 4, generator=gen),
        )
        cross.update(keys, values + shift, layer)
    return EncoderDecoderCache(own, cross)


def test_a_cache_of_caches_is_walked_to_every_tensor() -> None:
    """``EncoderDecoderCache``: both caches' layers compared, a wrong one named by its path."""
    expected = _encoder_decoder_cache()
    assert compare_outputs(_encoder_decoder_cache(), expected).n_elements == 2 * (24 + 40) * 2
    with pytest.raises(CorrectnessError) as info:
        compare_outputs(_encoder_decoder_cache(shift=0.1), expected)
    assert info.value.path == "output.cross_attention_cache.layers[0].values"
    assert info.value.check == "values"


def test_a_cache_with_another_number_of_layers_is_a_structure_error() -> None:
    with pytest.raises(CorrectnessError, match="expected 2 items but got 1") as info:
        compare_outputs(_encoder_decoder_cache(layers=1), _encoder_decoder_cache())
    assert info.value.check == "structure"
    assert info.value.path == "output.self_attention_cache.layers"


def test_the_library_never_imports_transformers() -> None:
    """Caches are recognised only when transformers is already imported (by the model)."""
    code = (
        "import sys, torch, aitune_fp.correctness.compare as c; "
        "c.check_comparable({'x': torch.ones(1)}); "
        "assert 'transformers' not in sys.modules, 'imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
