"""Inference backends: the ``Backend`` protocol, its lifecycle base, and the built-in backends.

Names load on first use (PEP 562) so that ``aitune_fp.backends.registry`` imports without torch
(the CLI reads it for ``--help`` and ``check``); the backend classes import torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aitune_fp._lazy import lazy_names

if TYPE_CHECKING:
    from aitune_fp.backends.aot_inductor import AotInductorBackend
    from aitune_fp.backends.base import BUILD_LOG_NAME, BackendBase, UnavailableBackend
    from aitune_fp.backends.channels_last import ChannelsLastBackend
    from aitune_fp.backends.compile import TorchCompileBackend
    from aitune_fp.backends.cuda_graph import CudaGraphBackend
    from aitune_fp.backends.eager import TorchEagerBackend
    from aitune_fp.backends.onnxruntime import OnnxRuntimeBackend
    from aitune_fp.backends.protocol import Backend, BackendState
    from aitune_fp.backends.quantized import Int8DynamicBackend
    from aitune_fp.backends.registry import (
        BACKENDS,
        BackendChoiceError,
        BackendEntry,
        backend_names,
        check_backend,
        default_backends,
        make_backend,
        make_candidate,
    )

#: Public names: name -> submodule that defines it.
_LAZY: dict[str, str] = {
    "BUILD_LOG_NAME": "aitune_fp.backends.base",
    "Backend": "aitune_fp.backends.protocol",
    "BackendBase": "aitune_fp.backends.base",
    "BackendState": "aitune_fp.backends.protocol",
    "UnavailableBackend": "aitune_fp.backends.base",
    "TorchCompileBackend": "aitune_fp.backends.compile",
    "CudaGraphBackend": "aitune_fp.backends.cuda_graph",
    "TorchEagerBackend": "aitune_fp.backends.eager",
    "Int8DynamicBackend": "aitune_fp.backends.quantized",
    "ChannelsLastBackend": "aitune_fp.backends.channels_last",
    "OnnxRuntimeBackend": "aitune_fp.backends.onnxruntime",
    "AotInductorBackend": "aitune_fp.backends.aot_inductor",
    "BACKENDS": "aitune_fp.backends.registry",
    "BackendChoiceError": "aitune_fp.backends.registry",
    "BackendEntry": "aitune_fp.backends.registry",
    "backend_names": "aitune_fp.backends.registry",
    "check_backend": "aitune_fp.backends.registry",
    "default_backends": "aitune_fp.backends.registry",
    "make_backend": "aitune_fp.backends.registry",
    "make_candidate": "aitune_fp.backends.registry",
}

__all__ = [
    "BACKENDS",
    "BUILD_LOG_NAME",
    "AotInductorBackend",
    "Backend",
    "BackendBase",
    "BackendChoiceError",
    "BackendEntry",
    "BackendState",
    "ChannelsLastBackend",
    "CudaGraphBackend",
    "Int8DynamicBackend",
    "OnnxRuntimeBackend",
    "TorchCompileBackend",
    "TorchEagerBackend",
    "UnavailableBackend",
    "backend_names",
    "check_backend",
    "default_backends",
    "make_backend",
    "make_candidate",
]


__getattr__, __dir__ = lazy_names(__name__, globals(), _LAZY)
