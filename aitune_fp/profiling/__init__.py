"""Timed calls of inference callables on CPU or CUDA: timing values only, no decisions."""
