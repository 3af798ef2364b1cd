"""DistilBERT with random weights, for ``aitune-fp tune --model examples/distilbert.py:factory``.

Needs the ``hf`` extra (transformers). ``DistilBertModel`` built from transformers' default
``DistilBertConfig`` (distilbert-base-uncased's sizes: 6 layers, 12 heads, 768 wide, FF 3,072;
66.4 M parameters), random weights drawn from a fixed seed: nothing is downloaded. Called with
``return_dict=True`` it returns ``BaseModelOutput`` (``last_hidden_state``).
"""

from __future__ import annotations

import torch
from transformers import DistilBertConfig, DistilBertModel

from aitune_fp.inputs import Sample

#: Sequences per sample (the batch the tune times, axis 0) and tokens per sequence.
BATCH, TOKENS = 1, 128


def factory() -> tuple[torch.nn.Module, Sample]:
    """DistilBERT (random weights, eval mode) and ``input_ids`` / ``attention_mask``."""
    config = DistilBertConfig()
    with torch.random.fork_rng(devices=[]):  # the caller's random state is left alone
        torch.manual_seed(0)
        model = DistilBertModel(config)
    ids = torch.randint(
        0, config.vocab_size, (BATCH, TOKENS), generator=torch.Generator().manual_seed(1)
    )
    mask = torch.ones(BATCH, TOKENS, dtype=torch.long)
    return model.eval(), Sample((), {"input_ids": ids, "attention_mask": mask, "return_dict": True})
