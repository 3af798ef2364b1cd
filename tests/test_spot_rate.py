"""The spot-check rate: one setting for the gate's timing and the head-to-head's rounds."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from aitune_fp.core.config import ProfilingConfig
from aitune_fp.core.spot import spot_positions
from aitune_fp.errors import InvalidValueError
from aitune_fp.inputs import Sample
from aitune_fp.measure.rules import measure_speedup
from aitune_fp.sweep.spec import parse_sweep
from aitune_fp.testing import FakeClock
from tests.cli_checks import usage_error
from tests.validation_helpers import Pruned, gated, make_case


@pytest.mark.parametrize("rate", [0.0, -0.1, 1.5, math.nan, math.inf])
def test_a_rate_outside_zero_to_one_is_refused_naming_it(rate: float) -> None:
    with pytest.raises(InvalidValueError, match="spot_rate"):
        ProfilingConfig(spot_rate=rate)


def test_the_default_is_a_tenth_and_one_checks_every_call() -> None:
    """At rate 1 every timed candidate call is compared; at the default, the ends and a tenth."""
    counts = {}
    for rate in (None, 1.0):
        clock, seen = FakeClock(), []
        config = ProfilingConfig() if rate is None else ProfilingConfig(spot_rate=rate)
        measured = measure_speedup(
            clock.arm(0.002),
            clock.arm(0.001),
            Sample(),
            4,
            config,
            timer=clock,
            spot_check=seen.append,
        ).result
        block = measured.candidate_latencies_block or measured.latencies_block
        counts[rate] = (len(seen), measured.n_candidate * block)  # the candidate's timed calls
    assert ProfilingConfig().spot_rate == 0.1
    checked, timed = counts[1.0]
    assert checked == timed
    expected = len(spot_positions(timed, 0.1, 0))
    assert counts[None] == (expected, timed) and expected < timed


@pytest.mark.parametrize(
    ("value", "ok"), [("0.5", True), ("1", True), ("0", False), ("1.2", False), ("nan", False)]
)
def test_the_cli_flag(value: str, ok: bool, capsys: pytest.CaptureFixture[str]) -> None:
    """``--spot-rate`` sets it in both decision modes; a bad value is one line naming it."""
    from aitune_fp.cli import build_parser
    from aitune_fp.cli.tune_args import profiling_config

    args = build_parser().parse_args(["tune", "--spot-rate", value])
    if ok:
        assert profiling_config(args).spot_rate == float(value)
        args = build_parser().parse_args(["tune", "--decision", "point", "--spot-rate", value])
        assert profiling_config(args).spot_rate == float(value)
    else:
        assert "--spot-rate" in usage_error(["tune", "--spot-rate", value], capsys)


def test_sweep_files_take_it_in_the_budget() -> None:
    base: dict[str, Any] = {"models": [{"name": "mlp", "model": "embedded:mlp"}]}
    spec = parse_sweep({**base, "budget": {"spot_rate": 0.25}})
    assert spec.profiling.spot_rate == 0.25
    with pytest.raises(InvalidValueError, match=r"budget\.spot_rate"):
        parse_sweep({**base, "budget": {"spot_rate": 2}})


def test_a_tune_passes_its_rate_to_the_gate_and_the_head_to_head(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The session's comparisons and the head-to-head both run at the config's rate."""
    import aitune_fp.pipeline.choosing as choosing
    import aitune_fp.pipeline.stages as stages
    from aitune_fp.pipeline.strategies import MaxThroughputStrategy

    seen: list[tuple[str, float]] = []
    real_comparison, real_head_to_head = stages.Comparison, choosing.head_to_head

    def comparison(**kwargs: Any) -> Any:
        seen.append(("gate", kwargs["spot_rate"]))
        return real_comparison(**kwargs)

    def head_to_head(*args: Any, **kwargs: Any) -> Any:
        seen.append(("head-to-head", kwargs["spot_rate"]))
        return real_head_to_head(*args, **kwargs)

    monkeypatch.setattr(stages, "Comparison", comparison)
    monkeypatch.setattr(choosing, "head_to_head", head_to_head)
    config = ProfilingConfig(looks=(10, 20), max_seconds=10.0, warmup_max_calls=10, spot_rate=0.5)
    module, spec, data = make_case()
    strategy = gated(MaxThroughputStrategy([Pruned("a"), Pruned("b")]), profiling_config=config)
    strategy.tune(module, "m", spec, data, "cpu", tmp_path)
    assert seen == [("gate", 0.5), ("gate", 0.5), ("head-to-head", 0.5)]


def test_sweep_budgets_take_the_selection_and_cache_settings() -> None:
    """``[budget]`` takes every ProfilingConfig field the tune flags set (statistical mode)."""
    base: dict[str, Any] = {"models": [{"name": "mlp", "model": "embedded:mlp"}]}
    budget = {"selection_delta_percent": 5.0, "selection_max_seconds": 9.0, "cache": "cold"}
    profiling = parse_sweep({**base, "device": "cuda", "budget": budget}).profiling
    assert (profiling.selection_delta_percent, profiling.selection_max_seconds) == (5.0, 9.0)
    assert profiling.cache == "cold"
    with pytest.raises(InvalidValueError, match="applies to decision statistical only"):
        parse_sweep({**base, "decision": "point", "budget": {"selection_delta_percent": 5.0}})
