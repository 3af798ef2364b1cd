"""``cache="cold"`` (issue 24): an L2 flush before each timed call of the interleaved comparison,
untimed; CUDA and the statistical mode only. On CPU a fake flusher counts the flushes and their
place; the ``gpu`` test flushes the real L2."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from aitune_fp.core.config import ProfilingConfig
from aitune_fp.errors import InvalidValueError
from aitune_fp.inputs import Sample
from aitune_fp.measure.rules import measure_speedup
from aitune_fp.profiling import cache as l2_cache
from aitune_fp.profiling.interleaved import InterleavedRun
from aitune_fp.testing import FakeClock
from tests.test_telemetry import CudaClock, measured


class TestColdCache:
    def test_options(self) -> None:
        assert ProfilingConfig().cache == "hot"
        with pytest.raises(InvalidValueError, match="cache"):
            ProfilingConfig(cache="warm")  # type: ignore[arg-type]
        with pytest.raises(InvalidValueError, match="cache='cold' is for decision='statistical'"):
            ProfilingConfig(cache="cold", decision="point")

    def test_refused_on_cpu(self) -> None:
        with pytest.raises(InvalidValueError, match="cache='cold' needs a CUDA device"):
            measured(FakeClock(), cache="cold")

    def test_every_timed_call_is_flushed_first_untimed(self) -> None:
        """The flush runs before each timed call, before its barrier; untimed calls get none."""
        clock = FakeClock()
        log: list[str] = []

        def flush() -> None:
            log.append(f"flush@{clock.syncs}")

        a = clock.arm(0.002, log=log, label="A")
        b = clock.arm(0.001, log=log, label="B")
        with InterleavedRun(a, b, Sample(), timer=clock, flush=flush) as run:
            warm = run.warm_up(window=2, tolerance=0.5, max_calls=4)
            run.extend(6)
        timed = 2 * len(warm.baseline_s) + 2 * 6
        flushes = [e for e in log if e.startswith("flush")]
        assert len(flushes) == timed
        calls = [e for e in log if not e.startswith("flush")]
        assert len(calls) == timed + 4  # 1 untimed call per arm at warm-up, 1 per look
        for i, entry in enumerate(log):
            if entry.startswith("flush"):
                assert log[i + 1] in ("A", "B")

    def test_measure_flushes_with_the_device_flusher(self, monkeypatch: pytest.MonkeyPatch) -> None:
        made: list[object] = []
        count = [0]

        def flusher(timer: object) -> Any:
            made.append(timer)
            return lambda: count.__setitem__(0, count[0] + 1)

        monkeypatch.setattr(l2_cache, "l2_flusher", flusher)
        clock = CudaClock()
        r = measured(clock, cache="cold")
        assert made == [clock] and count[0] >= 2 * r.n_baseline
        assert r.latencies_block == 1  # every timed call starts cold, not a block's first

    @pytest.mark.gpu
    def test_flushes_the_real_l2(self) -> None:
        from aitune_fp.profiling.timers import CudaTimer

        flush = l2_cache.l2_flusher(CudaTimer())
        flush()
        torch.cuda.synchronize()
        layer = torch.nn.Linear(256, 256).cuda().eval()
        x = torch.randn(64, 256, device="cuda")
        config = ProfilingConfig(looks=(10, 20), cache="cold")
        assert measure_speedup(layer, layer, ((x,), {}), 64, config).result.verdict is not None
