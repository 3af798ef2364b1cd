"""Specs of process isolation: what a candidate changes in the process is found, named and undone.

Every test that changes the process puts it back itself (``try``/``finally`` through the
``pristine`` fixture, which does not rely on the module under test), so a failing test cannot
poison the tests after it.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import subprocess
import sys
import textwrap
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.modules.module as module_mod
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch.nn import functional
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

from aitune_fp.isolation.namespaces import NAMESPACES
from aitune_fp.isolation.snapshot import ProcessState

# --------------------------------------------------------------------------- safety net


def _hook_dicts() -> dict[str, dict[Any, Any]]:
    return {
        k: v
        for k, v in vars(module_mod).items()
        if k.startswith("_global_") and isinstance(v, dict)
    }


@pytest.fixture(name="pristine")
def _pristine() -> Iterator[None]:
    """Put back by hand what the attacks below change, whatever the test did or failed to do."""
    threads = torch.get_num_threads()
    dtype = torch.get_default_dtype()
    grad = torch.is_grad_enabled()
    mkldnn = torch.backends.mkldnn.enabled
    det = (
        torch.are_deterministic_algorithms_enabled(),
        torch.is_deterministic_algorithms_warn_only_enabled(),
    )
    matmul = torch.get_float32_matmul_precision()
    anomaly = (torch.is_anomaly_enabled(), torch.is_anomaly_check_nan_enabled())
    autocast = (torch.is_autocast_enabled("cpu"), torch.get_autocast_dtype("cpu"))
    cudnn = (torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic)
    tf32 = torch.backends.cuda.matmul.allow_tf32
    fastpath = torch.backends.mha.get_fastpath_enabled()
    functional_saved = dict(vars(functional))
    tensor = dict(vars(torch.Tensor))
    module = dict(vars(torch.nn.Module))
    linear = dict(vars(torch.nn.Linear))
    hooks = {k: dict(v) for k, v in _hook_dicts().items()}
    try:
        yield
    finally:
        torch.set_num_threads(threads)
        torch.set_default_dtype(dtype)
        torch.set_grad_enabled(grad)
        torch.backends.mkldnn.enabled = mkldnn
        torch.use_deterministic_algorithms(det[0], warn_only=det[1])
        torch.set_float32_matmul_precision(matmul)
        torch.set_anomaly_enabled(*anomaly)
        torch.set_autocast_enabled("cpu", autocast[0])
        torch.set_autocast_dtype("cpu", autocast[1])
        torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic = cudnn
        torch.backends.cuda.matmul.allow_tf32 = tf32
        torch.backends.mha.set_fastpath_enabled(fastpath)
        for cls_or_mod, saved in (
            (functional, functional_saved),
            (torch.Tensor, tensor),
            (torch.nn.Module, module),
            (torch.nn.Linear, linear),
        ):
            for name in set(vars(cls_or_mod)) - set(saved):
                with contextlib.suppress(AttributeError, TypeError):
                    delattr(cls_or_mod, name)
            for name, value in saved.items():
                if vars(cls_or_mod).get(name) is not value:
                    with contextlib.suppress(AttributeError, TypeError):
                        setattr(cls_or_mod, name, value)
        for k, d in _hook_dicts().items():
            d.clear()
            d.update(hooks.get(k, {}))
        while torch._C._len_torch_function_stack() > 0:
            torch._C._pop_torch_function_stack()
        torch._GLOBAL_DEVICE_CONTEXT.device_context = None
        import torch.utils._device as device_mod

        device_mod.CURRENT_DEVICE = None


# --------------------------------------------------------------------------- attacks


def _slow(fn: Callable[..., Any]) -> Callable[..., Any]:
    def slower(*args: Any, **kwargs: Any) -> Any:
        time.sleep(0)
        return fn(*args, **kwargs)

    return slower


def _other_thread_count() -> int:
    n = torch.get_num_threads()
    return n - 1 if n > 1 else 2


def _slow_pre_hook(module: torch.nn.Module, args: Any) -> None:
    time.sleep(0)


Attack = Callable[[], Callable[[], None]]
"""Changes the process, returns a check that the change is gone (run after restore)."""


def attack_threads() -> Callable[[], None]:
    before = torch.get_num_threads()
    torch.set_num_threads(_other_thread_count())
    return lambda: _expect(torch.get_num_threads() == before, "thread count back")


def attack_mkldnn() -> Callable[[], None]:
    before = torch.backends.mkldnn.enabled
    torch.backends.mkldnn.enabled = not before
    return lambda: _expect(torch.backends.mkldnn.enabled is before, "mkldnn flag back")


def attack_dtype() -> Callable[[], None]:
    before = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64 if before != torch.float64 else torch.float32)
    return lambda: _expect(torch.get_default_dtype() == before, "default dtype back")


def attack_grad() -> Callable[[], None]:
    before = torch.is_grad_enabled()
    torch.set_grad_enabled(not before)
    return lambda: _expect(torch.is_grad_enabled() is before, "grad mode back")


def attack_linear() -> Callable[[], None]:
    before = functional.linear
    functional.linear = _slow(before)
    return lambda: _expect(functional.linear is before, "functional.linear is the original object")


def attack_pre_hook() -> Callable[[], None]:
    registry = module_mod._global_forward_pre_hooks
    before = dict(registry)
    torch.nn.modules.module.register_module_forward_pre_hook(_slow_pre_hook)
    return lambda: _expect(
        module_mod._global_forward_pre_hooks is registry and dict(registry) == before,
        "the same hook dict, emptied of the new hook",
    )


def _expect(ok: bool, what: str) -> None:
    assert ok, what


ATTACKS: dict[str, tuple[Attack, str]] = {
    "threads": (attack_threads, "torch.get_num_threads(): "),
    "mkldnn": (attack_mkldnn, "torch.backends.mkldnn.enabled: "),
    "dtype": (attack_dtype, "torch.get_default_dtype(): "),
    "grad": (attack_grad, "torch.is_grad_enabled(): "),
    "linear": (attack_linear, "torch.nn.functional.linear replaced"),
    "pre_hook": (attack_pre_hook, "global forward pre-hook added (1)"),
}


@pytest.mark.usefixtures("pristine")
@pytest.mark.parametrize("under_no_grad", [False, True], ids=["grad", "no_grad"])
@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_each_attack_is_named_and_undone(attack: str, under_no_grad: bool) -> None:
    run, text = ATTACKS[attack]
    with torch.no_grad() if under_no_grad else contextlib.nullcontext():
        before = ProcessState.capture()
        check = run()
        changes = before.changed()
        assert len(changes) == 1, changes
        assert changes[0].startswith(text), changes
        assert before.restore() == ()
        check()
        assert before.changed() == ()
        if under_no_grad:
            assert not torch.is_grad_enabled()


@pytest.mark.usefixtures("pristine")
def test_all_attacks_at_once_are_named_and_undone() -> None:
    with torch.no_grad():
        before = ProcessState.capture()
        checks = [run() for run, _ in ATTACKS.values()]
        changes = before.changed()
        for _, text in ATTACKS.values():
            assert any(c.startswith(text) for c in changes), (text, changes)
        assert len(changes) == len(ATTACKS)
        assert before.restore() == ()
        for check in checks:
            check()
        assert before.changed() == ()


@pytest.mark.usefixtures("pristine")
def test_texts_say_old_and_new_value() -> None:
    threads = torch.get_num_threads()
    other = _other_thread_count()
    before = ProcessState.capture()
    torch.set_num_threads(other)
    torch.set_default_dtype(torch.float64)
    changes = before.changed()
    assert f"torch.get_num_threads(): {threads} -> {other}" in changes
    assert "torch.get_default_dtype(): torch.float32 -> torch.float64" in changes
    before.restore()


@pytest.mark.usefixtures("pristine")
def test_slowed_eager_is_fast_again_after_restore() -> None:
    """The reported attack: a slower F.linear slows eager; after restore eager calls the original."""
    calls: list[int] = []
    original = functional.linear

    def counting(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return original(*args, **kwargs)

    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
    x = torch.randn(3, 4)
    before = ProcessState.capture()
    functional.linear = counting
    torch.nn.modules.module.register_module_forward_pre_hook(_slow_pre_hook)
    with torch.no_grad():
        model(x)
    assert calls == [1, 1]
    before.restore()
    with torch.no_grad():
        model(x)
    assert calls == [1, 1]
    assert not module_mod._global_forward_pre_hooks


# --------------------------------------------------------------------------- more surfaces


@pytest.mark.usefixtures("pristine")
def test_added_and_removed_callables_are_named_and_undone() -> None:
    before = ProcessState.capture()
    functional.fast_linear = _slow(functional.linear)  # type: ignore[attr-defined]
    saved = functional.silu
    del functional.silu
    try:
        changes = before.changed()
        assert "torch.nn.functional.fast_linear added" in changes
        assert "torch.nn.functional.silu removed" in changes
        assert before.restore() == ()
        assert not hasattr(functional, "fast_linear")
        assert functional.silu is saved
    finally:
        functional.silu = saved


@pytest.mark.usefixtures("pristine")
def test_class_methods_are_fingerprinted() -> None:
    before = ProcessState.capture()
    call_impl = torch.nn.Module._call_impl
    forward = torch.nn.Linear.forward
    torch.nn.Module._call_impl = _slow(call_impl)  # type: ignore[method-assign]
    torch.nn.Linear.forward = _slow(forward)  # type: ignore[method-assign]
    torch.Tensor.add = _slow(torch.Tensor.add)  # type: ignore[method-assign]
    changes = before.changed()
    assert "torch.nn.Module._call_impl replaced" in changes
    assert "torch.nn.Linear.forward replaced" in changes
    assert "torch.Tensor.add replaced" in changes  # shadows the inherited TensorBase.add
    assert before.restore() == ()
    assert torch.nn.Module._call_impl is call_impl
    assert torch.nn.Linear.forward is forward
    assert "add" not in vars(torch.Tensor)


@pytest.mark.usefixtures("pristine")
def test_extra_namespaces_are_fingerprinted() -> None:
    class UserBlock(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x

    forward = UserBlock.forward
    before = ProcessState.capture(extra=(UserBlock,))
    UserBlock.forward = _slow(forward)  # type: ignore[method-assign]
    changes = before.changed()
    assert len(changes) == 1 and changes[0].endswith("UserBlock.forward replaced"), changes
    assert before.restore() == ()
    assert UserBlock.forward is forward


def test_namespaces_constant_lists_the_brief() -> None:
    for name in (
        "torch",
        "torch.nn.functional",
        "torch.Tensor",
        "torch.nn.Module",
        "torch.nn.init",
        "torch._C._nn",
        "torch.special",
        "torch.linalg",
        "torch.fft",
    ):
        assert name in NAMESPACES


@pytest.mark.usefixtures("pristine")
def test_function_mode_left_active_is_named_and_popped() -> None:
    class SlowMode(TorchFunctionMode):
        def __torch_function__(
            self, func: Any, types: Any, args: Any = (), kwargs: Any = None
        ) -> Any:
            return func(*args, **(kwargs or {}))

    depth = torch._C._len_torch_function_stack()
    before = ProcessState.capture()
    SlowMode().__enter__()
    changes = before.changed()
    assert changes == ("torch function mode left active: SlowMode",)
    assert before.restore() == ()
    assert torch._C._len_torch_function_stack() == depth


def test_dispatch_mode_left_active_is_named_and_popped() -> None:
    class SlowDispatch(TorchDispatchMode):
        def __torch_dispatch__(
            self, func: Any, types: Any, args: Any = (), kwargs: Any = None
        ) -> Any:
            return func(*args, **(kwargs or {}))

    depth = torch._C._len_torch_dispatch_stack()
    mode = SlowDispatch()
    before = ProcessState.capture()
    mode.__enter__()
    try:
        changes = before.changed()
        assert changes == ("torch dispatch mode left active: SlowDispatch",)
        assert before.restore() == ()
        assert torch._C._len_torch_dispatch_stack() == depth
    finally:
        while torch._C._len_torch_dispatch_stack() > depth:
            torch._C._pop_torch_dispatch_stack()


def test_fake_tensor_mode_left_active_is_named_and_unset() -> None:
    from torch._subclasses.fake_tensor import FakeTensorMode

    fake_key = torch._C._TorchDispatchModeKey.FAKE
    mode = FakeTensorMode()
    before = ProcessState.capture()
    mode.__enter__()
    try:
        assert before.changed() == ("torch dispatch mode (FAKE): none -> FakeTensorMode",)
        assert before.restore() == ()
        assert torch._C._get_dispatch_mode(fake_key) is None
        assert isinstance(torch.zeros(2).sum().item(), float)  # real tensors again
    finally:
        if torch._C._get_dispatch_mode(fake_key) is not None:
            torch._C._unset_dispatch_mode(fake_key)


def test_torch_function_disabled_and_left_is_named_and_undone() -> None:
    state = torch._C._get_torch_function_state()
    guard = torch._C.DisableTorchFunctionSubclass()
    before = ProcessState.capture()
    guard.__enter__()
    try:
        changes = before.changed()
        assert len(changes) == 1 and changes[0].startswith("torch._C._get_torch_function_state()")
        assert before.restore() == ()
        assert torch._C._get_torch_function_state() == state
    finally:
        torch._C._set_torch_function_state(state)


@pytest.mark.usefixtures("pristine")
def test_default_device_is_named_and_restored() -> None:
    before = ProcessState.capture()
    torch.set_default_device("meta")
    changes = before.changed()
    assert "torch.get_default_device(): cpu -> meta" in changes
    assert before.restore() == ()
    assert torch.get_default_device() == torch.device("cpu")
    assert torch.zeros(1).device == torch.device("cpu")
    assert torch._C._len_torch_function_stack() == 0
    torch.set_default_device("meta")  # torch's own bookkeeping still works afterwards
    torch.set_default_device(None)
    assert torch.zeros(1).device == torch.device("cpu")


def test_inference_mode_left_on_is_named_and_reported_unrestorable() -> None:
    guard = torch.inference_mode()
    before = ProcessState.capture()
    guard.__enter__()
    try:
        changes = before.changed()
        assert "torch.is_inference_mode_enabled(): False -> True" in changes
        left = before.restore()
        assert len(left) == 1 and left[0].startswith("torch.is_inference_mode_enabled()"), left
        assert "with" in left[0]
    finally:
        guard.__exit__(None, None, None)
    assert before.changed() == ()


def test_aten_kernel_override_is_named_and_removed() -> None:
    x = torch.rand(3)
    expected = torch.erfinv(x)
    lib = torch.library.Library("aten", "IMPL")
    before = ProcessState.capture()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        lib.impl("erfinv", lambda t: torch.zeros_like(t), "CPU")
    try:
        assert torch.equal(torch.erfinv(x), torch.zeros(3))
        changes = before.changed()
        assert changes == ("torch.library kernel registered: aten::erfinv for CPU",)
        assert before.restore() == ()
        assert torch.equal(torch.erfinv(x), expected)
        assert before.changed() == ()
    finally:
        lib._destroy()


# --------------------------------------------------------------------------- flags (hypothesis)


def _flip(get: Callable[[], Any], put: Callable[[Any], None]) -> Callable[[], None]:
    def run() -> None:
        put(not get())

    return run


def _set_attr(obj: Any, name: str) -> Callable[[Any], None]:
    return lambda value: setattr(obj, name, value)


FLIPS: dict[str, Callable[[], None]] = {
    "torch.get_num_threads(): ": lambda: torch.set_num_threads(_other_thread_count()),
    "torch.get_default_dtype(): ": lambda: torch.set_default_dtype(torch.float64),
    "torch.is_grad_enabled(): ": _flip(torch.is_grad_enabled, torch.set_grad_enabled),
    "torch.backends.mkldnn.enabled: ": _flip(
        lambda: torch.backends.mkldnn.enabled, _set_attr(torch.backends.mkldnn, "enabled")
    ),
    "torch.backends.cudnn.benchmark: ": _flip(
        lambda: torch.backends.cudnn.benchmark, _set_attr(torch.backends.cudnn, "benchmark")
    ),
    "torch.backends.cudnn.deterministic: ": _flip(
        lambda: torch.backends.cudnn.deterministic,
        _set_attr(torch.backends.cudnn, "deterministic"),
    ),
    "torch.backends.mha.get_fastpath_enabled(): ": _flip(
        torch.backends.mha.get_fastpath_enabled, torch.backends.mha.set_fastpath_enabled
    ),
    "torch.are_deterministic_algorithms_enabled(): ": _flip(
        torch.are_deterministic_algorithms_enabled,
        lambda v: torch.use_deterministic_algorithms(
            v, warn_only=torch.is_deterministic_algorithms_warn_only_enabled()
        ),
    ),
    "torch.is_deterministic_algorithms_warn_only_enabled(): ": _flip(
        torch.is_deterministic_algorithms_warn_only_enabled,
        lambda v: torch.use_deterministic_algorithms(
            torch.are_deterministic_algorithms_enabled(), warn_only=v
        ),
    ),
    "torch.get_autocast_dtype('cpu'): ": lambda: torch.set_autocast_dtype(
        "cpu", torch.float16 if torch.get_autocast_dtype("cpu") != torch.float16 else torch.bfloat16
    ),
    "torch.is_autocast_enabled('cpu'): ": _flip(
        lambda: torch.is_autocast_enabled("cpu"),
        lambda v: torch.set_autocast_enabled("cpu", v),
    ),
    "torch.is_anomaly_enabled(): ": _flip(torch.is_anomaly_enabled, torch.set_anomaly_enabled),
}


@pytest.mark.usefixtures("pristine")
@settings(max_examples=40, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(chosen=st.sets(st.sampled_from(sorted(FLIPS))))
def test_any_subset_of_flag_flips_is_named_exactly_and_undone(chosen: set[str]) -> None:
    before = ProcessState.capture()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for name in sorted(chosen):
                FLIPS[name]()
        changes = before.changed()
        for name in chosen:
            assert sum(c.startswith(name) for c in changes) == 1, (name, changes)
        assert len(changes) == len(chosen), changes
    finally:
        left = before.restore()
    assert left == ()
    assert before.changed() == ()


@pytest.mark.usefixtures("pristine")
@pytest.mark.parametrize(
    "change",
    [
        lambda: torch.set_float32_matmul_precision("high"),
        lambda: setattr(torch.backends.cuda.matmul, "allow_tf32", True),
        lambda: setattr(torch.backends.cuda.matmul, "fp32_precision", "tf32"),
        lambda: setattr(torch.backends.mkldnn.matmul, "fp32_precision", "bf16"),
        lambda: setattr(torch.backends.cudnn, "allow_tf32", False),
    ],
    ids=[
        "float32_matmul_precision",
        "cuda_allow_tf32",
        "cuda_fp32_precision",
        "mkldnn_bf16",
        "cudnn_tf32",
    ],
)
def test_precision_settings_are_named_and_undone(change: Callable[[], None]) -> None:
    """The legacy and the per-backend precision APIs are views of one state: all come back."""
    before = ProcessState.capture()
    try:
        change()
        assert before.changed() != ()
    finally:
        left = before.restore()
    assert left == ()
    assert before.changed() == ()
    assert torch.get_float32_matmul_precision() in ("highest", "high", "medium")  # readable again


# --------------------------------------------------------------------------- no false positives


def test_capture_then_compare_is_unchanged() -> None:
    before = ProcessState.capture()
    assert before.changed() == ()
    assert before.changed(ProcessState.capture()) == ()
    assert before.restore() == ()


def test_a_no_grad_forward_is_not_a_change() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))
    x = torch.randn(5, 8)
    before = ProcessState.capture()
    with torch.no_grad():
        model(x)
    with torch.inference_mode():
        model(x)
    assert before.changed() == ()


def test_importing_a_module_is_not_a_change(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "aitune_fp_fresh_mod.py").write_text(
        "import torch\nimport torch.nn.functional as F\n\ndef helper(x):\n    return F.relu(x)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    before = ProcessState.capture()
    try:
        importlib.import_module("aitune_fp_fresh_mod")
        importlib.import_module("torch.fx")
        assert before.changed() == ()
    finally:
        sys.modules.pop("aitune_fp_fresh_mod", None)


def _run_fresh(code: str) -> Any:
    """Run ``code`` in a fresh interpreter (a fresh torch); it prints one JSON value."""
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.slow
@pytest.mark.compile
def test_torch_compile_setting_itself_up_is_not_a_change() -> None:
    """Importing dynamo wraps torch.manual_seed and compiling patches Module.__init__: torch's own."""
    result = _run_fresh(
        """
        import json, torch
        from aitune_fp.isolation.snapshot import ProcessState
        before = ProcessState.capture()
        import torch._dynamo, torch.export
        m = torch.compile(torch.nn.Linear(4, 4))
        with torch.no_grad():
            m(torch.randn(2, 4))
        print(json.dumps([before.changed(), before.restore()]))
        """
    )
    assert result == [[], []]


def test_interop_threads_cannot_be_set_twice_and_restore_says_so() -> None:
    result = _run_fresh(
        """
        import json, torch
        from aitune_fp.isolation.snapshot import ProcessState
        before = ProcessState.capture()
        n = torch.get_num_interop_threads()
        torch.set_num_interop_threads(n + 1)
        print(json.dumps([n, before.changed(), before.restore()]))
        """
    )
    n, changes, left = result
    assert changes == [f"torch.get_num_interop_threads(): {n} -> {n + 1}"]
    assert len(left) == 1 and left[0].startswith("torch.get_num_interop_threads()")
    assert "once" in left[0]


def test_capture_does_not_initialise_cuda() -> None:
    result = _run_fresh(
        """
        import json, torch
        from aitune_fp.isolation.snapshot import ProcessState
        before = ProcessState.capture()
        before.changed()
        before.restore()
        print(json.dumps(torch.cuda.is_initialized()))
        """
    )
    assert result is False


# --------------------------------------------------------------------------- cost and restore


def test_the_flag_table_is_built_once_and_each_capture_reads_it() -> None:
    """Enumerating torch's settings is the costly part: once per process, not per capture."""
    from aitune_fp.isolation import flags

    ProcessState.capture()
    built = flags.tracked_flags.cache_info().misses
    for _ in range(3):
        ProcessState.capture().changed()
    assert flags.tracked_flags.cache_info().misses == built
    assert flags.tracked_flags.cache_info().hits >= 3


@pytest.mark.usefixtures("pristine")
def test_a_snapshot_names_and_restores_what_changed_since() -> None:
    threads = torch.get_num_threads()
    linear = functional.linear
    before = ProcessState.capture()
    assert before.changed() == ()
    torch.set_num_threads(_other_thread_count())
    functional.linear = _slow(linear)
    changes = before.changed()
    assert before.restore() == ()
    assert torch.get_num_threads() == threads
    assert functional.linear is linear
    assert "torch.nn.functional.linear replaced" in changes
    assert any(c.startswith("torch.get_num_threads()") for c in changes)
