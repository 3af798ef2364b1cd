"""The strategy registry: one table of strategies and their options, one place refusing mistakes.

Spec: ``strategy_registry.strategy_options`` is the only check of a strategy's options; the
command line (``--budget-ms``), a sweep file (``budget_ms``) and ``make_strategy`` all go through
it, so one mistake reads the same everywhere, each in its own spelling. A new entry:
``tests/test_strategy_recipe.py``.
"""

from __future__ import annotations

import math
import re
import subprocess
import sys

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from aitune_fp.errors import InvalidTypeError, InvalidValueError
from aitune_fp.pipeline.strategy_registry import (
    make_strategy,
    option_names,
    strategy_names,
    strategy_options,
)
from aitune_fp.sweep.spec import parse_sweep
from tests.cli_checks import usage_error
from tests.validation_helpers import Pruned, Slower

BUILT_IN = ("one", "first-wins", "max-throughput", "min-latency", "latency-budget")


def _cli(option: str) -> str:
    return "--" + option.replace("_", "-")


def test_importing_the_registry_loads_neither_torch_nor_the_strategies() -> None:
    """The CLI's parser and sweep files read it before anything heavy is imported."""
    code = (
        "import sys, aitune_fp.pipeline.strategy_registry as r; r.strategy_options('latency-budget', "
        "{'budget_ms': 5}); assert 'torch' not in sys.modules, 'torch'; "
        "assert 'aitune_fp.pipeline.strategies' not in sys.modules, 'strategies'"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr


def test_the_built_in_strategies_and_their_options() -> None:
    """The names in ``--strategy``'s order; latency-budget alone of them takes options."""
    assert tuple(n for n in strategy_names() if n in BUILT_IN) == BUILT_IN
    assert option_names()[:2] == ("budget_ms", "quantile")
    assert strategy_options("latency-budget", {"budget_ms": 5}) == {
        "budget_ms": 5.0,
        "quantile": 0.9,
    }
    assert strategy_options("max-throughput", {"budget_ms": None, "quantile": None}) == {}


def test_describe_names_the_strategy_and_its_candidates() -> None:
    """AITune's layout: name, description, then one candidate a line."""
    built = make_strategy("latency-budget", [Pruned()], budget_ms=5)
    assert built.describe() == (
        "name: Latency Budget Strategy\ndescription: select the fastest backend whose p90 "
        "latency is within 5 ms\nbackends:\n  Pruned()"
    )


@pytest.mark.parametrize(
    ("strategy", "given", "error", "match"),
    [
        ("fastest", {}, InvalidValueError, r"strategy must be one of one, .*, got 'fastest'"),
        (3, {}, InvalidTypeError, "strategy must be one of .*got 3"),
        (
            "max-throughput",
            {"budget_ms": 5},
            InvalidValueError,
            "budget_ms applies to strategy 'latency-budget' only, not to 'max-throughput'",
        ),
        ("one", {"patience": 2}, InvalidValueError, "patience is no strategy's option"),
        ("latency-budget", {}, InvalidValueError, "strategy 'latency-budget' needs budget_ms"),
        ("latency-budget", {"budget_ms": 0}, InvalidValueError, r"budget_ms .*> 0 ms, got 0\.0"),
        ("latency-budget", {"budget_ms": -1}, InvalidValueError, r"got -1\.0"),
        ("latency-budget", {"budget_ms": math.nan}, InvalidValueError, "got nan"),
        ("latency-budget", {"budget_ms": 10**400}, InvalidValueError, "got 1000000"),
        ("latency-budget", {"budget_ms": "5"}, InvalidTypeError, "budget_ms .*got str '5'"),
        ("latency-budget", {"budget_ms": True}, InvalidTypeError, "got bool True"),
        ("latency-budget", {"budget_ms": 5, "quantile": 1.5}, InvalidValueError, "got 1.5"),
        ("latency-budget", {"budget_ms": 5, "quantile": 0}, InvalidValueError, r"got 0\.0"),
    ],
)
def test_each_mistake_is_refused_naming_what_was_written(
    strategy: object, given: dict[str, object], error: type[Exception], match: str
) -> None:
    """Unknown strategy, option for another strategy, missing option, bad value: all named."""
    with pytest.raises(error, match=match):
        strategy_options(strategy, given)


def test_the_spelling_is_the_callers() -> None:
    """``spell`` writes each name as the user did: the strategy key and the option."""
    with pytest.raises(InvalidValueError, match=r"^--budget-ms applies to strategy"):
        strategy_options("one", {"budget_ms": 1.0}, spell=_cli)
    with pytest.raises(InvalidValueError, match=r"^--strategy must be one of"):
        strategy_options("two", {}, spell=_cli)


@given(
    budget=st.one_of(st.floats(allow_nan=True), st.integers(-(10**6), 10**6)),
    quantile=st.one_of(st.none(), st.floats(allow_nan=True)),
)
@example(budget=1.0, quantile=-0.0)  # named as given: "got -0.0" (CI's hypothesis found it)
def test_latency_budget_keeps_exactly_the_good_values(
    budget: float, quantile: float | None
) -> None:
    """A finite budget > 0 and a quantile strictly in (0, 1) pass as floats; the rest raise."""
    budget_ok = math.isfinite(float(budget)) and budget > 0
    values = {"budget_ms": budget, "quantile": quantile}
    if budget_ok and (quantile is None or 0 < quantile < 1):
        checked = strategy_options("latency-budget", values)
        assert checked == {"budget_ms": float(budget), "quantile": quantile or 0.9}
        assert all(type(v) is float for v in checked.values())
    else:
        bad = float(budget) if not budget_ok else float(quantile)  # type: ignore[arg-type]  # not None here
        with pytest.raises(InvalidValueError, match=re.escape(f"got {bad!r}") + "$"):
            strategy_options("latency-budget", values)


@given(strategy=st.sampled_from(BUILT_IN[:-1]), value=st.floats(allow_nan=False))
def test_an_option_given_to_a_strategy_without_it_is_refused(strategy: str, value: float) -> None:
    """Whatever the value, an option the strategy does not take is refused before it is read."""
    with pytest.raises(InvalidValueError, match=f"applies to .* only, not to '{strategy}'"):
        strategy_options(strategy, {"quantile": value})


# ---- the command line and sweep files say the same --------------------------------------------

MISTAKES = [
    ("max-throughput", {"budget_ms": 5}),
    ("min-latency", {"quantile": 0.5}),
    ("latency-budget", {}),
    ("latency-budget", {"quantile": 0.5}),
    ("latency-budget", {"budget_ms": 0}),
    ("latency-budget", {"budget_ms": -2}),
    ("latency-budget", {"budget_ms": 5, "quantile": 2}),
    ("latency-budget", {"budget_ms": 5, "quantile": 1}),
]


@pytest.mark.parametrize(("strategy", "given"), MISTAKES)
def test_cli_and_sweep_give_the_same_message(
    strategy: str, given: dict[str, float], capsys: pytest.CaptureFixture[str]
) -> None:
    """One mistake, one sentence: the command line's with flags, the sweep file's with keys."""
    with pytest.raises(InvalidValueError) as template:
        strategy_options(strategy, given, spell=lambda name: f"<{name}>")
    argv = ["tune", "--strategy", strategy]
    for key, value in given.items():
        argv += [_cli(key), str(value)]
    cli = usage_error(argv, capsys)
    with pytest.raises(InvalidValueError) as sweep:
        parse_sweep({"models": ["mlp"], "strategy": strategy, **given})
    assert cli.endswith(": " + re.sub(r"<(\w+)>", lambda m: _cli(m[1]), str(template.value)))
    assert str(sweep.value) == re.sub(r"<(\w+)>", r"\1", str(template.value))


def test_make_strategy_builds_with_the_checked_options() -> None:
    """make_strategy reads the registry: defaults filled, mistakes refused as everywhere."""
    strategy = make_strategy("latency-budget", [Pruned()], budget_ms=5)
    assert (strategy.budget_ms, strategy.quantile) == (5.0, 0.9)  # type: ignore[attr-defined]
    assert type(make_strategy("min-latency", [Pruned()])).__name__ == "MinLatencyStrategy"
    with pytest.raises(InvalidValueError, match="needs exactly one backend, got 2"):
        make_strategy("one", [Pruned(), Slower()])
    with pytest.raises(InvalidValueError, match="budget_ms applies to strategy 'latency-budget'"):
        make_strategy("first-wins", [Pruned()], budget_ms=5)


def test_a_backend_count_a_strategy_cannot_take_reads_the_same_everywhere(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``one`` over two backends: the CLI, a sweep file and make_strategy say one sentence."""
    expected = "strategy 'one' needs exactly one backend, got 2 (eager, compile)"
    cli = usage_error(["tune", "--strategy", "one", "--backends", "eager,compile"], capsys)
    assert cli.endswith(": " + expected)
    with pytest.raises(InvalidValueError) as sweep:
        parse_sweep({"models": ["mlp"], "strategy": "one", "backends": ["eager", "compile"]})
    assert str(sweep.value) == expected
    with pytest.raises(InvalidValueError) as made:
        make_strategy("one", [Pruned(), Slower()])
    assert str(made.value) == "strategy 'one' needs exactly one backend, got 2 (Pruned(), Slower())"
