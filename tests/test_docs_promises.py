"""README, ``tune --help`` and the docs say the same thing about isolation, threads, the 5 % claim
and the strategies supported; docs/guarantees.md states what is true now, path by path."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from aitune_fp.cli.tune_args import add_arguments

ROOT = Path(__file__).resolve().parents[1]


def _text(name: str) -> str:
    return " ".join((ROOT / name).read_text(encoding="utf-8").split())


#: What selects the in-process path, as each page words it: (README's words, guarantees' words).
IN_PROCESS_WHEN = [
    ("on CUDA", "CUDA (until a GPU run proves CUDA workers:"),
    ("`--isolation in_process`", '`isolation="in_process"` / `--isolation in_process` asked'),
    ("injected timer that cannot time another process", "injected timer that cannot time another"),
    ("does not pickle for a fork-server worker", "cannot be pickled for a fork-server worker"),
    ("an AITune distributed run", "an AITune distributed run"),
    ("a worker fails to start", "a worker that failed to start"),
]


@pytest.mark.parametrize(("readme", "guarantees"), IN_PROCESS_WHEN)
def test_readmes_isolation_line_names_the_conditions_of_the_table(
    readme: str, guarantees: str
) -> None:
    """README's "Where candidates run" names each condition the table's "Selected when" row does."""
    line = _text("README.md").split("**Where candidates run**:", 1)[1].split("> **On CUDA**")[0]
    assert readme in line
    assert "`--threads N`" in line and "AITune's strategies too" in line
    row = next(
        r for r in _text("docs/guarantees.md").split("| **") if r.startswith("Selected when")
    )
    assert guarantees in row


def test_guarantees_opens_with_the_table_and_holds_no_history() -> None:
    """At most 300 lines; its first section is the table of promises by path; no issue numbers,
    engine versions or old measurements."""
    text = (ROOT / "docs" / "guarantees.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 300
    assert re.findall(r"^## (.+)$", text, re.M)[0] == "Promises by path"
    assert (
        "| | Worker isolation (`isolation: process`) | In process (`isolation: in_process`) |"
        in text
    )
    history = re.findall(r"\bissue \d+|\bv[23](\.\d)?\b|\(was [\d.]+ ?%\)|as before\b", text)
    assert not history, history


@pytest.mark.parametrize(
    "page", ["README.md", "docs/gpu.md", "docs/aitune.md", "docs/guarantees.md"]
)
def test_each_page_has_the_on_cuda_box(page: str) -> None:
    """What a GPU user gets today, the same four facts on every page a GPU user reads."""
    text = (ROOT / page).read_text(encoding="utf-8")
    quoted = text.split("> **On CUDA**", 1)[1].split("\n\n")[0].splitlines()
    box = " ".join(" ".join(line.removeprefix(">").split()) for line in quoted)
    for fact in (
        "in your process",
        "device memory for eager's private copy",
        "host memory for the snapshot",
        "`torch.set_float32_matmul_precision`",
        "sticky CUDA error",
    ):
        assert fact in box, (page, fact)


def test_the_5_percent_claim_says_under_what() -> None:
    """README qualifies the 5 % and points to the measured table; the table has the rows beyond."""
    readme = _text("README.md")
    assert "a wrong accept at most 5 % over all looks when the timings are independent or" in readme
    assert "7.8 % for an identical candidate in 90 real tunes" in readme
    assert "12 of 278 since eager's weights move during the run" in readme
    assert "11 % under strong correlation" in readme
    guarantees = _text("docs/guarantees.md")
    assert (
        "| **beyond 5 %**: a gain that fades within ~10 pairs before a look | 62 % |" in guarantees
    )
    assert "blocks accepted it 7 times (7.8 %" in guarantees


def _help(flag: str) -> str:
    parser = add_arguments(argparse.ArgumentParser().add_subparsers())
    action = next(a for a in parser._actions if flag in a.option_strings)
    return " ".join(str(action.help).split())


def test_threads_and_isolation_agree_in_help_and_docs() -> None:
    """Torch's own thread count by default, in workers too: ``--help`` and the pages agree."""
    assert "Without it: torch's own count" in _help("--threads")
    assert "process on CPU, in_process on CUDA" in _help("--isolation")
    threads = _text("docs/threads.md")
    assert "both arms run torch's own intra-op count" in threads
    assert "torch's own intra-op thread count unless `--threads N`" in _text("README.md")


def test_the_aitune_strategies_named_agree() -> None:
    """README, docs/aitune.md and docs/guarantees.md speak of the same five AITune strategies."""
    names = [
        "OneBackendStrategy",
        "FirstWinsStrategy",
        "MaxThroughputStrategy",
        "MinLatencyStrategy",
        "LatencyBudgetStrategy",
    ]
    readme, aitune = _text("README.md"), _text("docs/aitune.md")
    for name in names:
        assert f"`{name}`" in readme and f"`{name}`" in aitune
