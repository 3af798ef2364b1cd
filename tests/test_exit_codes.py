"""Exit codes mean one thing across commands, and docs/cli.md's table says which."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from aitune_fp.cli import _shared, main

DOC = Path(__file__).resolve().parents[1] / "docs" / "cli.md"


def _documented() -> dict[int, str]:
    """docs/cli.md's exit-code table: code -> meaning."""
    section = DOC.read_text(encoding="utf-8").split("### Exit codes\n", 1)[1].split("\n## ", 1)[0]
    found: dict[int, str] = {}
    for codes, meaning in re.findall(r"^\| ([\d, ]+) \| (.+) \|$", section, re.M):
        for code in codes.split(","):
            found[int(code)] = meaning
    return found


def test_the_codes_are_distinct_and_documented() -> None:
    """Every EXIT_ constant has its own value and a row of the table; the signals' rows too."""
    codes = {name: value for name, value in vars(_shared).items() if name.startswith("EXIT_")}
    assert len(set(codes.values())) == len(codes)
    documented = _documented()
    assert set(codes.values()) <= set(documented)
    assert {0, 1, 2, 3, 4, 70, 129, 130, 141, 143} == set(documented)
    assert documented[_shared.EXIT_NOT_MET].startswith("the answer is no")
    assert "sweep" in documented[_shared.EXIT_PARTIAL]


@pytest.mark.parametrize(
    "argv",
    [
        ["tune", "--threads", "0"],
        ["tune", "--batch-size", "-1"],
        ["check", "--baseline", "100"],
        ["report", "no-such-file.jsonl"],
        ["sweep", "no-such-file.toml"],
        ["tune", "--no-such-flag"],
    ],
)
def test_usage_is_2_in_every_command(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == _shared.EXIT_USAGE
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("candidate", "code"),
    [("112", _shared.EXIT_OK), ("101", _shared.EXIT_NOT_MET)],
)
def test_check_says_yes_with_0_and_no_with_1(candidate: str, code: int) -> None:
    assert (
        main(["check", "--baseline", "100", "--candidate", candidate, "--threshold", "5"]) == code
    )
