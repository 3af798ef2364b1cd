"""Test setup: hypothesis profiles, the ``gpu`` mark, and a clean structlog per test."""

from __future__ import annotations

import os

import pytest
import structlog
from hypothesis import HealthCheck, settings
from structlog.testing import LogCapture

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


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip tests marked ``gpu`` when no CUDA device is present (and only then)."""
    if any("gpu" in item.keywords for item in items) and not _cuda_available():
        skip_gpu = pytest.mark.skip(reason="needs a CUDA device (gpu mark)")
        for item in items:
            if "gpu" in item.keywords:
                item.add_marker(skip_gpu)


@pytest.fixture(autouse=True)
def _reset_structlog() -> None:
    """Each test starts with structlog's defaults: the library never configures logging."""
    structlog.reset_defaults()


@pytest.fixture(autouse=True)
def _fresh_clock() -> None:
    """Each test starts the helpers' fake clock at 0 with the same jitter sequence."""
    from tests.validation_helpers import CLOCK

    CLOCK.reset()


@pytest.fixture(name="logs")
def _logs() -> LogCapture:
    """Capture every event a test emits (structlog configured for this test only)."""
    cap = LogCapture()
    structlog.configure(processors=[cap])
    return cap
