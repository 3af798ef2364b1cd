"""``ChannelsLastBackend``: a copy of a convolutional model and its 4-D inputs in NHWC layout."""

from __future__ import annotations

import copy
from typing import Any

import torch

from aitune_fp.backends.base import BackendBase, Build
from aitune_fp.errors import InvalidValueError

_CONVOLUTIONS = (torch.nn.Conv2d, torch.nn.ConvTranspose2d)


def _to_channels_last(value: Any) -> Any:
    if isinstance(value, torch.Tensor) and value.dim() == 4:
        return value.contiguous(memory_format=torch.channels_last)
    return value


class ChannelsLastBackend(BackendBase):
    """The model copy in ``torch.channels_last``; 4-D tensor inputs converted on each call."""

    def __init__(self) -> None:
        """No options."""
        self._model: torch.nn.Module | None = None

    def _build(self, given: Build) -> None:
        """Convert a copy of ``module``; a model with no 2-D convolution is refused."""
        if not any(isinstance(m, _CONVOLUTIONS) for m in given.module.modules()):
            raise InvalidValueError(
                "channels-last layout helps 2-D convolutions; this model has none"
            )
        model = copy.deepcopy(given.module).to(given.device)
        # nn.Module.to accepts memory_format at run time; its type stubs do not say so
        model.to(memory_format=torch.channels_last)  # type: ignore[call-overload]
        self._model = model

    def _infer(self, *args: Any, **kwargs: Any) -> Any:
        """Call the converted copy on channels-last inputs, without gradients."""
        assert self._model is not None
        with torch.no_grad():
            return self._model(
                *(_to_channels_last(a) for a in args),
                **{k: _to_channels_last(v) for k, v in kwargs.items()},
            )

    def _activate(self) -> None:
        """Make sure the copy is on the build's device again."""
        assert self._model is not None and self.device is not None
        self._model.to(self.device)
