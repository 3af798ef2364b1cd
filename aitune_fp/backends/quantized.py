"""``Int8DynamicBackend``: int8 dynamic quantization of Linear (and LSTM/GRU) layers, on CPU.

Weights are quantized to int8 once at build; activations are quantized per call from their
observed range. The user's module is never touched: the backend quantizes a deep copy.
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import torch

from aitune_fp.backends.base import BackendBase
from aitune_fp.correctness import Tolerances
from aitune_fp.errors import InvalidValueError

if TYPE_CHECKING:
    from aitune_fp.inputs import GraphSpec, Sample

__all__ = ["Int8DynamicBackend"]

#: Layer types torch's dynamic quantization replaces.
_QUANTIZABLE: tuple[type[torch.nn.Module], ...] = (torch.nn.Linear, torch.nn.LSTM, torch.nn.GRU)


class Int8DynamicBackend(BackendBase):
    """int8 dynamic quantization (``torch.ao.quantization.quantize_dynamic``) of a module copy.

    Accuracy budget: int8 weights keep about 2 significant digits, so outputs may differ from
    float32 eager by a few hundredths in absolute terms and ~5 % relative (measured on the embedded
    MLP: max abs error 0.028 on outputs of magnitude ~1); the default budget is atol 0.1, rtol 0.05.
    Runs on CPU only (PyTorch's dynamic quantized kernels are CPU kernels).
    """

    default_tolerances: ClassVar[Tolerances | None] = Tolerances(
        float64_atol=0.1, float64_rtol=0.05, float32_atol=0.1, float32_rtol=0.05
    )

    def __init__(self) -> None:
        """No options: every Linear, LSTM and GRU layer is quantized to int8."""
        self._model: torch.nn.Module | None = None

    def _build(
        self,
        module: torch.nn.Module,
        graph_spec: GraphSpec,
        data: Sequence[Sample],
        device: torch.device,
    ) -> None:
        """Quantize a copy of ``module`` and try one call, so an unsupported model fails here.

        A device other than CPU, or a model with no quantizable layer, is refused.
        """
        if device.type != "cpu":
            raise InvalidValueError(f"int8 dynamic quantization runs on CPU only, not on {device}")
        if not any(isinstance(m, _QUANTIZABLE) for m in module.modules()):
            raise InvalidValueError(
                "int8 dynamic quantization found no Linear, LSTM or GRU layer to quantize"
            )
        with warnings.catch_warnings():  # torch.ao.quantization warns that it is deprecated
            warnings.simplefilter("ignore")
            model = torch.ao.quantization.quantize_dynamic(  # type: ignore[no-untyped-call]
                copy.deepcopy(module).cpu().eval(), set(_QUANTIZABLE), dtype=torch.qint8
            )
        if data:
            from aitune_fp.inputs import as_sample

            try:
                with torch.no_grad():
                    as_sample(data[0]).call(model)
            except Exception as exc:
                raise InvalidValueError(
                    "int8 dynamic quantization does not support this model (its quantized copy "
                    f"fails on the first sample: {type(exc).__name__}: {exc})"
                ) from exc
        self._model = model

    def _infer(self, *args: Any, **kwargs: Any) -> Any:
        """Call the quantized copy without gradients."""
        assert self._model is not None
        with torch.no_grad():
            return self._model(*args, **kwargs)

    def _deactivate(self) -> None:
        """Drop the quantized copy (it is rebuilt only by a new build)."""
