"""CPU threads and load (issue 24): one thread setting for tune and sweep, what was used, and
the ``oversubscribed`` flag (fake load averages; no test depends on this machine's load)."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import attrs
import jsonschema
import pytest
import torch
from rich.console import Console

from aitune_fp.cli import main
from aitune_fp.cli.plain import print_parts
from aitune_fp.cli.rendering import render_run
from aitune_fp.cli.tune_args import profiling_config
from aitune_fp.core.config import ProfilingConfig
from aitune_fp.core.report import TuneReport
from aitune_fp.events.candidates import CandidateMeasured
from aitune_fp.events.ingest import event_schema
from aitune_fp.events.sending import to_record
from aitune_fp.events.validation import Started
from aitune_fp.measure.rules import measure_speedup
from aitune_fp.profiling import threads as host
from aitune_fp.profiling.threads import (
    CpuEnvironment,
    cpu_environment,
    is_oversubscribed,
    set_threads,
)
from aitune_fp.testing import FakeClock
from tests.factories import flat_result
from tests.validation_helpers import tune_args

CONFIG = ProfilingConfig(looks=(10, 20), warmup_max_calls=6, point_warmup_calls=2, point_steps=6)


def _loads(monkeypatch: pytest.MonkeyPatch, values: list[float], cpus: int = 2) -> None:
    """Make the load average read ``values`` in turn (the last one repeats) on ``cpus`` cores:
    the host's and a fake clock's machine alike."""
    seq = list(values)

    def load() -> float:
        return seq.pop(0) if len(seq) > 1 else seq[0]

    monkeypatch.setattr(host, "load_average", load)
    monkeypatch.setattr(FakeClock, "load_average", lambda self: load())
    monkeypatch.setattr(host, "usable_cpus", lambda: cpus)


class TestSetThreads:
    def test_before_torch_loads_sets_omp_and_torch(self) -> None:
        """In a fresh process: OMP_NUM_THREADS is set before torch loads, then torch's threads."""
        code = (
            "import os, sys\n"
            "from aitune_fp.profiling.threads import set_threads\n"
            "assert 'torch' not in sys.modules\n"
            "set_threads(1)\n"
            "import torch\n"
            "print(os.environ['OMP_NUM_THREADS'], torch.get_num_threads())\n"
        )
        env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
        )
        assert out.stdout.split() == ["1", "1"]

    def test_after_torch_loads_sets_torch_only(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """torch already loaded: OpenMP has read its setting, so the environment is left alone."""
        monkeypatch.setenv("OMP_NUM_THREADS", "7")
        before = torch.get_num_threads()
        try:
            set_threads(1)
            assert torch.get_num_threads() == 1
            assert os.environ["OMP_NUM_THREADS"] == "7"
        finally:
            torch.set_num_threads(before)

    @pytest.mark.parametrize("bad", [0, -2, 1.5, "2", True])
    def test_refused_by_name(self, bad: Any) -> None:
        """A count below 1 or not an integer is refused, naming threads and the value."""
        with pytest.raises((ValueError, TypeError), match="threads"):
            set_threads(bad)


class TestEnvironment:
    def test_reads_threads_omp_cores_and_load(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """What the process runs with: torch's threads (or the tune's), OMP, cores, load."""
        monkeypatch.setenv("OMP_NUM_THREADS", "3")
        _loads(monkeypatch, [1.25], cpus=4)
        env = cpu_environment()
        assert env == CpuEnvironment(
            threads=torch.get_num_threads(),
            interop_threads=torch.get_num_interop_threads(),
            omp_num_threads=3,
            cpus=4,
            load_avg_1m=1.25,
        )
        assert cpu_environment(threads=2).threads == 2

    def test_unset_or_odd_omp_and_no_load(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """OMP_NUM_THREADS unset (or not one integer) and no load average read as None."""
        monkeypatch.delenv("OMP_NUM_THREADS", raising=False)

        def no_load() -> tuple[float, float, float]:
            raise OSError("no load average here")

        monkeypatch.setattr(os, "getloadavg", no_load)
        assert host.load_average() is None
        env = cpu_environment()
        assert env.omp_num_threads is None and env.load_avg_1m is None
        monkeypatch.setenv("OMP_NUM_THREADS", "4,2")
        assert cpu_environment().omp_num_threads is None

    def test_real_load_average(self) -> None:
        """On this (Linux) machine the load average is a number >= 0."""
        load = host.load_average()
        assert load is not None and load >= 0


class TestOversubscribedRule:
    @pytest.mark.parametrize(
        ("loads", "cpus", "threads", "expected"),
        [
            ((0.5, 1.0), 2, 1, False),  # quiet: the tune's own thread and a little more
            ((2.0, 2.0), 2, 2, False),  # the tune's 2 threads fill the 2 cores: at the limit
            ((2.5, 1.0), 2, 1, True),  # 1.5 other load leaves less than the 1 core the tune needs
            ((1.0, 2.6), 2, 2, True),  # at the end: others ran beside the tune's 2 threads
            ((5.0, 7.0), 2, 2, True),  # the loaded 2-core machine
            ((0.0, 0.0), 2, 3, True),  # more threads than cores: oversubscribed by itself
            ((None, None), 2, 1, False),  # no load average: nothing to flag on
            ((None, 3.0), 2, 1, True),
        ],
    )
    def test_rule(
        self, loads: tuple[float | None, ...], cpus: int, threads: int, expected: bool
    ) -> None:
        """Load less the tune's own threads above the cores those threads leave free."""
        assert is_oversubscribed(loads, cpus=cpus, threads=threads) is expected


class TestMeasurementCarriesIt:
    def test_statistical_result_flags_a_loaded_machine(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Loads 5 -> 7 on 2 cores with 1 thread: flagged, held open, the figures on the result."""
        _loads(monkeypatch, [5.0, 7.0])
        clock = FakeClock()
        m = measure_speedup(
            clock.arm(0.002),
            clock.arm(0.001),
            ((), {}),
            4,
            ProfilingConfig(looks=(10, 20), threads=1),
            timer=clock,
        )
        r = m.result
        assert "oversubscribed" in r.flags
        assert (r.threads, r.cpus, r.load_avg_start, r.load_avg_end) == (1, 2, 5.0, 7.0)
        assert r.interop_threads == torch.get_num_interop_threads()
        assert r.verdict == "inconclusive"  # no verdict from a busy machine (issue 36)
        assert "machine_busy" in r.flags and "load 7.0 on 2 cores" in r.reason
        assert r.estimate == pytest.approx(2.0)  # the numbers themselves are untouched

    def test_quiet_machine_is_not_flagged(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Loads 0.4 -> 1.0 on 2 cores with 1 thread: no flag."""
        _loads(monkeypatch, [0.4, 1.0])
        clock = FakeClock()
        r = measure_speedup(
            clock.arm(0.002),
            clock.arm(0.001),
            ((), {}),
            4,
            ProfilingConfig(looks=(10, 20), threads=1),
            timer=clock,
        ).result
        assert "oversubscribed" not in r.flags
        assert (r.load_avg_start, r.load_avg_end) == (0.4, 1.0)

    def test_point_rule_too(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """AITune's point rule carries the same figures and flag."""
        _loads(monkeypatch, [3.0])
        clock = FakeClock()
        r = measure_speedup(
            clock.arm(0.002),
            clock.arm(0.001),
            ((), {}),
            4,
            ProfilingConfig(decision="point", point_steps=5, point_warmup_calls=1, threads=1),
            timer=clock,
        ).result
        assert "oversubscribed" in r.flags
        assert (r.threads, r.load_avg_start, r.load_avg_end) == (1, 3.0, 3.0)

    def test_round_trips_through_the_event(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """The new fields travel in candidate_measured and validate against the schema."""
        _loads(monkeypatch, [5.0, 7.0])
        clock = FakeClock()
        r = measure_speedup(
            clock.arm(0.002), clock.arm(0.001), ((), {}), 4, CONFIG, timer=clock
        ).result
        record = to_record(
            CandidateMeasured(run_id="0" * 16, module_name="m", result=r, duration_s=1.0).to_event()
        )
        jsonschema.validate(record, event_schema())
        from tests.factories import result_of

        assert result_of(record) == r


class TestStartedEvent:
    def test_builder_fields_validate(self) -> None:
        """started carries the threads, OMP, cores and load; the schema accepts them."""
        env = CpuEnvironment(
            threads=2, interop_threads=2, omp_num_threads=None, cpus=2, load_avg_1m=0.5
        )
        event = Started(
            run_id="0" * 16,
            module_name="m",
            strategy="S",
            device="cpu",
            decision="statistical",
            min_speedup_threshold_percent=1.0,
            required_speedup=1.01,
            batch_size=4,
            **env.to_fields(),
        ).to_event()
        record = to_record(event)
        jsonschema.validate(record, event_schema())
        assert (record["threads"], record["interop_threads"], record["omp_num_threads"]) == (
            2,
            2,
            None,
        )
        assert (record["cpus"], record["load_avg_1m"]) == (2, 0.5)
        bad = {**record, "threads": 0}
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, event_schema())

    def test_a_tune_emits_them(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """A real tune's started event says the threads the config asks for and the load."""
        from aitune_fp.pipeline.strategies import OneBackendStrategy
        from aitune_fp.testing import capture_events
        from tests.validation_helpers import FAST_CONFIG, Pruned, gated, make_case

        _loads(monkeypatch, [0.75], cpus=2)
        config = ProfilingConfig(**{**FAST_CONFIG.to_dict(), "threads": 1})
        module, spec, data = make_case()
        with capture_events() as entries:
            gated(OneBackendStrategy(Pruned()), profiling_config=config).tune(
                module, "m", spec, data, "cpu", tmp_path
            )
        started = next(e for e in entries if e["event"].endswith(".started"))
        assert (started["threads"], started["cpus"], started["load_avg_1m"]) == (1, 2, 0.75)


class TestTableHeader:
    def _report(self, **fields: Any) -> TuneReport:
        result = flat_result("C()", 2.0, 1.0, 2.0, True, **fields)
        return TuneReport(run_id="r", module_name="m", results=(result,), decision="statistical")

    def _text(self, report: TuneReport) -> str:
        out = io.StringIO()
        print_parts(Console(file=out, width=200, no_color=True), render_run(report, verbose=True))
        return out.getvalue()

    def test_threads_and_load_line(self) -> None:
        """The header names the threads (intra-op, inter-op, OMP), the cores and the loads."""
        text = self._text(
            self._report(
                threads=1,
                interop_threads=2,
                omp_num_threads=1,
                cpus=2,
                load_avg_start=0.52,
                load_avg_end=1.1,
                flags=("oversubscribed",),
            )
        )
        line = next(x for x in text.splitlines() if x.startswith("CPU threads:"))
        assert "1 intra-op" in line and "2 inter-op" in line and "OMP_NUM_THREADS=1" in line
        assert "2 cores" in line and "0.52" in line and "1.10" in line
        assert "oversubscribed" in text  # the Quality column (-v)

    def test_no_line_without_figures(self) -> None:
        """Results from older logs (no thread figures) get no such line."""
        assert "CPU threads:" not in self._text(self._report())


class TestTuneFlag:
    def test_threads_reach_the_config(self) -> None:
        """--threads N sets ProfilingConfig.threads (both modes)."""
        assert profiling_config(tune_args(threads=3)).threads == 3
        assert profiling_config(tune_args(threads=2, decision="point")).threads == 2
        assert profiling_config(tune_args()).threads is None

    def test_bad_threads_exit_2(self, capsys: pytest.CaptureFixture[str]) -> None:
        """--threads 0 is one line naming the flag, exit 2, before anything loads."""
        assert main(["tune", "--threads", "0"]) == 2
        err = capsys.readouterr().err
        assert "--threads" in err and "0" in err
        assert len(err.strip().splitlines()) == 1

    def test_tune_applies_threads_once(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """tune calls the shared set_threads with N before the model loads."""
        from aitune_fp.cli import tune as tune_cli
        from aitune_fp.cli._shared import UsageError

        seen: list[int] = []

        def fake_set(n: int) -> None:
            seen.append(n)

        def stop(*args: Any, **kwargs: Any) -> Any:
            raise UsageError("stop here")

        monkeypatch.setattr(tune_cli, "set_threads", fake_set)
        monkeypatch.setattr(tune_cli, "_tune", stop)
        assert main(["tune", "--threads", "2"]) == 2
        assert seen == [2]


class TestSweepSharesThePath:
    def _task(self, **overrides: Any) -> Any:
        from aitune_fp.sweep.spec import parse_sweep
        from aitune_fp.sweep.task import SweepTask

        spec = parse_sweep({"models": ["mlp"]})
        if "profiling" in overrides:
            spec = attrs.evolve(spec, profiling=overrides.pop("profiling"))
        return SweepTask(
            sweep_id="s", model=spec.models[0], spec=spec, cache_dir="/nonexistent", **overrides
        )

    @pytest.mark.parametrize(
        ("overrides", "expected"),
        [
            ({"use_all_cores": True}, [len(os.sched_getaffinity(0))]),
            ({"use_all_cores": True, "profiling": ProfilingConfig(threads=1)}, [1]),
            ({"profiling": ProfilingConfig(threads=2)}, [2]),
            ({}, []),
        ],
    )
    def test_run_task_calls_set_threads(
        self, overrides: dict[str, Any], expected: list[int], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A task sets its threads through the same set_threads as tune --threads."""
        from aitune_fp.sweep import task

        seen: list[int] = []
        monkeypatch.setattr(task, "set_threads", seen.append)

        def boom(task: Any, device: str) -> Any:
            raise RuntimeError("not tuned in this test")

        monkeypatch.setattr(task, "_tune", boom)
        outcome = task.run_task(self._task(**overrides))
        assert not outcome.ok
        assert seen == expected
