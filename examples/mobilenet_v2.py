"""MobileNetV2 with random weights, for ``aitune-fp tune --model examples/mobilenet_v2.py:factory``.

Needs the ``hf`` extra (transformers). ``MobileNetV2ForImageClassification`` built from
transformers' default ``MobileNetV2Config`` (width 1.0, 224 x 224) with 1,000 classes (3.5 M
parameters), random weights drawn from a fixed seed: nothing is downloaded. Called with
``return_dict=True`` it returns ``ImageClassifierOutputWithNoAttention`` (``logits``).

The weights are re-initialised He-normal on each convolution's fan-in (batch norm 1 and 0, the
classifier normal with std 0.01, as torchvision's): transformers' own initialisation (every
convolution normal with std 0.02) leaves the activations vanishing through the 17 blocks, with
logits of about 1e-21, which no accuracy check can tell apart; torchvision's (He-normal on the
fan-out, 9 x channels for a depthwise 3 x 3) still gives logits of about 1e-9. On the fan-in
(9 for a depthwise 3 x 3) the logits have a standard deviation of about 0.8.
"""

from __future__ import annotations

import torch
from torch import nn
from transformers import MobileNetV2Config, MobileNetV2ForImageClassification

from aitune_fp.inputs import Sample

#: Images per sample (the batch the tune times), at 224 x 224.
BATCH = 2


def _he_init(model: nn.Module) -> None:
    """He-normal on the fan-in, from the global (seeded) random state (see the docstring)."""
    for m in model.modules():
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight, mode="fan_in", nonlinearity="relu")
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.BatchNorm2d):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, 0, 0.01)
            nn.init.zeros_(m.bias)


def factory() -> tuple[torch.nn.Module, Sample]:
    """MobileNetV2 (random weights, eval mode) and ``pixel_values`` of ``BATCH`` random images."""
    config = MobileNetV2Config(num_labels=1000)
    with torch.random.fork_rng(devices=[]):  # the caller's random state is left alone
        torch.manual_seed(0)
        model = MobileNetV2ForImageClassification(config)
        _he_init(model)
    images = torch.randn(BATCH, 3, 224, 224, generator=torch.Generator().manual_seed(1))
    return model.eval(), Sample((), {"pixel_values": images, "return_dict": True})
