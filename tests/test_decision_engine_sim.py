"""Specs of the decision-engine simulation's scenarios (``benchmarks/decision_engine_sim.py``)."""

from __future__ import annotations

from types import ModuleType

import numpy as np
import pytest

from tests.benchmark_scripts import load_benchmark


@pytest.fixture(scope="module")
def sim() -> ModuleType:
    """The benchmark script, loaded as a module."""
    return load_benchmark("decision_engine_sim")


def test_the_fixed_order_is_abba_then_baab(sim: ModuleType) -> None:
    """Fixed: A B | B A | B A | A B ...; drawn: each quad's two pairs opposite, half each way.

    In slots, eager's calls under the fixed order are exactly where the interference lands.
    """
    rng = np.random.default_rng(0)
    first = sim._baseline_first(8, "fixed", rng)
    assert first.tolist() == [1, 0, 0, 1, 1, 0, 0, 1]  # pair by pair
    eager_slots = np.where(first, 2 * np.arange(8), 2 * np.arange(8) + 1) % 8
    assert sim._IN_PHASE[eager_slots].all()
    drawn = sim._baseline_first(4000, "random", rng)
    assert (drawn[0::2] != drawn[1::2]).all()
    assert 0.45 < drawn.mean() < 0.55


@pytest.mark.parametrize("law", ["skewed", "bimodal"])
def test_each_arms_noise_keeps_the_typical_call_and_the_throughput(
    sim: ModuleType, law: str
) -> None:
    """Same law on both arms: the log ratio is symmetric and the mean-time ratio is 1."""
    rng = np.random.default_rng(1)
    eager, cand = sim._arm_noise(rng, 200_000, 0.06, law), sim._arm_noise(rng, 200_000, 0.06, law)
    ratio = eager - cand
    assert abs(np.median(ratio)) < 0.002
    assert abs(np.exp(eager).mean() / np.exp(cand).mean() - 1.0) < 0.003
    if law == "skewed":
        assert abs(ratio.std() - 0.06) < 0.002  # scaled to the paired noise asked for
        assert ((eager - eager.mean()) ** 3).mean() > 0  # right-skewed per arm


def test_interference_in_phase_fools_the_fixed_order_only(sim: ModuleType) -> None:
    """An identical candidate under in-phase interference: v2 (fixed) accepts, v3.1 does not."""
    rates = {}
    for rule in ("v2 futility", "v3.1"):
        row = sim._row(("A/A", 1.0, 0.0, None, "periodic", rule, 40, 3, 0.06))
        rates[rule] = float(row.split("|")[3].split("%")[0])
    assert rates["v2 futility"] >= 80.0
    assert rates["v3.1"] <= 10.0


def test_the_table_has_a_row_per_case_and_rule(
    sim: ModuleType, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--cases`` / ``--rules`` pick the rows; each prints with its standard error."""
    assert sim.main(["--runs", "4", "--rules", "v3.1", "--cases", "bimodal", "skewed"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if "| v3.1 |" in line]
    assert len(rows) == 4 and all("±" in row for row in rows)
