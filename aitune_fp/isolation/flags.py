"""Torch's process- and thread-wide settings as a table of flags to read and put back.

A curated table: only getters that read a global are listed, so reading them starts no device.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import sys
import warnings
from collections.abc import Callable
from typing import Any, Final

import attrs
import torch

from aitune_fp.isolation.hygiene import Setting
from aitune_fp.isolation.namespaces import resolve
from aitune_fp.profiling.threads import set_user_threads, user_threads

PUT_BACK_ROUNDS: Final = 3
"""Flags are views of shared state (``allow_tf32`` and ``fp32_precision``): set until stable."""

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


def read_flag(flag: Setting) -> object:
    try:
        return flag.read()
    except Exception as exc:  # a getter that cannot answer now is a state of its own
        return Unreadable(str(exc).strip().splitlines()[0][:120] if str(exc).strip() else "")


def _spread(setter: Callable[..., object]) -> Callable[[Any], object]:
    """A setter for a getter that answers a tuple (``(allow, split_k)``): pass it spread out."""

    def put(value: Any) -> object:
        return setter(*value) if isinstance(value, tuple) else setter(value)

    return put


def flushes_denormals() -> bool:
    """Whether the CPU flushes denormal floats to zero (``torch.set_flush_denormal``: no getter)."""
    tiny = torch.tensor([1e-39], dtype=torch.float32)
    return bool((tiny * 1.0).item() == 0.0)


#: The compilers' config modules: a build that changes one changes every later compile.
_COMPILE_CONFIGS: Final = ("torch._dynamo.config", "torch._inductor.config")
#: Config keys that mirror a flag named on its own (``torch.use_deterministic_algorithms``).
_MIRRORED: Final = frozenset({"deterministic"})


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


def _named(
    get: Callable[[], object], put: Callable[[Any], object] | None, why: str = ""
) -> Setting:
    """A flag named after its ``torch.<getter>()``."""
    return Setting(f"torch.{get.__name__}()", get, put, why=why)


def _pair(
    first: Callable[[], object], second: Callable[[], object], put: Callable[[Any, Any], object]
) -> tuple[Setting, Setting]:
    """Two flags one setter sets together (``put(first, second)``), each put back alone."""
    return (
        _named(first, lambda v: put(v, second())),
        _named(second, lambda v: put(first(), v)),
    )


def _core_flags() -> list[Setting]:
    """The named settings: threads, autograd modes, dtype, determinism, precision, autocast."""
    t = torch
    flags = [
        Setting("torch.get_num_threads()", user_threads, set_user_threads),  # a timing's aside
        _named(t.get_num_interop_threads, t.set_num_interop_threads, _INTEROP_WHY),
        _named(t.is_grad_enabled, t._C._set_grad_enabled),
        _named(t.is_inference_mode_enabled, None, _INFERENCE_WHY),
        _named(t.get_default_dtype, t.set_default_dtype),
        *_pair(
            t.are_deterministic_algorithms_enabled,
            t.is_deterministic_algorithms_warn_only_enabled,
            lambda on, warn_only: t.use_deterministic_algorithms(on, warn_only=warn_only),
        ),
        _named(t.get_float32_matmul_precision, t.set_float32_matmul_precision),
        *_pair(t.is_anomaly_enabled, t.is_anomaly_check_nan_enabled, t.set_anomaly_enabled),
        _named(t.is_warn_always_enabled, t.set_warn_always),
        Setting("torch.set_flush_denormal()", flushes_denormals, t.set_flush_denormal),
        _named(t.is_autocast_cache_enabled, t.set_autocast_cache_enabled),
        Setting(
            "torch.backends.cuda.preferred_linalg_library()",
            t._C._get_linalg_preferred_backend,
            t._C._set_linalg_preferred_backend,
        ),
    ]
    flags += [
        Setting(f"{name} (settings off their defaults)", *_config_module(name))
        for name in _COMPILE_CONFIGS
    ]
    for dev in ("cpu", "cuda"):  # thread-local dispatch keys: reading them starts no device
        flags += [
            Setting(
                f"torch.is_autocast_enabled({dev!r})",
                functools.partial(t.is_autocast_enabled, dev),
                functools.partial(t.set_autocast_enabled, dev),
            ),
            Setting(
                f"torch.get_autocast_dtype({dev!r})",
                functools.partial(t.get_autocast_dtype, dev),
                functools.partial(t.set_autocast_dtype, dev),
            ),
        ]
    return flags


#: Attribute settings by owner; a ``ContextProp`` is read and set through its raw getter/setter,
#: so that a ``disable_global_flags()`` freeze cannot block a restore.
_ATTRIBUTES: Final = {
    "torch.backends": ("fp32_precision",),
    "torch.backends.cudnn": (
        "enabled",
        "deterministic",
        "benchmark",
        "allow_tf32",
        "conv.fp32_precision",
        "fp32_precision",
        "depthwise_kernel",
        "benchmark_limit",
    ),
    "torch.backends.miopen": ("immediate",),
    "torch.backends.mkldnn": (
        "enabled",
        "deterministic",
        "allow_tf32",
        "matmul.fp32_precision",
        "conv.fp32_precision",
        "rnn.fp32_precision",
        "fp32_precision",
    ),
    "torch.backends.opt_einsum": ("enabled", "strategy"),
    "torch.backends.quantized": ("engine",),
    "torch.backends.cuda.matmul": ("fp32_precision",),
}

#: Getter -> setter functions under ``torch.backends``.
_CALLS: Final = {
    "torch.backends.cuda": (
        ("cudnn_sdp_enabled", "enable_cudnn_sdp"),
        ("flash_sdp_enabled", "enable_flash_sdp"),
        ("fp16_bf16_reduction_math_sdp_allowed", "allow_fp16_bf16_reduction_math_sdp"),
        ("math_sdp_enabled", "enable_math_sdp"),
        ("mem_efficient_sdp_enabled", "enable_mem_efficient_sdp"),
    ),
    "torch.backends.mha": (("get_fastpath_enabled", "set_fastpath_enabled"),),
}

#: The rest of torch's globals: ``torch._C`` getters whose setter is ``_set_<stem>``. Left out:
#: the device runtimes' (reading one may start it) and those read through a public API above.
_C_GETTERS: Final = (
    "_get_autograd_fallback_mode",
    "_get_backcompat_broadcast_warn",
    "_get_backcompat_keepdim_warn",
    "_get_cpu_allow_fp16_reduced_precision_reduction",
    "_get_deterministic_fill_uninitialized_memory",
    "_get_dtensor_allow_implicit_replication",
    "_get_graph_executor_optimize",
    "_get_nnpack_enabled",
    "_get_sdp_priority_order",
    "_get_sm_carveout_experimental",
    "_get_torch_function_state",
    "_is_fwd_grad_enabled",
    "_is_grad_layout_enforcement_enabled",
    "_is_multithreading_enabled",
    "_is_view_replay_enabled",
)


def _table_flags() -> list[Setting]:
    """The tables' settings under ``torch.backends`` and ``torch._C`` that this torch has."""
    context_prop: Any = getattr(torch.backends, "ContextProp", ())
    flags: list[Setting] = []
    for owner_path, names in _ATTRIBUTES.items():
        for path in names:
            with contextlib.suppress(AttributeError):
                owner_name, _, name = f"{owner_path}.{path}".rpartition(".")
                owner = resolve(owner_name)
                raw = inspect.getattr_static(owner, name, None)
                if context_prop and isinstance(raw, context_prop):
                    get, put = raw.getter, raw.setter
                else:
                    getattr(owner, name)
                    get = functools.partial(getattr, owner, name)
                    put = functools.partial(setattr, owner, name)
                flags.append(Setting(f"{owner_path}.{path}", get, put))
    for owner_path, pairs in _CALLS.items():
        for get_name, set_name in pairs:
            with contextlib.suppress(AttributeError):
                owner = resolve(owner_path)
                get, put = getattr(owner, get_name), getattr(owner, set_name)
                flags.append(Setting(f"{owner_path}.{get_name}()", get, put))
    c: Any = torch._C
    rows = [
        (f"torch.backends.cuda.matmul.{n}", f"_get_cublas_{n}", f"_set_cublas_{n}") for n in _CUBLAS
    ]
    rows += [(f"torch._C.{n}()", n, "_set_" + n.split("_", 2)[2]) for n in _C_GETTERS]
    for label, get_name, set_name in rows:
        with contextlib.suppress(AttributeError):
            flags.append(Setting(label, getattr(c, get_name), _spread(getattr(c, set_name))))
    return flags


@functools.cache
def tracked_flags() -> tuple[Setting, ...]:
    """The flag table, built once per process (reading it is cheap)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return tuple(_core_flags() + _table_flags())


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
