"""``Int8DynamicBackend``: int8 quantization of a deep copy's layers, dynamic or weight-only."""

from __future__ import annotations

import copy
import warnings
from typing import Any, ClassVar, Literal

import torch

from aitune_fp.backends.base import BackendBase, Build
from aitune_fp.core._checks import check_choice
from aitune_fp.correctness.tolerances import TIERS, Tolerances
from aitune_fp.errors import InvalidTypeError, InvalidValueError

#: The settings of int8 quantization: activations quantized per call, or weights only.
Int8Scheme = Literal["dynamic", "weight-only"]
INT8_SCHEMES: tuple[Int8Scheme, ...] = ("dynamic", "weight-only")

#: Layer types torch's dynamic quantization replaces.
_QUANTIZABLE: tuple[type[torch.nn.Module], ...] = (torch.nn.Linear, torch.nn.LSTM, torch.nn.GRU)

#: int8 weight-only: the largest magnitude of a row maps to 127 (symmetric, -128 unused).
_QMAX = 127


class Int8WeightOnlyLinear(torch.nn.Module):
    """A Linear whose weight is int8 per output channel (``weight ~= qweight * scale[:, None]``)."""

    qweight: torch.Tensor
    scale: torch.Tensor
    bias: torch.Tensor | None

    def __init__(self, linear: torch.nn.Linear) -> None:
        """Quantize ``linear``'s weight (symmetric, per output channel); keep its bias in float."""
        super().__init__()
        weight = linear.weight.detach()
        if not weight.is_floating_point():
            raise InvalidTypeError(f"Linear weight must be floating point, got {weight.dtype}")
        peak = weight.abs().amax(dim=1).to(torch.float32)
        scale = torch.where(peak > 0, peak / _QMAX, torch.ones_like(peak))
        qweight = torch.round(weight.to(torch.float32) / scale[:, None]).clamp(-_QMAX, _QMAX)
        self.in_features = linear.in_features
        self.out_features = linear.out_features
        self.register_buffer("qweight", qweight.to(torch.int8))
        self.register_buffer("scale", scale.to(weight.dtype))
        bias = None if linear.bias is None else linear.bias.detach().clone()
        self.register_buffer("bias", bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Linear with the int8 weight dequantized in ``x``'s dtype."""
        out = torch.nn.functional.linear(x, self.qweight.to(x.dtype)) * self.scale.to(x.dtype)
        return out if self.bias is None else out + self.bias.to(x.dtype)

    def extra_repr(self) -> str:
        """Sizes, as Linear shows them."""
        return f"in_features={self.in_features}, out_features={self.out_features}, int8 weight"


def _weight_only_copy(module: torch.nn.Module) -> torch.nn.Module:
    """A deep copy of ``module`` with every ``nn.Linear`` replaced by its int8 weight-only form."""
    model = copy.deepcopy(module)
    if isinstance(model, torch.nn.Linear):
        return Int8WeightOnlyLinear(model)
    for parent in list(model.modules()):
        for child_name, child in list(parent.named_children()):
            if type(child) is torch.nn.Linear:
                setattr(parent, child_name, Int8WeightOnlyLinear(child))
    return model


class Int8DynamicBackend(BackendBase):
    """int8 quantization of a module copy: dynamic (default) or weight-only (``scheme``)."""

    default_tolerances: ClassVar[Tolerances | None] = Tolerances(
        float64_atol=0.04,
        float64_rtol=0.05,
        float32_atol=0.04,
        float32_rtol=0.05,
        scale_atol=0.05,
        float64_rel_l2=0.1,
        float32_rel_l2=0.1,
        norm_tiers=TIERS,
    )
    #: The budget of ``scheme="weight-only"`` (reduced-precision outputs keep their own tier).
    weight_only_tolerances: ClassVar[Tolerances] = Tolerances(
        float64_atol=0.1,
        float64_rtol=0.02,
        float32_atol=0.1,
        float32_rtol=0.02,
        float64_rel_l2=0.03,
        float32_rel_l2=0.03,
        norm_tiers=TIERS,
    )

    def __init__(self, scheme: Int8Scheme = "dynamic") -> None:
        """``scheme``: ``"dynamic"`` (weights and activations int8) or ``"weight-only"``."""
        self._scheme: Int8Scheme = check_choice("scheme", scheme, INT8_SCHEMES)
        self._model: torch.nn.Module | None = None

    @property
    def scheme(self) -> Int8Scheme:
        """The quantization setting: ``"dynamic"`` or ``"weight-only"``."""
        return self._scheme

    def _config(self) -> dict[str, Any]:
        """The one option."""
        return {"scheme": self._scheme}

    def _default_tolerances(self) -> Tolerances | None:
        """The budget of this setting (weight-only is tighter than dynamic)."""
        if self._scheme == "weight-only":
            return self.weight_only_tolerances
        return self.default_tolerances

    def unavailable_reason(self, device: torch.device | str) -> str | None:
        """Dynamic: CPU only, with a quantized engine; weight-only: wherever the device is."""
        target = torch.device(device)
        if self._scheme == "dynamic":
            if target.type != "cpu":
                return (
                    "int8 dynamic quantization runs on CPU only (PyTorch's dynamic quantized "
                    f"kernels are CPU kernels), not on {target}"
                )
            engines = [e for e in torch.backends.quantized.supported_engines if e != "none"]
            if not engines:
                return "this torch build has no quantized CPU engine (fbgemm, onednn, qnnpack)"
        return super().unavailable_reason(target)

    def _build(self, given: Build) -> None:
        """Quantize a copy of ``module`` and try one call, so an unsupported model fails here."""
        module, data, device = given.module, given.data, given.device
        if self._scheme == "weight-only":
            if not any(type(m) is torch.nn.Linear for m in module.modules()):
                raise InvalidValueError("int8 weight-only quantization found no Linear layer")
            model = _weight_only_copy(module).to(device).eval()
        else:
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
            from aitune_fp._tree import to_device
            from aitune_fp.inputs import as_sample

            sample = as_sample(data[0])
            try:
                with torch.no_grad():
                    model(*to_device(sample.args, device), **to_device(sample.kwargs, device))
            except Exception as exc:
                raise InvalidValueError(
                    f"int8 {self._scheme} quantization does not support this model (its "
                    f"quantized copy fails on the first sample: {type(exc).__name__}: {exc})"
                ) from exc
        self._model = model

    def _infer(self, *args: Any, **kwargs: Any) -> Any:
        """Call the quantized copy without gradients."""
        assert self._model is not None
        with torch.no_grad():
            return self._model(*args, **kwargs)

    def _activate(self) -> None:
        """Make sure the copy is on the build's device again."""
        assert self._model is not None and self.device is not None
        if self._scheme == "weight-only":
            self._model.to(self.device)
