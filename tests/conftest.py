"""Test setup: hypothesis profiles, the ``gpu`` mark, a private temp dir, a clean structlog.

Once every test module is imported, the objects they loaded (torch, AITune, transformers, Ray)
are frozen out of the garbage collector's view (``gc.freeze``): the full collections that the
library and AITune run after each candidate then scan only what the tests made, not the whole
of torch (they took most of an AITune test's time).

The system temp dir is pointed at a folder of pytest's own temp dir for the whole session (for
this process and every process it starts), so the ``aitune_fp-*`` folders a tune or a sweep
keeps by default stay in pytest's temp dir, which pytest rotates; a test that still leaves one
in the real system temp dir fails.

The session runs torch at one intra-op thread (workers forked); ``AITUNE_FP_TEST_THREADS=2``
runs it at two, where workers start from the fork server and are sent what they run pickled.
"""

from __future__ import annotations

import gc
import getpass
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog
from hypothesis import HealthCheck, settings
from structlog.testing import LogCapture

from aitune_fp.testing import capture_events

settings.register_profile(
    "ci",
    derandomize=True,
    deadline=None,
    database=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("dev", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("ci" if os.environ.get("CI") else "dev")


def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a runtime dependency
        return False
    return bool(torch.cuda.is_available())


#: The system temp dir before the session pointed it at pytest's.
SYSTEM_TEMP = Path(tempfile.gettempdir())
#: What tunes, sweeps and crash logs name their folders and files in the temp dir.
LEFT_BEHIND_PREFIX = "aitune_fp-"
_SAVED_ENV: dict[str, str | None] = {}
_AUDITING: list[bool] = []
#: Paths of ``aitune_fp-*`` entries this process made in the system temp dir (audit hook).
_MADE_IN_SYSTEM_TEMP: list[str] = []


def _watch_system_temp(event: str, args: tuple[Any, ...]) -> None:
    """Audit hook: note each ``aitune_fp-*`` folder or file this process makes in SYSTEM_TEMP."""
    if event not in ("os.mkdir", "open") or not args or not isinstance(args[0], str | Path):
        return
    path = str(args[0])
    if LEFT_BEHIND_PREFIX not in path:
        return
    try:
        made = Path(path).absolute()
        if made.parent == SYSTEM_TEMP and made.name.startswith(LEFT_BEHIND_PREFIX):
            _MADE_IN_SYSTEM_TEMP.append(str(made))
    except Exception:  # an audit hook must never break the operation it watches
        return


#: What AITune's import spends most of its time on, minus AITune itself (it needs the GPU
#: placeholders): a worker sent an AITune candidate from the fork server imports AITune afresh.
AITUNE_PRELOAD = ("torch._dynamo", "transformers", "onnx")


def session_threads() -> int:
    """The session's torch thread count: ``AITUNE_FP_TEST_THREADS`` (a positive int), else 1."""
    text = os.environ.get("AITUNE_FP_TEST_THREADS", "1")
    if not text.isdigit() or int(text) < 1:
        raise pytest.UsageError(f"AITUNE_FP_TEST_THREADS must be a positive integer, not {text!r}")
    return int(text)


def pytest_collection_finish(session: pytest.Session) -> None:
    """Freeze what the imports made out of the collector's view (see the module doc).

    At several threads, where AITune tests run, the fork server also preloads
    :data:`AITUNE_PRELOAD`: each of their workers then starts in under 1 s, not 3-4 s, for 2-4 s
    more at the server's one start (a wash at one thread, where one test starts two such workers).
    """
    gc.collect()
    gc.freeze()
    if session_threads() > 1 and any("aitune" in item.keywords for item in session.items):
        from aitune_fp.profiling import serving

        serving.PRELOAD = (*serving.PRELOAD, *AITUNE_PRELOAD)


@pytest.hookimpl(trylast=True)  # after pytest's tmp_path plugin has set up its factory
def pytest_configure(config: pytest.Config) -> None:
    """Point the temp dir (``tempfile`` and ``TMPDIR``) at a folder of pytest's temp dir."""
    factory: pytest.TempPathFactory = config._tmp_path_factory  # type: ignore[attr-defined]
    private = factory.mktemp("systemp", numbered=False)
    user = getpass.getuser()
    keep = {
        # Ray's session folder holds Unix sockets: their paths must stay short
        "RAY_TMPDIR": str(SYSTEM_TEMP),
        # compiled kernels stay cached between sessions where they were
        "TORCHINDUCTOR_CACHE_DIR": str(SYSTEM_TEMP / f"torchinductor_{user}"),
        "TMPDIR": str(private),
        # torch's own count, which tunes run by default, is one on any machine: workers are
        # forked (tests of more threads ask for them); processes the tests start inherit it.
        # AITUNE_FP_TEST_THREADS=2 runs the session at two (workers from the fork server)
        "OMP_NUM_THREADS": str(session_threads()),
    }
    for name, value in keep.items():
        _SAVED_ENV[name] = os.environ.get(name)
        if name == "TMPDIR" or name not in os.environ:
            os.environ[name] = value
    tempfile.tempdir = str(private)
    import torch

    torch.set_num_threads(session_threads())
    if not _AUDITING:  # an audit hook cannot be removed: add it once per process
        sys.addaudithook(_watch_system_temp)
        _AUDITING.append(True)


def pytest_unconfigure(config: pytest.Config) -> None:
    """Give the process its temp dir back."""
    for name, value in _SAVED_ENV.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    tempfile.tempdir = None


@pytest.fixture(autouse=True)
def _nothing_left_in_the_system_temp_dir() -> Iterator[None]:
    """A test that leaves an ``aitune_fp-*`` entry in the system temp dir fails (it is removed).

    Made by this process: seen by an audit hook, so another process's entries never count.
    Processes the test starts inherit ``TMPDIR``, so the test must keep it (and ``tempfile``'s).
    """
    private = os.environ["TMPDIR"]
    start = len(_MADE_IN_SYSTEM_TEMP)
    yield
    made = sorted({p for p in _MADE_IN_SYSTEM_TEMP[start:] if os.path.lexists(p)})
    del _MADE_IN_SYSTEM_TEMP[start:]
    for path in made:
        if os.path.isdir(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            os.unlink(path)
    if made:
        pytest.fail(
            f"left in the system temp dir: {', '.join(made)} (removed); make them under "
            "tmp_path, or through tempfile (pointed at pytest's temp dir for the session)"
        )
    if os.environ.get("TMPDIR") != private or tempfile.gettempdir() != private:
        pytest.fail("the test changed TMPDIR or tempfile.tempdir and did not restore them")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip ``gpu`` tests without CUDA (the only tests that may skip)."""
    if any("gpu" in item.keywords for item in items) and not _cuda_available():
        skip_gpu = pytest.mark.skip(reason="needs a CUDA device (gpu mark)")
        for item in items:
            if "gpu" in item.keywords:
                item.add_marker(skip_gpu)


@pytest.fixture(autouse=True)
def _collector_left_on() -> Iterator[None]:
    """A test that leaves the garbage collector off fails, and it is turned back on: else a later
    test that times or restores it fails instead, depending on the order."""
    was = gc.isenabled()
    yield
    if was and not gc.isenabled():
        gc.enable()
        pytest.fail("the test left the garbage collector off")


@pytest.fixture(autouse=True)
def _reset_structlog() -> None:
    """Each test starts with structlog's defaults: the library never configures logging."""
    structlog.reset_defaults()


@pytest.fixture(autouse=True)
def _fresh_clock() -> None:
    """Each test starts the helpers' fake clock at 0 with the same jitter sequence."""
    from tests.validation_helpers import CLOCK

    CLOCK.reset()


@pytest.fixture(autouse=True)
def _quiet_machine(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test's measurements read a quiet load average (0.0), whatever else this machine runs.

    A busy machine keeps a statistical verdict open (``measure/machine.py``), so a real reading
    would make tests depend on their neighbours. ``test_threads_load.py`` reads the real one (or
    its own).
    """
    if request.module.__name__.endswith("test_threads_load"):
        return
    from aitune_fp.profiling import threads

    monkeypatch.setattr(threads, "load_average", lambda: 0.0)


@pytest.fixture(name="pinned_draws")
def _pinned_draws(monkeypatch: pytest.MonkeyPatch) -> None:
    """The tune's unguessable draws (held-out seed, round orders) made repeatable: seed 7.

    On the fake clock this makes a tune deterministic. A test that asserts two identical
    contenders settle as a tie needs it: with fresh draws they are told apart at the selection
    rule's error rate (a false elimination, which the guarantee allows).
    """
    import random

    monkeypatch.setattr(random, "SystemRandom", lambda: random.Random(7))


@pytest.fixture(name="logs")
def _logs() -> Iterator[LogCapture]:
    """The aitune_fp events a test emits, in ``.entries`` (:func:`aitune_fp.testing.capture_events`)."""
    cap = LogCapture()
    with capture_events() as entries:
        cap.entries = entries
        yield cap
