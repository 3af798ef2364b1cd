"""Whisper-tiny's encoder with random weights: ``--model examples/whisper_tiny_encoder.py:factory``.

Needs the ``hf`` extra (transformers). The encoder of a ``WhisperModel`` built from a
``WhisperConfig`` with whisper-tiny's sizes (4 encoder layers, 6 heads, 384 wide, FF 1,536,
80 mel bins, 30 s of audio: 3,000 frames, 1,500 positions; the encoder has 8.2 M parameters),
random weights drawn from a fixed seed: nothing is downloaded. Called with ``return_dict=True`` it
returns ``BaseModelOutput`` (``last_hidden_state``).
"""

from __future__ import annotations

import torch
from transformers import WhisperConfig, WhisperModel

from aitune_fp.inputs import Sample

#: Clips per sample (the batch the tune times, axis 0): 30 s of 80 log-mel bins each.
BATCH, MELS, FRAMES = 1, 80, 3000
#: whisper-tiny's sizes.
CONFIG = {
    "d_model": 384,
    "encoder_layers": 4,
    "encoder_attention_heads": 6,
    "encoder_ffn_dim": 1536,
    "decoder_layers": 4,
    "decoder_attention_heads": 6,
    "decoder_ffn_dim": 1536,
    "num_mel_bins": MELS,
    "max_source_positions": FRAMES // 2,
}


def factory() -> tuple[torch.nn.Module, Sample]:
    """Whisper-tiny's encoder (random weights, eval mode) and ``input_features``."""
    config = WhisperConfig(**CONFIG, use_cache=False)
    with torch.random.fork_rng(devices=[]):  # the caller's random state is left alone
        torch.manual_seed(0)
        encoder = WhisperModel(config).get_encoder()
    features = torch.randn(BATCH, MELS, FRAMES, generator=torch.Generator().manual_seed(1))
    return encoder.eval(), Sample((), {"input_features": features, "return_dict": True})
