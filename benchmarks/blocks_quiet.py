"""Tunes of an identical candidate on the main job's MLP: verdicts and machine-moved alarms.

Each tune is ``aitune-fp tune --backends eager`` (the candidate is eager itself) in a fresh
process, as a user runs it; it counts ``faster`` / ``not_faster`` / ``inconclusive`` and how
often the machine-moved rule fired: a verdict held back by a move of eager's (``inconclusive``,
"no verdict from a machine that moved"; on a quiet machine a false alarm), apart from a move
flagged while the verdict stood (on the pairs after it, or on all pairs when the paired ratio
held across it: ``machine_moved_ratio_steady_at_pair_<k>``); ``machine_busy``, from the load,
is counted apart. With ``--inject`` a row of tunes whose model runs 2x slower from 3 s after
its first call (both arms, the ratio steady, past the cut: a real change) shows the rule still
holds the verdict back. A flagged move both arms made alike (each arm's level stepped by the
same factor at the flagged pair) is counted apart: the machine moved, which is no false alarm.
Issue 48's targets, quiet machine, 30 tunes: at most 3 inconclusive, 0 or 1 accepted, false
alarms at most 10 %.

Usage: ``python benchmarks/blocks_quiet.py [--tunes 30] [--inject 10] [--quick] [--typical]
[--keep FILE]`` (``--keep``: each tune's result record appended as a JSON line, raw timings
included).
"""

from __future__ import annotations

import argparse
import collections
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from aitune_fp.core.results import flat

#: A model factory that slows down for good 3 s after its first call (a real change).
SLOWING = """
import time
import torch
from aitune_fp.models import mlp


class Slowing(torch.nn.Module):
    def __init__(self, inner):
        super().__init__()
        self.inner = inner
        self.first = None

    def forward(self, x):
        now = time.perf_counter()
        self.first = self.first or now
        out = self.inner(x)
        if now - self.first > 3.0:
            spent = time.perf_counter() - now
            end = time.perf_counter() + spent  # the call takes twice as long from now on
            while time.perf_counter() < end:
                pass
        return out


def factory():
    model = mlp()
    return Slowing(model.module.eval()), model.sample
"""


def tune(extra: Sequence[str]) -> dict[str, object]:
    """One ``aitune-fp tune`` of an identical candidate: its result record."""
    command = [str(Path(sys.executable).with_name("aitune-fp")), "tune", "--format", "json"]
    done = subprocess.run(
        [*command, "--quiet", "--backends", "eager", *extra],
        capture_output=True,
        text=True,
        check=True,
    )
    results = [flat(r) for r in json.loads(done.stdout)["run"]["results"]]
    return dict(results[0])


#: A move both arms made alike: each arm's median over this many pairs after the flagged pair
#: against the same before, both beyond ``ALIKE_MOVE`` (log) and within it of each other.
ALIKE_PAIRS = 8
ALIKE_MOVE = 0.1


def moved_alike(result: dict[str, object], flag: str) -> bool:
    """Whether the candidate's level moved as eager's did at ``flag``'s pair: the machine moved.

    A move of eager's alone is the rule's false alarm (an identical candidate sees what eager does).
    """
    at = int(flag.rsplit("_", 1)[1])
    shifts = []
    for key in ("baseline_latencies_s", "candidate_latencies_s"):
        times = [float(t) for t in result.get(key) or ()]  # type: ignore[attr-defined]
        before, after = times[max(at - ALIKE_PAIRS, 0) : at], times[at : at + ALIKE_PAIRS]
        if not before or not after:
            return False
        shifts.append(math.log(statistics.median(after) / statistics.median(before)))
    eager, candidate = shifts
    return abs(eager) > ALIKE_MOVE and abs(eager - candidate) < ALIKE_MOVE


def row(label: str, extra: Sequence[str], tunes: int, keep: Path | None = None) -> None:
    """``tunes`` tunes; one Markdown row (each record appended to ``keep``)."""
    verdicts: collections.Counter[str] = collections.Counter()
    held = stood = steady = busy = alike = 0
    blocks: set[int] = set()
    start = time.perf_counter()
    loads = []
    for _ in range(tunes):
        loads.append(os.getloadavg()[0])
        result = tune(extra)
        if keep is not None:
            with keep.open("a", encoding="utf-8") as out:
                out.write(json.dumps({"row": label, **result}) + "\n")
        verdicts[str(result["verdict"])] += 1
        flags = [str(f) for f in result.get("flags", [])]  # type: ignore[attr-defined]
        moved = any(
            f.startswith(("machine_changed", "machine_slowed", "machine_moved")) for f in flags
        )
        stop = moved and "no verdict from a machine that moved" in str(result.get("reason"))
        held += stop
        stood += moved and not stop
        steady += any(f.startswith("machine_moved_ratio_steady") for f in flags)
        busy += "machine_busy" in flags
        at = [f for f in flags if f.startswith(("machine_changed_at", "machine_moved_ratio"))]
        alike += bool(at) and moved_alike(result, at[0])
        blocks.add(int(result.get("latencies_block", 1)))  # type: ignore[call-overload]
    wall = (time.perf_counter() - start) / tunes
    print(
        f"| {label} | {tunes} | {verdicts['faster']} | {verdicts['not_faster']} | "
        f"{verdicts['inconclusive']} | {held} ({held / tunes:.0%}) | {stood} ({steady}) | {alike} | "
        f"{busy} | "
        f"{','.join(map(str, sorted(blocks)))} | {min(loads):.1f}-{max(loads):.1f} | "
        f"{wall:.1f} |",
        flush=True,
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Print the rows as one Markdown table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tunes", type=int, default=30)
    parser.add_argument("--inject", type=int, default=10, help="tunes with a real change")
    parser.add_argument("--quick", action="store_true", help="3 tunes a row, 10 s budgets")
    parser.add_argument("--typical", action="store_true", help="also a row of single calls")
    parser.add_argument("--keep", type=Path, help="append each tune's record here (JSON lines)")
    args = parser.parse_args(argv)
    tunes, inject = (3, 2) if args.quick else (args.tunes, args.inject)
    budget = ["--max-seconds", "10"] if args.quick else []
    print(
        "| tunes of an identical candidate (MLP) | tunes | faster | not_faster | inconclusive "
        "| held back by a move | move flagged, verdict stood (ratio steady) | "
        "of the moves, both arms moved alike (the machine's) | machine_busy | block "
        "| load | s a tune |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    row("blocks (--quantity throughput)", [*budget, "--quantity", "throughput"], tunes, args.keep)
    if args.typical:
        row("single calls (typical)", [*budget, "--quantity", "typical"], tunes, args.keep)
    if inject:
        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / "slowing.py"
            path.write_text(SLOWING)
            row(
                "a real change: 2x slower from 3 s",
                [*budget, "--quantity", "throughput", "--model", f"{path}:factory"],
                inject,
                args.keep,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
