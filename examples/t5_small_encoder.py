"""T5-small's encoder with random weights: ``--model examples/t5_small_encoder.py:factory``.

Needs the ``hf`` extra (transformers). ``T5EncoderModel`` built from a ``T5Config`` with
t5-small's sizes (6 layers, 8 heads of 64, 512 wide, FF 2,048, a 32,128-token vocabulary;
35.3 M parameters), random weights drawn from a fixed seed: nothing is downloaded. Called with
``return_dict=True`` it returns ``BaseModelOutput`` (``last_hidden_state``).
"""

from __future__ import annotations

import torch
from transformers import T5Config, T5EncoderModel

from aitune_fp.inputs import Sample

#: Sequences per sample (the batch the tune times, axis 0) and tokens per sequence.
BATCH, TOKENS = 1, 128
#: t5-small's sizes.
CONFIG = {"d_model": 512, "d_ff": 2048, "d_kv": 64, "num_layers": 6, "num_heads": 8}


def factory() -> tuple[torch.nn.Module, Sample]:
    """T5-small's encoder (random weights, eval mode) and ``input_ids`` / ``attention_mask``."""
    config = T5Config(**CONFIG, use_cache=False)
    with torch.random.fork_rng(devices=[]):  # the caller's random state is left alone
        torch.manual_seed(0)
        model = T5EncoderModel(config)
    ids = torch.randint(
        0, config.vocab_size, (BATCH, TOKENS), generator=torch.Generator().manual_seed(1)
    )
    mask = torch.ones(BATCH, TOKENS, dtype=torch.long)
    return model.eval(), Sample((), {"input_ids": ids, "attention_mask": mask, "return_dict": True})
