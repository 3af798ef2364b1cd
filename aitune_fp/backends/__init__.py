"""Inference backends: the ``Backend`` protocol, its lifecycle base, and the built-in backends."""

from __future__ import annotations

from aitune_fp.backends.base import BUILD_LOG_NAME, Backend, BackendBase, BackendState
from aitune_fp.backends.compile import TorchCompileBackend
from aitune_fp.backends.cuda_graph import CudaGraphBackend
from aitune_fp.backends.eager import TorchEagerBackend

__all__ = [
    "BUILD_LOG_NAME",
    "Backend",
    "BackendBase",
    "BackendState",
    "CudaGraphBackend",
    "TorchCompileBackend",
    "TorchEagerBackend",
]
