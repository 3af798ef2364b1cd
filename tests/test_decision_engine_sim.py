"""Specs of the decision-engine simulation (``benchmarks/decision_engine_sim.py``): its machine
and its rows, driven through the real measuring loop."""

from __future__ import annotations

import math
import statistics
from types import ModuleType

import pytest

from tests.benchmark_scripts import load_benchmark


@pytest.fixture(scope="module")
def sim() -> ModuleType:
    """The benchmark script, loaded as a module."""
    return load_benchmark("decision_engine_sim")


def _latencies(sim: ModuleType, case: object, n: int) -> tuple[list[float], list[float]]:
    machine = sim.Machine(case, 0.06, 7)
    eager, cand = [], []
    for _ in range(n):
        eager.append(machine.call("eager"))
        cand.append(machine.call("candidate"))
    return eager, cand


@pytest.mark.parametrize("label", ["1.03x", "throughput exactly 1.01x, typical call faster"])
def test_the_machine_gives_the_case_its_ratio(sim: ModuleType, label: str) -> None:
    """The typical call of "1.03x" is 1.03x; the throughput case's mean ratio is 1.01x."""
    case = next(c for c in sim.CASES if c.label == label)
    eager, cand = _latencies(sim, case, 40_000)
    if label == "1.03x":
        ratios = [math.log(b / c) for b, c in zip(eager, cand, strict=True)]
        assert math.exp(statistics.median(ratios)) == pytest.approx(1.03, abs=0.003)
    else:
        assert sum(eager) / sum(cand) == pytest.approx(1.01, abs=0.003)


def test_the_machine_slows_both_arms(sim: ModuleType) -> None:
    """ "machine3x": both arms three times slower from the step on; the ratio holds."""
    case = next(c for c in sim.CASES if c.label.startswith("A/A, machine 3x"))
    machine = sim.Machine(case, 0.0, 1)
    machine.slow_from = 10
    times = [machine.call("eager" if g % 2 == 0 else "candidate") for g in range(20)]
    assert times[:10] == pytest.approx([sim.BASE_S] * 10)
    assert times[10:] == pytest.approx([3 * sim.BASE_S] * 10)


def test_a_row_runs_the_real_loop(sim: ModuleType, capsys: pytest.CaptureFixture[str]) -> None:
    """``--cases`` picks the rows; a 1.10x candidate is accepted, and what held looks back shows."""
    assert sim.main(["--runs", "3", "--cases", "1.10x", "A/A 1.00x"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| 1.10x")]
    assert len(rows) == 1 and "100.0% ±" in rows[0]
