"""A user model for examples/sweep.toml: a factory that returns only a module (the file gives the shape)."""

import torch


def make() -> torch.nn.Module:
    """Two small linear layers; the sweep file's input_shape [16, 64] gives its batch."""
    return torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 8))
