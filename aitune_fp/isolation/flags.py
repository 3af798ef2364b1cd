"""Torch's process- and thread-wide settings as a table of flags to read and put back.

Found by enumerating torch once per process; only getters that read a global run (no CUDA init).
"""

from __future__ import annotations

import functools
import inspect
import sys
import types
import warnings
from collections.abc import Callable
from typing import Any, Final

import attrs
import torch

PUT_BACK_ROUNDS: Final = 3
"""Flags are views of shared state (``allow_tf32`` and ``fp32_precision``): set until stable."""

_C_SKIPPED: Final = frozenset(
    {
        # need arguments, or are not settings
        "_get_dispatch_mode",
        "_get_tensor_metadata",
        "_get_value_trace",
        "_get_thread_name",
        "_get_tracing_state",
        "_get_graph_exec_group",
        # may ask the GPU runtime about its devices on ROCm builds
        "_get_blas_preferred_backend",
        "_get_rocm_fa_preferred_backend",
        # read through their public API (the _C setters would reset a companion flag)
        "_get_deterministic_algorithms",
        "_get_float32_matmul_precision",
        "_get_warnAlways",
        "_get_linalg_preferred_backend",
        "_get_qengine",
        "_get_math_sdp_allow_fp16_bf16_reduction",
    }
)
"""``torch._C`` getters that the generic ``_get_X``/``_set_X`` sweep leaves out, and why."""

_DEVICE_RUNTIMES: Final = ("cuda", "cudnn", "cublas", "miopen", "rocm", "hip", "mps", "xpu")
"""Names in a ``torch._C`` getter that the generic sweep does not call: a device runtime's."""

_CUBLAS: Final = (
    "allow_tf32",
    "allow_fp16_reduced_precision_reduction",
    "allow_bf16_reduced_precision_reduction",
    "allow_fp16_accumulation",
)
"""``torch.backends.cuda.matmul`` flags: its class answers them in ``__getattr__``, not a dict."""

_INTEROP_WHY: Final = "torch lets the interop thread count be set only once per process"
_INFERENCE_WHY: Final = "inference mode can be left only by the `with` that entered it"


@attrs.frozen
class Unreadable:
    """A flag whose getter raised (a legacy precision flag after the new API set it)."""

    reason: str

    def __repr__(self) -> str:
        return f"<unreadable: {self.reason}>"


@attrs.frozen
class _Flag:
    """One process-wide (or thread-wide) setting: how to read it and how to put it back."""

    name: str
    get: Callable[[], object]
    put: Callable[[Any], object] | None
    why: str = ""
    """Why putting it back may fail (shown with a flag that could not be restored)."""


def read_flag(flag: _Flag) -> object:
    try:
        return flag.get()
    except Exception as exc:  # a getter that cannot answer now is a state of its own
        return Unreadable(str(exc).strip().splitlines()[0][:120] if str(exc).strip() else "")


def _spread(setter: Callable[..., object]) -> Callable[[Any], object]:
    """A setter for a getter that answers a tuple (``(allow, split_k)``): pass it spread out."""

    def put(value: Any) -> object:
        return setter(*value) if isinstance(value, tuple) else setter(value)

    return put


def _is_simple(value: object) -> bool:
    """Whether a value is a plain setting (bool, number, text, enum, dtype or a list of them)."""
    if value is None or isinstance(value, bool | int | float | str | torch.dtype):
        return True
    if isinstance(value, list | tuple):
        return all(_is_simple(v) for v in value)
    return hasattr(type(value), "__members__") and type(value).__module__.startswith("torch")


def _no_required_args(fn: Callable[..., object]) -> bool:
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False
    return all(
        p.default is not p.empty or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in params
    )


def flushes_denormals() -> bool:
    """Whether the CPU flushes denormal floats to zero (``torch.set_flush_denormal``: no getter)."""
    tiny = torch.tensor([1e-39], dtype=torch.float32)
    return bool((tiny * 1.0).item() == 0.0)


_COMPILE_CONFIGS: Final = ("torch._dynamo.config", "torch._inductor.config")
#: Config keys that mirror a flag named on its own (``torch.use_deterministic_algorithms``).
_MIRRORED: Final = frozenset({"deterministic"})
"""The compilers' config modules: a build that changes one changes every later compile."""


def _config_module(name: str) -> tuple[Callable[[], object], Callable[[Any], object]]:
    """Read and put back a torch config module's non-default settings (not imported: none)."""

    def defaults(config: Any) -> dict[str, object]:
        # torch's table of the module's entries: no public accessor gives their defaults
        return {key: entry.default for key, entry in vars(config)["_config"].items()}

    def get() -> dict[str, object]:
        config: Any = sys.modules.get(name)
        if config is None:
            return {}
        default = defaults(config)
        got = config._get_dict(skip_default=True)
        return {
            k: v for k, v in got.items() if k in default and k not in _MIRRORED and v != default[k]
        }

    def put(saved: dict[str, object]) -> None:
        config: Any = sys.modules.get(name)
        if config is None:
            return
        default = defaults(config)
        for key in get():
            setattr(config, key, saved.get(key, default[key]))
        for key, value in saved.items():
            setattr(config, key, value)

    return get, put


def _core_flags() -> list[_Flag]:
    """The named settings: threads, autograd modes, dtype, determinism, precision, autocast."""
    t = torch
    flags = [
        _Flag("torch.get_num_threads()", t.get_num_threads, t.set_num_threads),
        _Flag(
            "torch.get_num_interop_threads()",
            t.get_num_interop_threads,
            t.set_num_interop_threads,
            _INTEROP_WHY,
        ),
        _Flag("torch.is_grad_enabled()", t.is_grad_enabled, t._C._set_grad_enabled),
        _Flag(
            "torch.is_inference_mode_enabled()", t.is_inference_mode_enabled, None, _INFERENCE_WHY
        ),
        _Flag("torch.get_default_dtype()", t.get_default_dtype, t.set_default_dtype),
        _Flag(
            "torch.are_deterministic_algorithms_enabled()",
            t.are_deterministic_algorithms_enabled,
            lambda v: t.use_deterministic_algorithms(
                v, warn_only=t.is_deterministic_algorithms_warn_only_enabled()
            ),
        ),
        _Flag(
            "torch.is_deterministic_algorithms_warn_only_enabled()",
            t.is_deterministic_algorithms_warn_only_enabled,
            lambda v: t.use_deterministic_algorithms(
                t.are_deterministic_algorithms_enabled(), warn_only=v
            ),
        ),
        _Flag(
            "torch.get_float32_matmul_precision()",
            t.get_float32_matmul_precision,
            t.set_float32_matmul_precision,
        ),
        _Flag(
            "torch.is_anomaly_enabled()",
            t.is_anomaly_enabled,
            lambda v: t.set_anomaly_enabled(v, t.is_anomaly_check_nan_enabled()),
        ),
        _Flag(
            "torch.is_anomaly_check_nan_enabled()",
            t.is_anomaly_check_nan_enabled,
            lambda v: t.set_anomaly_enabled(t.is_anomaly_enabled(), v),
        ),
        _Flag("torch.is_warn_always_enabled()", t.is_warn_always_enabled, t.set_warn_always),
        _Flag("torch.set_flush_denormal()", flushes_denormals, t.set_flush_denormal),
        _Flag(
            "torch.is_autocast_cache_enabled()",
            t.is_autocast_cache_enabled,
            t.set_autocast_cache_enabled,
        ),
        _Flag(
            "torch.backends.cuda.preferred_linalg_library()",
            t._C._get_linalg_preferred_backend,
            t._C._set_linalg_preferred_backend,
        ),
    ]
    flags += [
        _Flag(f"{name} (settings off their defaults)", *_config_module(name))
        for name in _COMPILE_CONFIGS
    ]
    for dev in ("cpu", "cuda"):  # thread-local dispatch keys: reading them starts no device
        flags += [
            _Flag(
                f"torch.is_autocast_enabled({dev!r})",
                functools.partial(t.is_autocast_enabled, dev),
                functools.partial(t.set_autocast_enabled, dev),
            ),
            _Flag(
                f"torch.get_autocast_dtype({dev!r})",
                functools.partial(t.get_autocast_dtype, dev),
                functools.partial(t.set_autocast_dtype, dev),
            ),
        ]
    return flags


def _backend_modules() -> list[tuple[str, Any]]:
    backends: Any = torch.backends
    subs = [("torch.backends", backends)]
    for name in sorted(dir(backends)):
        sub = getattr(backends, name, None)
        if not name.startswith("_") and name != "m" and isinstance(sub, types.ModuleType):
            subs.append((f"torch.backends.{name}", sub))
    return subs


def _backend_flags(seen: set[str]) -> list[_Flag]:
    """Every simple setting under ``torch.backends``; ``torch._C`` getters met go into ``seen``.

    ``ContextProp`` flags use their raw getter/setter: ``disable_global_flags()`` cannot block it.
    """
    context_prop: Any = getattr(torch.backends, "ContextProp", ())
    flags: list[_Flag] = []
    for label, sub in _backend_modules():
        cls_dict: dict[str, Any] = {}
        if isinstance(getattr(sub, "m", None), types.ModuleType):  # a PropModule
            for klass in reversed(type(sub).__mro__):
                cls_dict.update(vars(klass))
        module_dict = dict(vars(getattr(sub, "m", sub)))
        done: set[str] = set()
        for name, value in cls_dict.items():
            if name.startswith("_"):
                continue
            if context_prop and isinstance(value, context_prop):
                flags.append(_Flag(f"{label}.{name}", value.getter, value.setter))
                seen.add(getattr(value.getter, "__name__", ""))
                done.add(name)
            elif not callable(value) and not isinstance(value, types.ModuleType | str):
                precision = read_flag(
                    _Flag("", functools.partial(getattr, value, "fp32_precision"), None)
                )
                if isinstance(precision, str):
                    flags.append(
                        _Flag(
                            f"{label}.{name}.fp32_precision",
                            functools.partial(getattr, value, "fp32_precision"),
                            functools.partial(setattr, value, "fp32_precision"),
                        )
                    )
        for name in sorted(set(module_dict) | set(cls_dict) | set(vars(sub))):
            if name.startswith("_") or name.isupper() or name in done:
                continue
            value = read_flag(_Flag("", functools.partial(getattr, sub, name), None))
            if _is_simple(value) and not isinstance(value, list | tuple):
                flags.append(
                    _Flag(
                        f"{label}.{name}",
                        functools.partial(getattr, sub, name),
                        functools.partial(setattr, sub, name),
                    )
                )
        for name, getter in sorted(module_dict.items()):
            setter_name = ""
            if name.startswith("get_"):
                setter_name = "set_" + name[4:]
            elif name.endswith("_enabled"):
                setter_name = "enable_" + name[: -len("_enabled")]
            elif name.endswith("_allowed"):
                setter_name = "allow_" + name[: -len("_allowed")]
            setter = module_dict.get(setter_name)
            if setter_name and callable(getter) and callable(setter) and _no_required_args(getter):
                flags.append(_Flag(f"{label}.{name}()", getter, setter))
    matmul = torch.backends.cuda.matmul
    for name in _CUBLAS:
        getter = getattr(torch._C, f"_get_cublas_{name}", None)
        setter = getattr(torch._C, f"_set_cublas_{name}", None)
        if getter is not None and setter is not None:
            flags.append(_Flag(f"torch.backends.cuda.matmul.{name}", getter, _spread(setter)))
            seen.add(getter.__name__)
    flags.append(
        _Flag(
            "torch.backends.cuda.matmul.fp32_precision",
            functools.partial(getattr, matmul, "fp32_precision"),
            functools.partial(setattr, matmul, "fp32_precision"),
        )
    )
    return flags


def _c_flags(seen: set[str]) -> list[_Flag]:
    """The rest of torch's globals: ``torch._C``'s getter/setter pairs, less ``seen``."""
    c: Any = torch._C
    names = set(dir(c))
    flags: list[_Flag] = []
    for name in sorted(names):
        if name.startswith("_get_"):
            stem = name[len("_get_") :]
        elif name.startswith("_is_"):
            stem = name[len("_is_") :]
        else:
            continue
        if name in _C_SKIPPED or name in seen or f"_set_{stem}" not in names:
            continue
        if any(runtime in stem for runtime in _DEVICE_RUNTIMES):
            continue  # read through torch.backends only, where reading is known not to start one
        getter = getattr(c, name)
        try:
            value = getter()
        except Exception:  # a getter that needs arguments is not a setting
            continue
        if _is_simple(value):
            flags.append(_Flag(f"torch._C.{name}()", getter, _spread(getattr(c, f"_set_{stem}"))))
    return flags


@functools.cache
def tracked_flags() -> tuple[_Flag, ...]:
    """The flag table, built once per process (it enumerates torch; reading it is cheap)."""
    seen: set[str] = set()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        flags = _core_flags() + _backend_flags(seen)
        flags += _c_flags(seen)
    unique: dict[str, _Flag] = {}
    for flag in flags:
        unique.setdefault(flag.name, flag)
    return tuple(unique.values())


def settings_now() -> tuple[object, ...]:
    """Every tracked flag's value now, in the table's order."""
    return tuple(read_flag(flag) for flag in tracked_flags())


def settings_changed(before: tuple[object, ...], after: tuple[object, ...]) -> list[str]:
    """Each flag that differs between two :func:`settings_now` readings, as ``name: a -> b``."""
    return [
        f"{flag.name}: {a!r} -> {b!r}"
        for flag, a, b in zip(tracked_flags(), before, after, strict=True)
        if a != b
    ]
