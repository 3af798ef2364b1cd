"""``TorchEagerBackend``: the baseline, the user's own module run eagerly under ``torch.no_grad()``."""

from __future__ import annotations

from typing import Any

import torch

from aitune_fp.backends.base import BackendBase, Build
from aitune_fp.backends.support import autocast_context, check_autocast_dtype


class TorchEagerBackend(BackendBase):
    """Run the module as it is, on the device, without gradients; optionally under autocast."""

    def __init__(self, dtype: torch.dtype | None = None) -> None:
        """Configure the eager baseline; ``dtype`` (bfloat16/float16) enables autocast."""
        self._dtype = check_autocast_dtype(dtype)
        self._module: torch.nn.Module | None = None

    def _config(self) -> dict[str, Any]:
        """The options: the autocast dtype."""
        return {"dtype": self._dtype}

    @property
    def module(self) -> torch.nn.Module | None:
        """The module this backend runs (the caller's object, not a copy); None before the build."""
        return self._module

    def _build(self, given: Build) -> None:
        """Move the module to the device and keep a reference to it (not to the samples)."""
        given.module.to(given.device)
        self._module = given.module

    def _infer(self, *args: Any, **kwargs: Any) -> Any:
        """Call the module under ``torch.no_grad()`` (and autocast when a dtype is set).

        Where gradients are off already (a worker, ``inference_mode``) and there is no dtype, the
        call is the module's alone: eager is timed as the user calls the model, no more.
        """
        assert self._module is not None and self.device is not None
        if self._dtype is None and not torch.is_grad_enabled():
            return self._module(*args, **kwargs)
        with torch.no_grad(), autocast_context(self.device, self._dtype):
            return self._module(*args, **kwargs)

    def _activate(self) -> None:
        """Make sure the module is on the build's device again (another backend may have moved it)."""
        assert self._module is not None and self.device is not None
        self._module.to(self.device)
