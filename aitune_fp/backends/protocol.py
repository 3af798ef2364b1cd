"""What the validation needs from an inference backend: the ``Backend`` protocol and its states."""

from __future__ import annotations

import enum
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import torch

if TYPE_CHECKING:
    from aitune_fp.inputs import GraphSpec, Sample


@runtime_checkable
class Backend(Protocol):
    """What the validation needs from an inference backend (users may implement it directly)."""

    def build(
        self,
        module: torch.nn.Module,
        graph_spec: GraphSpec,
        data: Sequence[Sample],
        device: torch.device | str,
        cache_dir: Path | str,
    ) -> Backend:
        """Prepare the backend for ``module`` once; return it ready and active."""
        ...

    def infer(self, *args: Any, **kwargs: Any) -> Any:
        """Run inference on one batch (never mutating the inputs)."""
        ...

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Same as :meth:`infer`."""
        ...

    def describe(self) -> str:
        """Human-readable name: ``"ClassName(k=v,...)"`` with the non-default options."""
        ...

    def key(self) -> str:
        """Filesystem-safe identifier, unique per configuration and stable across processes."""
        ...

    def activate(self) -> None:
        """Make a built, inactive backend usable again."""
        ...

    def deactivate(self) -> None:
        """Release what the backend holds beyond the module; inference is refused until reactivated."""
        ...

    @property
    def is_active(self) -> bool:
        """True when :meth:`infer` may be called."""
        ...

    def to_dict(self) -> dict[str, Any]:
        """The configuration as a JSON-ready dict."""
        ...

    @property
    def dtype(self) -> torch.dtype | None:
        """The reduced (autocast) dtype the backend computes in, or None for the module's own."""
        ...

    @property
    def device(self) -> torch.device | None:
        """The device the backend runs on once built (None before)."""
        ...


class BackendState(enum.Enum):
    """Where a backend is in its lifecycle."""

    INIT = "init"
    BUILDING = "building"
    ACTIVE = "active"
    INACTIVE = "inactive"
    FAILED = "failed"
