"""One snapshot of the process state a candidate may change, compared and put back.

Besides the flags and namespaces: torch's registries (hooks, modes, default device, kernels).
"""

from __future__ import annotations

import contextlib
import gc
import warnings
from collections.abc import Iterable, Iterator
from typing import Any

import attrs
import torch
import torch.library
import torch.nn.modules.module as _module_mod
import torch.utils._device as _device_mod

from aitune_fp.isolation.flags import (
    PUT_BACK_ROUNDS,
    Unreadable,
    read_flag,
    settings_changed,
    settings_now,
    tracked_flags,
)
from aitune_fp.isolation.namespaces import MISSING, Space, default_spaces, space_edits


def hook_texts(name: str, then: object, now: object) -> list[str]:
    """What changed in one of ``torch.nn.modules.module``'s global hook registries."""
    if not (isinstance(then, dict) and isinstance(now, dict)):
        return (
            []
            if then is now or then == now
            else [f"{_module_mod.__name__}.{name}: {then!r} -> {now!r}"]
        )
    words = name.removeprefix("_global_").replace("_", " ").replace("hooks", "hook")
    what = "global " + words.replace("pre hook", "pre-hook")
    counts = {
        "added": len(now.keys() - then.keys()),
        "removed": len(then.keys() - now.keys()),
        "replaced": sum(1 for k in then.keys() & now.keys() if then[k] is not now[k]),
    }
    return [f"{what} {kind} ({n})" for kind, n in counts.items() if n]


@contextlib.contextmanager
def torch_as_is() -> Iterator[None]:
    """Torch's own functions inside, whatever mode is active: no read runs through a mode left.

    Function modes are taken off and put back: disabling them would change a state it reads.
    """
    c: Any = torch._C
    modes = [c._pop_torch_function_stack() for _ in range(c._len_torch_function_stack())]
    try:
        with c._DisableTorchDispatch():
            yield
    finally:
        for mode in reversed(modes):
            c._push_on_torch_function_stack(mode)


def registry_function_modes() -> tuple[object, ...]:
    c: Any = torch._C
    return tuple(c._get_function_stack_at(i) for i in range(c._len_torch_function_stack()))


def infra_keys() -> list[Any]:
    keys = getattr(torch._C, "_TorchDispatchModeKey", None)
    return list(keys.__members__.values()) if keys is not None else []


def registry_dispatch_modes(infra: tuple[object, ...]) -> tuple[object, ...]:
    """The user's dispatch mode stack, without the infra modes (fake, proxy, functional)."""
    c: Any = torch._C
    stack = (c._get_dispatch_stack_at(i) for i in range(c._len_torch_dispatch_stack()))
    return tuple(m for m in stack if not any(m is i for i in infra))


def common(a: tuple[object, ...], b: tuple[object, ...]) -> int:
    """How many entries two mode stacks share from the bottom (by identity)."""
    return next(
        (i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x is not y), min(len(a), len(b))
    )


def stack_texts(
    what: str, then: tuple[object, ...], now: tuple[object, ...], quiet: tuple[object, ...]
) -> list[str]:
    k = common(then, now)
    return [
        f"{what} {how}: {type(m).__name__}"
        for how, modes in (("removed", then[k:]), ("left active", now[k:]))
        for m in modes
        if not any(m is q for q in quiet)
    ]


@attrs.frozen(eq=False)
class ProcessState:
    """What a candidate may change in the process, as it was at :meth:`capture` (by reference)."""

    _flag_values: tuple[object, ...]
    _device: tuple[object, object]
    _function_modes: tuple[object, ...]
    _dispatch_modes: tuple[object, ...]
    _infra_modes: tuple[object, ...]
    _spaces: tuple[Space, ...]
    _hooks: tuple[tuple[str, object], ...]
    _kernels: frozenset[str]

    @classmethod
    def capture(cls, extra: Iterable[object] = ()) -> ProcessState:
        """Snapshot the process now; ``extra`` modules or classes fingerprinted too."""
        spaces = tuple(Space(label, obj, dict(vars(obj))) for label, obj in default_spaces(extra))
        return cls._take(spaces)

    @classmethod
    def _take(cls, spaces: tuple[Space, ...]) -> ProcessState:
        c: Any = torch._C
        infra = tuple(c._get_dispatch_mode(k) for k in infra_keys())
        with torch_as_is():
            flag_values = settings_now()
        return cls(
            flag_values=flag_values,
            device=(
                getattr(torch._GLOBAL_DEVICE_CONTEXT, "device_context", None),
                _device_mod.CURRENT_DEVICE,
            ),
            function_modes=registry_function_modes(),
            dispatch_modes=registry_dispatch_modes(infra),
            infra_modes=infra,
            spaces=spaces,
            hooks=tuple(
                (name, dict(v) if isinstance(v, dict) else v)
                for name, v in vars(_module_mod).items()
                if name.startswith("_global_") and "hook" in name
            ),
            kernels=frozenset(torch.library._impls),
        )

    def _now(self) -> ProcessState:
        """The process now, over the same namespaces as this snapshot."""
        return self._take(tuple(space.recapture() for space in self._spaces))

    def changed(self, now: ProcessState | None = None) -> tuple[str, ...]:
        """Each difference between this snapshot and ``now`` (default: the process now), as text."""
        now = self._now() if now is None else now
        texts = settings_changed(self._flag_values, now._flag_values)
        (ctx_then, _), (ctx_now, _) = self._device, now._device
        if ctx_then is not ctx_now:
            then_device, now_device = (
                str(getattr(c, "device", "cpu")) for c in (ctx_then, ctx_now)
            )
            texts.append(f"torch.get_default_device(): {then_device} -> {now_device}")
        quiet = (ctx_then, ctx_now)
        texts += stack_texts(
            "torch function mode", self._function_modes, now._function_modes, quiet
        )
        texts += stack_texts("torch dispatch mode", self._dispatch_modes, now._dispatch_modes, ())
        for key, a, b in zip(infra_keys(), self._infra_modes, now._infra_modes, strict=True):
            if a is not b:
                names = ("none" if m is None else type(m).__name__ for m in (a, b))
                texts.append(f"torch dispatch mode ({key.name}): {' -> '.join(names)}")
        spaces_now = {id(s.obj): s.entries for s in now._spaces}
        for space in self._spaces:
            if id(space.obj) in spaces_now:
                texts += [e.text() for e in space_edits(space, spaces_now[id(space.obj)])]
        hooks_now = dict(now._hooks)
        for name, then in self._hooks:
            texts += hook_texts(name, then, hooks_now.get(name, MISSING))
        for key in sorted(k for k in now._kernels - self._kernels if k.startswith("aten/")):
            ns, op, dispatch = [*key.split("/"), "", ""][:3]
            texts.append(f"torch.library kernel registered: {ns}::{op} for {dispatch}")
        return tuple(texts)

    def restore(self) -> tuple[str, ...]:
        """Put the process back as at capture; the texts of what could not be, with the reason."""
        errors: dict[str, str] = {}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self._restore_modes()
            self._restore_flags(errors)
            self._restore_spaces(errors)
            self._restore_hooks()
            new = frozenset(
                k for k in torch.library._impls - self._kernels if k.startswith("aten/")
            )
            library: Any = torch.library.Library  # destroy those that made only new kernels
            for obj in gc.get_objects() if new else ():
                if issubclass(type(obj), library):  # type(): a lazy proxy's __class__ would import
                    impls = set(getattr(obj, "_op_impls", ()))
                    if impls & new and not impls & self._kernels:
                        obj._destroy()
        left = []
        for text in self.changed():
            name = text.split(": ", 1)[0]
            reason = errors.get(name) or errors.get(text)
            left.append(f"{text} ({reason})" if reason else text)
        return tuple(left)

    def _restore_modes(self) -> None:
        c: Any = torch._C
        now = registry_function_modes()
        k = common(self._function_modes, now)
        for _ in now[k:]:
            c._pop_torch_function_stack()
        for mode in self._function_modes[k:]:
            c._push_on_torch_function_stack(mode)
        context, device = self._device
        torch._GLOBAL_DEVICE_CONTEXT.device_context = context
        _device_mod.CURRENT_DEVICE = device  # type: ignore[assignment]
        for key, mode in zip(infra_keys(), self._infra_modes, strict=True):
            if c._get_dispatch_mode(key) is not mode:
                c._unset_dispatch_mode(key)
                if mode is not None:
                    c._set_dispatch_mode(mode)
        user = registry_dispatch_modes(self._infra_modes)
        k = common(self._dispatch_modes, user)
        for _ in user[k:]:
            c._pop_torch_dispatch_stack(None)
        for mode in self._dispatch_modes[k:]:
            c._push_on_torch_dispatch_stack(mode)

    def _restore_flags(self, errors: dict[str, str]) -> None:
        flags = tracked_flags()
        for _ in range(PUT_BACK_ROUNDS):
            stable = True
            for flag, value in zip(flags, self._flag_values, strict=True):
                if isinstance(value, Unreadable) or read_flag(flag) == value:
                    continue
                stable = False
                if flag.write is None:
                    errors[flag.name] = flag.why
                    continue
                try:
                    flag.write(value)
                except Exception as exc:  # record it: restore never raises half-way
                    errors[flag.name] = flag.why or f"setting it failed: {exc}".splitlines()[0]
            if stable:
                return

    def _restore_spaces(self, errors: dict[str, str]) -> None:
        for space in self._spaces:
            for edit in space_edits(space, vars(space.obj)):
                try:
                    edit.undo()
                except (AttributeError, TypeError) as exc:
                    errors[edit.text()] = f"could not be undone: {exc}"

    def _restore_hooks(self) -> None:
        for name, then in self._hooks:
            now = getattr(_module_mod, name, MISSING)
            if isinstance(then, dict) and isinstance(now, dict):
                if now.keys() != then.keys() or any(now[k] is not v for k, v in then.items()):
                    now.clear()
                    now.update(then)
            elif now is not then:
                setattr(_module_mod, name, then)
