"""A tiny GPT-2 with its cache on, for ``aitune-fp tune --model examples/gpt2_tiny.py:factory``.

Needs the ``hf`` extra (``pip install -e ".[hf]"``: transformers). Built from a config with
random weights drawn from a fixed seed: nothing is downloaded. Called with ``use_cache=True``,
it returns transformers' ``CausalLMOutputWithCrossAttentions``: ``logits`` and a ``DynamicCache``
(``past_key_values``; ``cache`` in later 5.x releases) whose per-layer keys and values are
compared like any other output (``output['past_key_values'].layers[0].keys``).
"""

from __future__ import annotations

import torch
from transformers import GPT2Config, GPT2LMHeadModel

from aitune_fp.inputs import Sample

#: Sequences per sample (the batch the tune times, axis 0) and tokens per sequence.
BATCH, TOKENS = 2, 16
#: The tiny configuration: 2 layers, 2 heads, 64 wide, a 1,000-token vocabulary.
CONFIG = {"n_layer": 2, "n_head": 2, "n_embd": 64, "vocab_size": 1000, "n_positions": 64}


def config() -> GPT2Config:
    """The tiny GPT-2's configuration (its special tokens inside the small vocabulary)."""
    last = CONFIG["vocab_size"] - 1
    return GPT2Config(**CONFIG, bos_token_id=last, eos_token_id=last)


def factory() -> tuple[torch.nn.Module, Sample]:
    """GPT-2 (tiny, random weights, eval mode) and ``input_ids`` of shape ``(BATCH, TOKENS)``."""
    with torch.random.fork_rng(devices=[]):  # the caller's random state is left alone
        torch.manual_seed(0)
        model = GPT2LMHeadModel(config())
    ids = torch.randint(
        0, CONFIG["vocab_size"], (BATCH, TOKENS), generator=torch.Generator().manual_seed(1)
    )
    return model.eval(), Sample((), {"input_ids": ids, "use_cache": True})
