"""ViT-B/16 with random weights, for ``aitune-fp tune --model examples/vit_b16.py:factory``.

Needs the ``hf`` extra (transformers). ``ViTForImageClassification`` built from transformers'
default ``ViTConfig`` (ViT-B/16: 12 layers, 12 heads, 768 wide, FF 3,072, 16 x 16 patches of a
224 x 224 image) with 1,000 classes (86.6 M parameters), random weights drawn from a fixed seed:
nothing is downloaded. Called with ``return_dict=True`` it returns ``ImageClassifierOutput``
(``logits``, class scores).
"""

from __future__ import annotations

import torch
from transformers import ViTConfig, ViTForImageClassification

from aitune_fp.inputs import Sample

#: Images per sample (the batch the tune times), at 224 x 224.
BATCH = 1


def factory() -> tuple[torch.nn.Module, Sample]:
    """ViT-B/16 (random weights, eval mode) and ``pixel_values`` of ``BATCH`` random images."""
    config = ViTConfig(num_labels=1000)
    with torch.random.fork_rng(devices=[]):  # the caller's random state is left alone
        torch.manual_seed(0)
        model = ViTForImageClassification(config)
    images = torch.randn(BATCH, 3, 224, 224, generator=torch.Generator().manual_seed(1))
    return model.eval(), Sample((), {"pixel_values": images, "return_dict": True})
