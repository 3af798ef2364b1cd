"""A digest of the events of deterministic tunes: to show that a change of shape kept behaviour.

Runs a few validated tunes on the tests' fake clock (``tests.validation_helpers.CLOCK``, which
their modules and backends spend on, ``aitune_fp.testing.FakeClock``) with the tune's
random seed fixed, captures every event, drops what depends on the machine or the moment (run
ids, durations, load averages, timestamps, summaries with times in them, the ``oversubscribed``
flag; the load average reads quiet, since a busy one holds verdicts open) and prints one SHA-256 per scenario plus one over all. Two checkouts whose digests agree
emitted the same events with the same verdicts, figures and reasons.

Usage, from a checkout's root: ``python benchmarks/event_digest.py [--dump DIR]``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

#: Keys whose values depend on the machine or the moment, not on the decision.
_VOLATILE = frozenset(
    {
        "run_id",
        "duration_s",
        "load_avg_start",
        "load_avg_end",
        "load_avg_1m",
        "build_s",
        "timestamp",
        "summary",
        "traceback_path",
        "threads",
        "interop_threads",
        "omp_num_threads",
        "cpus",
    }
)


class _Seeded(random.Random):
    """``random.SystemRandom`` stand-in: the tune's seed fixed, so a run repeats exactly."""

    def __init__(self, *args: Any) -> None:
        super().__init__(20261204)


def _normal(event: dict[str, Any]) -> dict[str, Any]:
    kept = {k: v for k, v in event.items() if k not in _VOLATILE}
    if isinstance(kept.get("flags"), list):
        kept["flags"] = [f for f in kept["flags"] if f != "oversubscribed"]
    return kept


def _scenarios() -> dict[str, Callable[[], Any]]:
    from aitune_fp.core.config import ProfilingConfig
    from aitune_fp.pipeline.strategies import (
        FirstWinsStrategy,
        MaxThroughputStrategy,
        OneBackendStrategy,
    )
    from tests.validation_helpers import BrokenBuild, Pruned, Slower, Wrong

    point = ProfilingConfig(decision="point", point_warmup_calls=2, point_steps=10)
    return {
        "first-wins": lambda: (FirstWinsStrategy([Slower(), BrokenBuild(), Pruned()]), None),
        "max-throughput": lambda: (
            MaxThroughputStrategy([Pruned("a"), Slower(), Wrong(), Pruned("b")]),
            None,
        ),
        "one, point rule": lambda: (OneBackendStrategy(Pruned()), point),
    }


def digests(dump: Path | None = None) -> dict[str, str]:
    """Each scenario's digest (and ``all``), the normalised events written to ``dump``."""
    from aitune_fp.profiling import threads

    real_random, random.SystemRandom = random.SystemRandom, _Seeded  # type: ignore[misc]
    # a quiet machine, whatever this one runs: a busy load holds verdicts open (issue 36)
    real_load, threads.load_average = threads.load_average, lambda: 0.0  # type: ignore[assignment]
    try:
        return _digests(dump)
    finally:  # as it was: a later tune in this process draws unguessable seeds again
        threads.load_average = real_load  # type: ignore[assignment]
        random.SystemRandom = real_random  # type: ignore[misc]


def _digests(dump: Path | None) -> dict[str, str]:
    from aitune_fp.adapters.validation import with_performance_validation
    from aitune_fp.testing import capture_events
    from tests.validation_helpers import CLOCK, FAST_CONFIG, make_case

    out: dict[str, str] = {}
    whole = hashlib.sha256()
    CLOCK.reset()  # this thread's fake time and jitter from their start: runs repeat exactly
    for name, make in _scenarios().items():
        strategy, config = make()
        # in process: a build's time is real, and a worker's includes its start (0.1-0.2 s),
        # which the head-to-head's tie-break between equals reads; here it is about 0
        wrapped = with_performance_validation(
            strategy, profiling_config=config or FAST_CONFIG, timer=CLOCK, isolation="in_process"
        )
        module, spec, data = make_case()
        with capture_events() as captured, tempfile.TemporaryDirectory() as cache:
            try:
                wrapped.tune(module, "m", spec, data, "cpu", cache)
            except Exception as exc:  # a strategy that ends without a winner still logged it all
                captured.append({"event": "raised", "type": type(exc).__name__})
        text = "\n".join(json.dumps(_normal(e), sort_keys=True, default=str) for e in captured)
        out[name] = hashlib.sha256(text.encode()).hexdigest()[:16]
        whole.update(text.encode())
        if dump is not None:
            (dump / f"{name.replace(' ', '_').replace(',', '')}.jsonl").write_text(text, "utf-8")
    out["all"] = whole.hexdigest()[:16]
    return out


def main(argv: list[str] | None = None) -> int:
    """Print each scenario's digest."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--dump", type=Path, help="write the normalised events here")
    args = parser.parse_args(argv)
    for name, digest in digests(args.dump).items():
        print(f"{digest}  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
