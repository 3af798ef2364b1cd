"""Bad ``tune`` and sweep-file input is refused up front: exit 2, one line naming the value.

Each class holds one kind of input a reviewer found let through, or named badly.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from aitune_fp.cli import build_parser, main
from aitune_fp.cli import tune as tune_cli
from aitune_fp.cli._shared import UsageError
from aitune_fp.cli.rows import fmt_flags
from aitune_fp.core.settings import SETTINGS
from aitune_fp.errors import InvalidTypeError, InvalidValueError
from aitune_fp.profiling import threads
from aitune_fp.sweep import run as sweep_run
from aitune_fp.sweep import task as sweep_task
from aitune_fp.sweep.spec import parse_sweep
from tests.cli_checks import usage_error
from tests.factories import fake_log

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "sweep.toml"


def _never(*args: Any, **kwargs: Any) -> Any:
    raise AssertionError("reached: the input was not refused up front")


@pytest.fixture(name="no_tune")
def _no_tune(monkeypatch: pytest.MonkeyPatch) -> None:
    """A tune or sweep that gets past its checks fails the test (exit 70), never runs."""
    monkeypatch.setattr(sweep_task, "tune_model", _never)
    monkeypatch.setattr(sweep_run, "run_sweep", _never)
    monkeypatch.setattr(tune_cli, "set_threads", _never)


def _tune(tmp_path: Path, *argv: str) -> list[str]:
    """``tune`` on CPU in this process, its builds under ``tmp_path``: nothing else started."""
    return ["tune", "--device", "cpu", "--isolation", "in_process", "--cache-dir", str(tmp_path), *argv]  # fmt: skip


def _sweep_file(tmp_path: Path, budget: str) -> str:
    path = tmp_path / "s.toml"
    path.write_text(f'models = ["mlp"]\n[budget]\n{budget}\n', "utf-8")
    return str(path)


class TestCudaOnlySettings:
    """1. A setting only CUDA can honour is refused on CPU before anything is tuned."""

    @pytest.mark.parametrize(
        ("argv", "named"),
        [
            (["--l2-cache", "cold"], "--l2-cache cold"),
            (["--cache", "cold"], "--l2-cache cold"),
            (["--clock", "device"], "--clock device"),
        ],
    )
    def test_tune_refuses_on_cpu(
        self, argv: list[str], named: str, tmp_path: Path, no_tune: None, capsys: Any
    ) -> None:
        line = usage_error(_tune(tmp_path, *argv), capsys)
        assert f"{named} needs a CUDA device" in line and "the tune runs on cpu" in line

    @pytest.mark.parametrize(("key", "value"), [("cache", "cold"), ("clock", "device")])
    def test_sweep_file_refuses_on_cpu(self, key: str, value: str) -> None:
        with pytest.raises(InvalidValueError, match=rf'budget\.{key} "{value}" needs device'):
            parse_sweep({"budget": {key: value}, "models": ["mlp"]})
        spec = parse_sweep({"device": "cuda", "budget": {key: value}, "models": ["mlp"]})
        assert getattr(spec.profiling, key) == value


class TestThreadsBeyondTheCpus:
    """2. More threads than the CPUs this process may use is refused, naming both numbers."""

    def test_tune_refuses(self, monkeypatch: Any, no_tune: None, capsys: Any) -> None:
        monkeypatch.setattr(threads, "usable_cpus", lambda: 2)
        line = usage_error(["tune", "--threads", "999"], capsys)
        assert "--threads 999" in line and "2 CPUs" in line and "--threads 2" in line

    def test_tune_takes_the_cpus_it_has(self, monkeypatch: Any) -> None:
        seen: list[int] = []
        monkeypatch.setattr(threads, "usable_cpus", lambda: 2)
        monkeypatch.setattr(tune_cli, "set_threads", seen.append)
        monkeypatch.setattr(tune_cli, "_tune", lambda *a: 0)
        monkeypatch.setattr(tune_cli, "forks_from_server", lambda *a: False)
        assert main(["tune", "--threads", "2"]) == 0
        assert seen == [2]

    def test_sweep_file_refused_when_run_here(
        self, tmp_path: Path, monkeypatch: Any, no_tune: None, capsys: Any
    ) -> None:
        monkeypatch.setattr(threads, "usable_cpus", lambda: 2)
        path = _sweep_file(tmp_path, "threads = 3")
        line = usage_error(["sweep", path, "--json-log", str(tmp_path / "e.jsonl")], capsys)
        assert "budget.threads 3" in line and "2 CPUs" in line


def _old_names() -> Iterator[tuple[list[str], list[str], list[str]]]:
    """For each old name of a flag: it, the new name saying the same, and saying another value."""
    for row in SETTINGS:
        for alias in row.aliases:
            assert row.flag is not None
            name, _, const = alias.partition("=")
            choices = row.choices or ("a.jsonl", "b.jsonl")
            same = const or choices[0]
            other = next(c for c in choices if c != same)
            yield [name] if const else [name, same], [row.flag, same], [row.flag, other]


class TestOldAndNewNameTogether:
    """3. A flag's old and new names given different values are refused, naming both."""

    @pytest.mark.parametrize(("old", "same", "new"), list(_old_names()))
    @pytest.mark.parametrize("old_first", [True, False])
    def test_disagreeing_refused(
        self, old: list[str], same: list[str], new: list[str], old_first: bool
    ) -> None:
        argv = [*old, *new] if old_first else [*new, *old]
        with pytest.raises(UsageError) as refused:
            build_parser().parse_args(["tune", *argv])
        assert " ".join(old) in str(refused.value) and " ".join(new) in str(refused.value)

    @pytest.mark.parametrize(("old", "same", "new"), list(_old_names()))
    def test_agreeing_taken(self, old: list[str], same: list[str], new: list[str]) -> None:
        """The old name with the new one's very value is the same setting said twice."""
        assert build_parser().parse_args(["tune", *old, *same]) == build_parser().parse_args(
            ["tune", *same]
        )

    def test_sweep_log_names(self) -> None:
        with pytest.raises(UsageError, match=r"--log a\.jsonl.*--json-log b\.jsonl"):
            build_parser().parse_args(["sweep", "s.toml", "--log", "a.jsonl", "--json-log", "b.jsonl"])  # fmt: skip


class TestCommaLists:
    """4. An empty item in a comma-separated list is refused by its position, never dropped."""

    @pytest.mark.parametrize(
        ("text", "position"),
        [("compile,,int8-dynamic", 2), ("int8-dynamic,", 2), (",int8-dynamic", 1)],
    )
    def test_backends(
        self, text: str, position: int, tmp_path: Path, no_tune: None, capsys: Any
    ) -> None:
        line = usage_error(_tune(tmp_path, "--backends", text), capsys)
        assert f"--backends: item {position} of {text!r} is empty" in line

    def test_looks(self, capsys: Any) -> None:
        line = usage_error(["tune", "--looks", "10,,20"], capsys)
        assert "--looks: item 2 of '10,,20' is empty" in line

    def test_input_shape(self) -> None:
        with pytest.raises(
            UsageError, match=r"--input-shape must look like 8,256: item 2 of '8x,256' is empty"
        ):
            tune_cli._parse_shape("8x,256")


class TestFlagNamedOnce:
    """5. A bad value's message names its flag (or sweep key) once."""

    @pytest.mark.parametrize(
        "argv",
        [
            ["--threads", "0"],
            ["--max-seconds", "0"],
            ["--confidence", "1.5"],
            ["--looks", "20,10"],
            ["--delta", "0"],
            ["--spot-rate", "2"],
            ["--soak", "-1"],
            ["--wait-quiet", "-1"],
            ["--futility-margin", "-1"],
            ["--futility-error", "0"],
            ["--selection-seconds", "0"],
        ],
    )
    def test_tune(self, argv: list[str], capsys: Any) -> None:
        line = usage_error(["tune", *argv], capsys)
        assert line.count(argv[0]) == 1, line

    def test_sweep_file(self) -> None:
        with pytest.raises(InvalidValueError) as refused:
            parse_sweep({"budget": {"threads": 0}, "models": ["mlp"]})
        assert str(refused.value) == "budget.threads must be >= 1, got 0"


class TestUnknownFlag:
    """6. An unknown flag points to its command's help, and to the flag meant when one is close."""

    def test_close_match(self, capsys: Any) -> None:
        line = usage_error(["tune", "--threshhold", "5"], capsys)
        assert "--threshhold" in line and "did you mean --threshold?" in line
        assert "aitune-fp tune --help" in line

    def test_no_close_match(self, capsys: Any) -> None:
        line = usage_error(["tune", "--zzzzzz"], capsys)
        assert "did you mean" not in line and "aitune-fp tune --help" in line

    def test_a_shortened_flag_is_not_taken_for_one(self, capsys: Any) -> None:
        """``--in-proces`` or ``--thresh 5`` would silently run as the flag they begin (a full
        tune on a typo): refused, with the flag meant."""
        line = usage_error(["tune", "--thresh", "5"], capsys)
        assert "--thresh" in line and "did you mean --threshold?" in line
        line = usage_error(["tune", "--in-proces"], capsys)
        assert "did you mean --in-process?" in line or "--in-proces" in line

    def test_other_commands(self, capsys: Any) -> None:
        line = usage_error(["sweep", "s.toml", "--qiet"], capsys)
        assert "did you mean --quiet?" in line and "aitune-fp sweep --help" in line


class TestSweepArrays:
    """7. A sweep key that takes a list says to write a TOML array, with an example."""

    @pytest.mark.parametrize(
        ("data", "where"),
        [
            ({"budget": {"looks": "10,20"}, "models": ["mlp"]}, "budget.looks"),
            ({"budget": {"looks": 10}, "models": ["mlp"]}, "budget.looks"),
            ({"models": "mlp"}, "models"),
            ({"models": ["mlp"], "backends": "compile"}, "backends"),
            (
                {
                    "models": [
                        {"model": f"{EXAMPLE.parent}/tiny_model.py:make", "input_shape": "8,3"}
                    ]
                },
                "models[0].input_shape",
            ),
        ],
    )
    def test_named_as_an_array(self, data: dict[str, Any], where: str) -> None:
        with pytest.raises((InvalidTypeError, InvalidValueError)) as refused:
            parse_sweep(data)
        text = str(refused.value)
        assert text.startswith(f"{where} must be an array") and ", e.g. [" in text, text
        assert "tuple" not in text and "a list" not in text


class TestPlurals:
    """8. A count and its noun agree: 1 pair, 2 pairs."""

    def test_counted(self) -> None:
        from aitune_fp.core.messages import counted

        assert (counted(1, "pair"), counted(2, "pair"), counted(0, "line")) == (
            "1 pair",
            "2 pairs",
            "0 lines",
        )

    def test_one_pair_timed_again(self) -> None:
        assert fmt_flags(("retimed_1",)).startswith("1 pair timed again")
        assert fmt_flags(("retimed_2",)).startswith("2 pairs timed again")

    def test_one_bad_line(self, tmp_path: Path, capsys: Any) -> None:
        log = tmp_path / "e.jsonl"
        lines = fake_log()
        log.write_text("\n".join([*lines, "not an event"]) + "\n", "utf-8")
        assert main(["report", str(log)]) == 0
        err = capsys.readouterr().err
        assert f"1 of {len(lines) + 1} lines was not an aitune_fp event:" in err

    def test_one_line_no_event(self, tmp_path: Path, capsys: Any) -> None:
        (tmp_path / "notes.txt").write_text("hello\n", "utf-8")
        line = usage_error(["report", str(tmp_path / "notes.txt")], capsys)
        assert "(1 line;" in line


class TestExampleSweepFile:
    """9. examples/sweep.toml's comments name the flags and units as the help does."""

    def test_flags_named_are_the_shown_ones(self) -> None:
        parser = build_parser()
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        shown = {
            option
            for action in sub.choices["sweep"]._actions
            if action.help != argparse.SUPPRESS
            for option in action.option_strings
        }
        named = set(re.findall(r"(?<![\w-])--[a-z][a-z-]*", EXAMPLE.read_text("utf-8")))
        assert named and named <= shown, named - shown

    def test_looks_in_pairs_per_candidate(self) -> None:
        text = EXAMPLE.read_text("utf-8")
        assert "pairs per arm" not in text and "pairs per candidate" in text
