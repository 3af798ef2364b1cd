"""The process state a candidate backend may change: snapshotted, compared and put back.

A candidate's build and infer run in the user's process. Whatever they change there outlives the
tune (thread counts, backend flags, the default dtype, grad mode), and whatever eager's forward
resolves through (``torch.nn.functional.linear``, ``nn.Module.__call__``, global module hooks,
torch function and dispatch modes, aten kernels) changes eager's speed as well: a candidate that
slows eager down looks faster than it is. :class:`ProcessState` is a cheap snapshot of all of it
(about 1 ms to take and compare: identities and flag values, no copies of callables); :meth:`ProcessState.changed` names
each difference and :meth:`ProcessState.restore` puts it back. :func:`isolated` wraps a block in
both.

Thread-local state (grad, inference and autocast modes, the mode stacks, the default device) is
the calling thread's. Torch setting itself up is not a change: a replacement whose code lives in
torch's own files (``import torch._dynamo`` wraps ``torch.manual_seed``, ``torch.compile`` patches
``nn.Module.__init__``) is neither reported nor undone, and neither is a new submodule attribute.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import inspect
import os
import types
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Final

import attrs
import torch
import torch.library
import torch.nn.modules.module as _module_mod
import torch.utils._device as _device_mod

from aitune_fp.errors import InvalidTypeError

__all__ = ["NAMESPACES", "Isolation", "ProcessState", "isolated"]

NAMESPACES: Final[tuple[str, ...]] = (
    "torch",
    "torch.nn.functional",
    "torch.Tensor",
    "torch.nn.Parameter",
    "torch.nn.Module",
    "torch.nn.init",
    "torch._C._nn",
    "torch.special",
    "torch.linalg",
    "torch.fft",
)
"""Namespaces whose callables are fingerprinted by identity (every module subclass that
``torch.nn`` exports is fingerprinted too: eager's ``Linear.forward`` resolves through it)."""

_PUT_BACK_ROUNDS: Final = 3
"""Flags are views of shared state (``allow_tf32`` and ``fp32_precision``): set until stable."""

_TORCH_DIR: Final = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep

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


# --------------------------------------------------------------------------- flags


@attrs.frozen
class _Unreadable:
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


def _read(flag: _Flag) -> object:
    try:
        return flag.get()
    except Exception as exc:  # a getter that cannot answer now is a state of its own
        return _Unreadable(str(exc).strip().splitlines()[0][:120] if str(exc).strip() else "")


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
    """Every simple setting under ``torch.backends``, found by what the modules define.

    Per module: its ``ContextProp`` flags (read and set through their raw getter and setter, so a
    ``disable_global_flags()`` freeze cannot stop a restore), its other public bool/number/text
    attributes (``opt_einsum.enabled``), the ``fp32_precision`` of its precision objects
    (``mkldnn.matmul``), and its function pairs ``get_X``/``set_X``, ``X_enabled``/``enable_X``,
    ``X_allowed``/``allow_X``. Only getters that read a global are called; nothing here
    initialises CUDA. The names of ``torch._C`` getters met on the way go into ``seen``.
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
                precision = _read(
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
            value = _read(_Flag("", functools.partial(getattr, sub, name), None))
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
    """The rest of torch's global settings, from ``torch._C``'s getter and setter pairs.

    Every ``_get_X``/``_set_X`` (or ``_is_X``/``_set_X``) whose getter takes no argument and
    answers a plain value, less :data:`_C_SKIPPED` and what was read elsewhere (``seen``).
    """
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
def _flags() -> tuple[_Flag, ...]:
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


# --------------------------------------------------------------------------- namespaces


_MISSING: Final = object()


def _tracked(value: object) -> bool:
    """What eager may resolve through: callables and descriptors, not submodules or data."""
    if value is _MISSING or isinstance(value, types.ModuleType):
        return False
    return callable(value) or hasattr(type(value), "__get__")


def _torch_own(value: object) -> bool:
    """A replacement torch makes itself: a function written in torch's files, or a torch class.

    (``set_default_dtype`` rebinds ``torch.Storage``; dynamo wraps ``torch.manual_seed``.) A
    candidate that swaps in another of torch's own functions is not caught here: that changes
    outputs, which the correctness check is for.
    """
    if isinstance(value, type):
        module = getattr(value, "__module__", "") or ""
        return module == "torch" or module.startswith("torch.")
    code = getattr(value, "__code__", None)
    return isinstance(code, types.CodeType) and os.path.abspath(code.co_filename).startswith(
        _TORCH_DIR
    )


@attrs.frozen(eq=False)
class _Space:
    """A namespace (module or class) and a shallow copy of its ``__dict__``."""

    label: str
    obj: Any
    entries: Mapping[str, object]

    def recapture(self) -> _Space:
        return _Space(self.label, self.obj, dict(vars(self.obj)))


@attrs.frozen
class _Edit:
    """One difference in a namespace, and what puts it back."""

    space: _Space
    name: str
    kind: str  # "replaced", "added", "removed"
    old: object

    def text(self) -> str:
        return f"{self.space.label}.{self.name} {self.kind}"

    def undo(self) -> None:
        if self.old is _MISSING:
            delattr(self.space.obj, self.name)
        else:
            setattr(self.space.obj, self.name, self.old)


def _inherited(obj: Any, name: str) -> bool:
    return isinstance(obj, type) and any(name in vars(base) for base in obj.__mro__[1:])


def _space_edits(then: _Space, now: Mapping[str, object]) -> list[_Edit]:
    old = then.entries
    if now.keys() == old.keys() and list(map(id, now.values())) == list(map(id, old.values())):
        return []  # the usual case, answered in C
    edits = []
    for name in old.keys() | now.keys():
        was, new = old.get(name, _MISSING), now.get(name, _MISSING)
        if was is new or not (_tracked(was) or _tracked(new)) or _torch_own(new):
            continue
        if new is _MISSING:
            kind = "removed"
        elif was is _MISSING:
            kind = "replaced" if _inherited(then.obj, name) else "added"
        else:
            kind = "replaced"
        edits.append(_Edit(then, name, kind, was))
    return sorted(edits, key=lambda e: e.name)


def _resolve(dotted: str) -> Any:
    obj: Any = torch
    for part in dotted.split(".")[1:]:
        obj = getattr(obj, part)
    return obj


def _label(obj: object) -> str:
    if isinstance(obj, types.ModuleType):
        return obj.__name__
    if isinstance(obj, type):
        return f"{obj.__module__}.{obj.__qualname__}"
    raise InvalidTypeError(f"extra namespace must be a module or a class, got {type(obj).__name__}")


def _default_spaces(extra: Iterable[object]) -> list[tuple[str, Any]]:
    found = [(name, _resolve(name)) for name in NAMESPACES]
    module = torch.nn.Module
    found += [
        (f"torch.nn.{name}", cls)
        for name, cls in vars(torch.nn).items()
        if isinstance(cls, type) and issubclass(cls, module) and cls is not module
    ]
    found += [(_label(obj), obj) for obj in extra]
    unique: dict[int, tuple[str, Any]] = {}
    for label, obj in found:
        unique.setdefault(id(obj), (label, obj))
    return list(unique.values())


# --------------------------------------------------------------------------- hooks, modes, kernels


def _hook_registries() -> list[tuple[str, Any]]:
    """``torch.nn.modules.module``'s global hook registries (``_global_*hook*``)."""
    return [
        (name, value)
        for name, value in vars(_module_mod).items()
        if name.startswith("_global_") and "hook" in name
    ]


def _registry_words(name: str) -> str:
    words = name.removeprefix("_global_").replace("_", " ").replace("hooks", "hook")
    return "global " + words.replace("pre hook", "pre-hook")


def _hook_texts(name: str, then: object, now: object) -> list[str]:
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


def _function_modes() -> tuple[object, ...]:
    c: Any = torch._C
    return tuple(c._get_function_stack_at(i) for i in range(c._len_torch_function_stack()))


def _infra_keys() -> list[Any]:
    keys = getattr(torch._C, "_TorchDispatchModeKey", None)
    return list(keys.__members__.values()) if keys is not None else []


def _infra_modes() -> tuple[object, ...]:
    c: Any = torch._C
    return tuple(c._get_dispatch_mode(k) for k in _infra_keys())


def _dispatch_modes(infra: tuple[object, ...]) -> tuple[object, ...]:
    """The user's dispatch mode stack, without the infra modes (fake, proxy, functional)."""
    c: Any = torch._C
    stack = (c._get_dispatch_stack_at(i) for i in range(c._len_torch_dispatch_stack()))
    return tuple(m for m in stack if not any(m is i for i in infra))


def _mode_name(mode: object) -> str:
    return "none" if mode is None else type(mode).__name__


def _common(a: tuple[object, ...], b: tuple[object, ...]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x is not y:
            break
        n += 1
    return n


def _stack_texts(
    what: str, then: tuple[object, ...], now: tuple[object, ...], quiet: tuple[object, ...]
) -> list[str]:
    k = _common(then, now)
    texts = [
        f"{what} removed: {type(m).__name__}" for m in then[k:] if not any(m is q for q in quiet)
    ]
    texts += [
        f"{what} left active: {type(m).__name__}" for m in now[k:] if not any(m is q for q in quiet)
    ]
    return texts


def _device_context() -> tuple[object, object]:
    """The global default-device context (a function mode) and ``torch.utils._device``'s device."""
    return (
        getattr(torch._GLOBAL_DEVICE_CONTEXT, "device_context", None),
        _device_mod.CURRENT_DEVICE,
    )


def _device_name(context: object) -> str:
    return str(getattr(context, "device", "cpu"))


def _aten_impls() -> frozenset[str]:
    return frozenset(torch.library._impls)


def _kernel_text(key: str) -> str:
    ns, op, dispatch = [*key.split("/"), "", ""][:3]
    return f"torch.library kernel registered: {ns}::{op} for {dispatch}"


def _remove_kernels(new: frozenset[str], before: frozenset[str]) -> None:
    """Destroy the ``torch.library.Library`` objects that registered only kernels made since."""
    library_cls: Any = torch.library.Library
    for obj in gc.get_objects():
        if issubclass(type(obj), library_cls):  # type(): a lazy proxy's __class__ would import
            impls = set(getattr(obj, "_op_impls", ()))
            if impls & new and not impls & before:
                obj._destroy()


# --------------------------------------------------------------------------- the snapshot


@attrs.frozen(eq=False)
class ProcessState:
    """What a candidate may change in the process, as it was at :meth:`capture`.

    Flag values, the default device and mode stacks, a shallow copy of each fingerprinted
    namespace's ``__dict__`` and of each global hook registry, and the registered aten kernels.
    Holds references (to the original callables and hooks), never copies of them.
    """

    _flag_values: tuple[object, ...]
    _device: tuple[object, object]
    _function_modes: tuple[object, ...]
    _dispatch_modes: tuple[object, ...]
    _infra_modes: tuple[object, ...]
    _spaces: tuple[_Space, ...]
    _hooks: tuple[tuple[str, object], ...]
    _kernels: frozenset[str]

    @classmethod
    def capture(cls, extra: Iterable[object] = ()) -> ProcessState:
        """Snapshot the process now; ``extra`` modules or classes are fingerprinted too.

        Pass the classes of the model's modules as ``extra`` to catch a candidate that patches
        the user's own ``forward``.
        """
        spaces = tuple(_Space(label, obj, dict(vars(obj))) for label, obj in _default_spaces(extra))
        return cls._take(spaces)

    @classmethod
    def _take(cls, spaces: tuple[_Space, ...]) -> ProcessState:
        infra = _infra_modes()
        return cls(
            flag_values=tuple(_read(flag) for flag in _flags()),
            device=_device_context(),
            function_modes=_function_modes(),
            dispatch_modes=_dispatch_modes(infra),
            infra_modes=infra,
            spaces=spaces,
            hooks=tuple(
                (name, dict(v) if isinstance(v, dict) else v) for name, v in _hook_registries()
            ),
            kernels=_aten_impls(),
        )

    def _now(self) -> ProcessState:
        """The process now, over the same namespaces as this snapshot."""
        return self._take(tuple(space.recapture() for space in self._spaces))

    def changed(self, now: ProcessState | None = None) -> tuple[str, ...]:
        """Each difference between this snapshot and ``now`` (the process now, by default).

        Texts such as ``torch.get_num_threads(): 2 -> 1``, ``torch.nn.functional.linear
        replaced``, ``global forward pre-hook added (1)``; empty when nothing changed.
        """
        now = self._now() if now is None else now
        texts = [
            f"{flag.name}: {a!r} -> {b!r}"
            for flag, a, b in zip(_flags(), self._flag_values, now._flag_values, strict=True)
            if a != b
        ]
        (ctx_then, _), (ctx_now, _) = self._device, now._device
        if ctx_then is not ctx_now:
            texts.append(
                f"torch.get_default_device(): {_device_name(ctx_then)} -> {_device_name(ctx_now)}"
            )
        quiet = (ctx_then, ctx_now)
        texts += _stack_texts(
            "torch function mode", self._function_modes, now._function_modes, quiet
        )
        texts += _stack_texts("torch dispatch mode", self._dispatch_modes, now._dispatch_modes, ())
        for key, a, b in zip(_infra_keys(), self._infra_modes, now._infra_modes, strict=True):
            if a is not b:
                texts.append(
                    f"torch dispatch mode ({key.name}): {_mode_name(a)} -> {_mode_name(b)}"
                )
        spaces_now = {id(s.obj): s.entries for s in now._spaces}
        for space in self._spaces:
            if id(space.obj) in spaces_now:
                texts += [e.text() for e in _space_edits(space, spaces_now[id(space.obj)])]
        hooks_now = dict(now._hooks)
        for name, then in self._hooks:
            texts += _hook_texts(name, then, hooks_now.get(name, _MISSING))
        texts += [
            _kernel_text(k) for k in sorted(now._kernels - self._kernels) if k.startswith("aten/")
        ]
        return tuple(texts)

    def restore(self) -> tuple[str, ...]:
        """Put the process back as it was at capture; answer what could not be put back.

        Each text is a :meth:`changed` text with the reason appended, e.g. the interop thread
        count (torch allows setting it once per process) or inference mode left on (only the
        ``with`` that entered it can leave it).
        """
        errors: dict[str, str] = {}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self._restore_modes()
            self._restore_flags(errors)
            self._restore_spaces(errors)
            self._restore_hooks()
            new = frozenset(k for k in _aten_impls() - self._kernels if k.startswith("aten/"))
            if new:
                _remove_kernels(new, self._kernels)
        left = []
        for text in self.changed():
            name = text.split(": ", 1)[0]
            reason = errors.get(name) or errors.get(text)
            left.append(f"{text} ({reason})" if reason else text)
        return tuple(left)

    def _restore_modes(self) -> None:
        c: Any = torch._C
        now = _function_modes()
        k = _common(self._function_modes, now)
        for _ in now[k:]:
            c._pop_torch_function_stack()
        for mode in self._function_modes[k:]:
            c._push_on_torch_function_stack(mode)
        context, device = self._device
        torch._GLOBAL_DEVICE_CONTEXT.device_context = context
        _device_mod.CURRENT_DEVICE = device  # type: ignore[assignment]
        for key, mode in zip(_infra_keys(), self._infra_modes, strict=True):
            if c._get_dispatch_mode(key) is not mode:
                c._unset_dispatch_mode(key)
                if mode is not None:
                    c._set_dispatch_mode(mode)
        user = _dispatch_modes(self._infra_modes)
        k = _common(self._dispatch_modes, user)
        for _ in user[k:]:
            c._pop_torch_dispatch_stack(None)
        for mode in self._dispatch_modes[k:]:
            c._push_on_torch_dispatch_stack(mode)

    def _restore_flags(self, errors: dict[str, str]) -> None:
        flags = _flags()
        for _ in range(_PUT_BACK_ROUNDS):
            stable = True
            for flag, value in zip(flags, self._flag_values, strict=True):
                if isinstance(value, _Unreadable) or _read(flag) == value:
                    continue
                stable = False
                if flag.put is None:
                    errors[flag.name] = flag.why
                    continue
                try:
                    flag.put(value)
                except Exception as exc:  # record it: restore never raises half-way
                    errors[flag.name] = flag.why or f"setting it failed: {exc}".splitlines()[0]
            if stable:
                return

    def _restore_spaces(self, errors: dict[str, str]) -> None:
        for space in self._spaces:
            for edit in _space_edits(space, vars(space.obj)):
                try:
                    edit.undo()
                except (AttributeError, TypeError) as exc:
                    errors[edit.text()] = f"could not be undone: {exc}"

    def _restore_hooks(self) -> None:
        for name, then in self._hooks:
            now = getattr(_module_mod, name, _MISSING)
            if isinstance(then, dict) and isinstance(now, dict):
                if now.keys() != then.keys() or any(now[k] is not v for k, v in then.items()):
                    now.clear()
                    now.update(then)
            elif now is not then:
                setattr(_module_mod, name, then)


# --------------------------------------------------------------------------- isolated()


@attrs.define
class Isolation:
    """What :func:`isolated` yields: after the block, what it changed and what stayed changed."""

    before: ProcessState
    changes: tuple[str, ...] = ()
    """:meth:`ProcessState.changed` at the block's end (before the restore)."""
    unrestored: tuple[str, ...] = ()
    """:meth:`ProcessState.restore`'s answer: what could not be put back."""


@contextlib.contextmanager
def isolated(extra: Iterable[object] = ()) -> Iterator[Isolation]:
    """Capture the process state, run the block, then name and undo what the block changed.

    Restores also when the block raises (the exception propagates); ``extra`` as in
    :meth:`ProcessState.capture`.
    """
    holder = Isolation(ProcessState.capture(extra=extra))
    try:
        yield holder
    finally:
        holder.changes = holder.before.changed()
        if holder.changes:
            holder.unrestored = holder.before.restore()
