"""Inference backends: the ``Backend`` protocol, its lifecycle base, the built-ins, the registry."""
