"""Bad input refused at the edge, and one tune per module object (issue 32).

Spec: every numeric setting has a stated range, refused up front with the value named, by the
config, the CLI and sweep files alike; ``check`` refuses a number it cannot hold (exit 2); the
decorator refuses a class with no ``tune``; two threads tuning one module object never overlap,
and the training flag comes back as it came.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aitune_fp.adapters.validation import validation_of, with_performance_validation
from aitune_fp.core.config import MAX_CALLS, MAX_SECONDS, ProfilingConfig
from aitune_fp.errors import InvalidValueError
from aitune_fp.sweep.spec import parse_sweep
from tests.cli_checks import usage_error
from tests.validation_helpers import gated, make_case

_ABSURD = [
    ("max_seconds", 1e300),
    ("point_steps", 10**12),
    ("point_warmup_calls", 10**12),
    ("warmup_max_calls", 10**9),
    ("looks", (10, 10**12)),
    ("hang_grace_s", 1e300),
    ("build_timeout_s", 1e300),
    ("selection_max_seconds", 1e300),
    ("threads", 10**9),
    ("batch_sizes", (10**12,)),
    ("futility_margin_percent", 1e300),
    ("warmup_tolerance", 1e300),
]


class TestBounds:
    @pytest.mark.parametrize(("field", "value"), _ABSURD)
    def test_the_config_refuses_absurd_values_naming_them(self, field: str, value: Any) -> None:
        """A valid type but no sane budget: refused, with the field named."""
        with pytest.raises(InvalidValueError, match=field):
            ProfilingConfig(**{field: value})

    @given(seconds=st.floats(min_value=1e-3, max_value=MAX_SECONDS))
    def test_every_value_in_range_is_taken(self, seconds: float) -> None:
        """The range is stated, not guessed: its whole inside is accepted."""
        assert ProfilingConfig(max_seconds=seconds).max_seconds == seconds
        assert ProfilingConfig(point_steps=MAX_CALLS).point_steps == MAX_CALLS

    @pytest.mark.parametrize(
        ("key", "value"), [("max_seconds", "1e300"), ("point_steps", "1000000000000")]
    )
    def test_sweep_files_refuse_them(self, key: str, value: str) -> None:
        """A sweep's budget goes through the same validators: refused before any task."""
        decision = "point" if key.startswith("point") else "statistical"
        budget = {key: float(value) if "." in value or "e" in value else int(value)}
        with pytest.raises(InvalidValueError, match=f"budget.{key}"):
            parse_sweep({"models": ["mlp"], "decision": decision, "budget": budget})

    def test_the_cli_refuses_them(self, capsys: pytest.CaptureFixture[str]) -> None:
        """``tune --max-seconds 1e300``: exit 2, one line naming the value."""
        err = usage_error(["tune", "--model", "mlp", "--max-seconds", "1e300"], capsys)
        assert "max_seconds" in err or "--max-seconds" in err

    def test_check_refuses_a_number_it_cannot_hold(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """A 400-digit integer in a JSON array: exit 2 naming the item, no OverflowError."""
        (tmp_path / "b.txt").write_text("[0.01, 0.011, 0.012]")
        (tmp_path / "c.txt").write_text("[0.01, " + "9" * 400 + ", 0.012]")
        argv = ["check", "--baseline-times", str(tmp_path / "b.txt")]
        err = usage_error([*argv, "--candidate-times", str(tmp_path / "c.txt")], capsys)
        assert "item 1" in err


class NoTune:
    """Not a strategy: nothing to validate."""

    def run(self) -> None:
        """Something other than tune."""


class TestDecorator:
    def test_a_class_without_tune_is_refused_by_name(self) -> None:
        """A TypeError naming the class, at decoration (not a class that fails later)."""
        with pytest.raises(TypeError, match="NoTune"):
            with_performance_validation(NoTune)
        with pytest.raises(TypeError, match="NoTune"):
            with_performance_validation(min_speedup_threshold_percent=5.0)(NoTune)


class Holding:
    """A strategy that says it is inside its tune, then waits to be let go."""

    def __init__(self) -> None:
        self.inside = threading.Event()
        self.release = threading.Event()

    def tune(self, module: Any, *rest: Any) -> Any:
        """Return the module unchanged once released."""
        self.inside.set()
        assert self.release.wait(60)
        return module


class TestOneTunePerModule:
    def test_a_second_tune_of_the_same_module_waits(self, tmp_path: Path) -> None:
        """B starts only after A ended; the model comes back in training; nobody is blamed."""
        module, spec, data = make_case()
        module.train()
        first, second = Holding(), Holding()
        strategies = [gated(first), gated(second)]

        def run(strategy: Any) -> None:
            strategy.tune(module, "m", spec, data, "cpu", tmp_path)

        threads = [threading.Thread(target=run, args=(s,)) for s in strategies]
        threads[0].start()
        assert first.inside.wait(60)
        threads[1].start()
        overlapped = second.inside.wait(1.0)  # it must still be waiting for the first tune
        first.release.set()
        second.release.set()
        for t in threads:
            t.join(120)
        assert not overlapped
        assert second.inside.is_set()
        assert module.training
        for s in strategies:
            report = validation_of(s).last_report
            assert report is not None and report.outcome is not None
            assert not [f for f in report.failures if f.stage == "strategy"], report.failures
