"""The strategy recipe of docs/architecture.md, counted: its class, one registry entry, its docs.

The toy strategy below stands for a new class in ``aitune_fp/pipeline/strategies.py``; the fixture adds
its one ``StrategyEntry`` to the registry. Nothing else is edited: ``--strategy`` offers it and
its help says what it keeps, its option is a flag and a sweep key, ``make_strategy`` builds it
and a tune runs it; the docs check names the mention in docs/cli.md that is left to write.
"""

from __future__ import annotations

import json
import re
import types
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from aitune_fp.backends.protocol import Backend
from aitune_fp.cli import build_parser, main
from aitune_fp.errors import InvalidValueError
from aitune_fp.pipeline import strategy_registry
from aitune_fp.pipeline.strategies import SessionStrategy
from aitune_fp.pipeline.strategy_registry import StrategyEntry, StrategyOption, make_strategy
from aitune_fp.pipeline.tune import TuneSession
from aitune_fp.sweep.spec import parse_sweep
from tests.cli_checks import usage_error
from tests.validation_helpers import Pruned, Slower

DOC = Path(__file__).resolve().parents[1] / "docs" / "cli.md"


# ---- the toy strategy's class ------------------------------------------------------------------


class FirstNStrategy(SessionStrategy):
    """First-wins over the first ``first`` backends only (eager when none of them passes)."""

    def __init__(self, backends: Sequence[Backend], *, first: int) -> None:
        """Keep the first ``first`` candidates."""
        self.backends = tuple(backends)[:first]

    def tune_session(self, session: TuneSession) -> Any:
        """The first passing backend among those kept, else the eager baseline."""
        outcomes = []
        for backend in self.backends:
            outcome = session.try_candidate(backend)
            if outcome.ok:
                return outcome.backend
            outcomes.append(outcome)
        return session.fallback(outcomes)


def _count(spelled: str, value: object) -> int:
    """The toy option's own check: a whole count >= 1."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidValueError(f"{spelled} must be a count >= 1, got {value!r}")
    return value


# ---- the one registry entry --------------------------------------------------------------------

TOY = StrategyEntry(
    "first-n",
    "first-wins over the first --first backends",
    FirstNStrategy,
    options=(
        StrategyOption("first", "how many backends to try", _count, required=True, parse=int),
    ),
)


@pytest.fixture
def toy(monkeypatch: pytest.MonkeyPatch) -> StrategyEntry:
    """The toy entry added to the registry for one test (monkeypatch takes it back)."""
    extended = types.MappingProxyType({**strategy_registry.STRATEGIES, TOY.name: TOY})
    monkeypatch.setattr(strategy_registry, "STRATEGIES", extended)
    return TOY


def _undocumented(strategies: Mapping[str, StrategyEntry]) -> list[str]:
    """Registered names and option flags that docs/cli.md's ``--strategy`` item does not name."""
    text = DOC.read_text(encoding="utf-8")
    item = text.split("\n- `--strategy ", 1)[1].split("\n- ", 1)[0]
    names = set(re.match(r"[a-z|-]+", item)[0].split("|"))  # type: ignore[index]
    missing = [n for n in strategies if n not in names]
    flags = {"--" + o.name.replace("_", "-") for e in strategies.values() for o in e.options}
    return missing + sorted(f for f in flags if f"`{f}" not in item)


# ---- and everything else takes it --------------------------------------------------------------


def test_every_registered_strategy_and_option_is_in_the_docs() -> None:
    """The docs piece of the recipe: docs/cli.md's ``--strategy`` item names each one."""
    assert _undocumented(strategy_registry.STRATEGIES) == []


def test_without_the_entry_its_name_and_option_are_refused(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Before the entry is added neither the command line nor a sweep file knows it."""
    assert "invalid choice: 'first-n'" in usage_error(["tune", "--strategy", "first-n"], capsys)
    with pytest.raises(InvalidValueError, match="unknown key 'first'"):
        parse_sweep({"models": ["mlp"], "strategy": "first-n", "first": 1})


@pytest.mark.usefixtures("toy")
def test_the_entry_is_a_choice_and_its_option_a_flag(capsys: pytest.CaptureFixture[str]) -> None:
    """``--strategy first-n --first 2`` parses; the help lists both; misuse reads as ever."""
    args = build_parser().parse_args(["tune", "--strategy", "first-n", "--first", "2"])
    assert (args.strategy, args.first) == ("first-n", 2)
    with pytest.raises(SystemExit):
        build_parser().parse_args(["tune", "--help"])
    shown = " ".join(capsys.readouterr().out.split())
    assert "first-n: first-wins over the first --first backends" in shown
    assert "--first FIRST first-n: how many backends to try" in shown
    err = usage_error(["tune", "--first", "2"], capsys)
    assert err.endswith("--first applies to strategy 'first-n' only, not to 'max-throughput'")
    err = usage_error(["tune", "--strategy", "first-n"], capsys)
    assert err.endswith("strategy 'first-n' needs --first: how many backends to try")
    err = usage_error(["tune", "--strategy", "first-n", "--first", "0"], capsys)
    assert err.endswith("--first must be a count >= 1, got 0")


@pytest.mark.usefixtures("toy")
def test_the_entry_is_a_sweep_key_and_make_strategy_builds_it() -> None:
    """A sweep file names it and its option; make_strategy passes the checked option on."""
    spec = parse_sweep({"models": ["mlp"], "strategy": "first-n", "first": 1})
    assert (spec.strategy, spec.strategy_options) == ("first-n", (("first", 1),))
    with pytest.raises(InvalidValueError, match=r"^first must be a count >= 1, got 0\.5$"):
        parse_sweep({"models": ["mlp"], "strategy": "first-n", "first": 0.5})
    built = make_strategy("first-n", [Pruned(), Slower()], first=1)
    assert isinstance(built, FirstNStrategy)
    assert [b.describe() for b in built.backends] == ["Pruned()"]


@pytest.mark.usefixtures("toy")
def test_a_tune_runs_it_and_the_docs_are_what_is_left(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``tune --strategy first-n --first 1`` tries the first backend only; docs/cli.md is left."""
    args = ["tune", "--strategy", "first-n", "--first", "1", "--backends", "eager,channels-last"]
    args += ["--looks", "10,20", "--max-seconds", "5", "-q", "--format", "json"]
    assert main([*args, "--in-process", "--cache-dir", str(tmp_path)]) in (0, 1)
    run = json.loads(capsys.readouterr().out)["run"]
    tried = [r["backend_description"] for r in run["results"]] + [
        f["backend_description"] for f in run["failures"]
    ]
    assert len(tried) == 1 and "ChannelsLast" not in tried[0]
    assert _undocumented(strategy_registry.STRATEGIES) == ["first-n", "--first"]


def test_an_option_named_like_a_tune_flag_is_refused_by_name(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A strategy option ``threshold`` would be ``--threshold``: refused, naming both."""
    clash = StrategyEntry(
        "strict",
        "first-wins with its own threshold",
        FirstNStrategy,
        options=(StrategyOption("threshold", "a threshold of its own", _count),),
    )
    extended = types.MappingProxyType({**strategy_registry.STRATEGIES, clash.name: clash})
    monkeypatch.setattr(strategy_registry, "STRATEGIES", extended)
    with pytest.raises(
        InvalidValueError, match=r"option 'threshold' of 'strict' would be the flag --threshold"
    ):
        build_parser()
