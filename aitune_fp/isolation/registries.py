"""Torch's global registries a candidate may change: hooks, modes, default device, kernels."""

from __future__ import annotations

import gc
from typing import Any

import torch
import torch.library
import torch.nn.modules.module as _module_mod
import torch.utils._device as _device_mod


def hook_registries() -> list[tuple[str, Any]]:
    """``torch.nn.modules.module``'s global hook registries (``_global_*hook*``)."""
    return [
        (name, value)
        for name, value in vars(_module_mod).items()
        if name.startswith("_global_") and "hook" in name
    ]


def _registry_words(name: str) -> str:
    words = name.removeprefix("_global_").replace("_", " ").replace("hooks", "hook")
    return "global " + words.replace("pre hook", "pre-hook")


def hook_texts(name: str, then: object, now: object) -> list[str]:
    if not (isinstance(then, dict) and isinstance(now, dict)):
        return (
            []
            if then is now or then == now
            else [f"{_module_mod.__name__}.{name}: {then!r} -> {now!r}"]
        )
    what = _registry_words(name)
    added = len(now.keys() - then.keys())
    removed = len(then.keys() - now.keys())
    replaced = sum(1 for k in then.keys() & now.keys() if then[k] is not now[k])
    return [
        f"{what} {kind} ({n})"
        for kind, n in (("added", added), ("removed", removed), ("replaced", replaced))
        if n
    ]


def registry_function_modes() -> tuple[object, ...]:
    c: Any = torch._C
    return tuple(c._get_function_stack_at(i) for i in range(c._len_torch_function_stack()))


def infra_keys() -> list[Any]:
    keys = getattr(torch._C, "_TorchDispatchModeKey", None)
    return list(keys.__members__.values()) if keys is not None else []


def registry_infra_modes() -> tuple[object, ...]:
    c: Any = torch._C
    return tuple(c._get_dispatch_mode(k) for k in infra_keys())


def registry_dispatch_modes(infra: tuple[object, ...]) -> tuple[object, ...]:
    """The user's dispatch mode stack, without the infra modes (fake, proxy, functional)."""
    c: Any = torch._C
    stack = (c._get_dispatch_stack_at(i) for i in range(c._len_torch_dispatch_stack()))
    return tuple(m for m in stack if not any(m is i for i in infra))


def mode_name(mode: object) -> str:
    return "none" if mode is None else type(mode).__name__


def common(a: tuple[object, ...], b: tuple[object, ...]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x is not y:
            break
        n += 1
    return n


def stack_texts(
    what: str, then: tuple[object, ...], now: tuple[object, ...], quiet: tuple[object, ...]
) -> list[str]:
    k = common(then, now)
    texts = [
        f"{what} removed: {type(m).__name__}" for m in then[k:] if not any(m is q for q in quiet)
    ]
    texts += [
        f"{what} left active: {type(m).__name__}" for m in now[k:] if not any(m is q for q in quiet)
    ]
    return texts


def device_context_of() -> tuple[object, object]:
    """The global default-device context (a function mode) and ``torch.utils._device``'s device."""
    return (
        getattr(torch._GLOBAL_DEVICE_CONTEXT, "device_context", None),
        _device_mod.CURRENT_DEVICE,
    )


def device_name(context: object) -> str:
    return str(getattr(context, "device", "cpu"))


def aten_impls() -> frozenset[str]:
    return frozenset(torch.library._impls)


def kernel_text(key: str) -> str:
    ns, op, dispatch = [*key.split("/"), "", ""][:3]
    return f"torch.library kernel registered: {ns}::{op} for {dispatch}"


def remove_kernels(new: frozenset[str], before: frozenset[str]) -> None:
    """Destroy the ``torch.library.Library`` objects that registered only kernels made since."""
    library_cls: Any = torch.library.Library
    for obj in gc.get_objects():
        if issubclass(type(obj), library_cls):  # type(): a lazy proxy's __class__ would import
            impls = set(getattr(obj, "_op_impls", ()))
            if impls & new and not impls & before:
                obj._destroy()
