"""SIGTERM and SIGHUP end a tune as Ctrl-C does: workers gone, ``finished`` last, exit 128 + signal.

End to end through ``python -m aitune_fp tune`` in a subprocess (a real signal, real workers),
and the command line's signal guard on its own (in this process: fast).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from aitune_fp.cli import Terminated, main, terminate_as_interrupt

ROOT = Path(__file__).resolve().parents[1]
ENV = {
    **os.environ,
    "NO_COLOR": "1",
    "PYTHONIOENCODING": "utf-8",
    "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
}

#: A model whose every call takes 30 ms: a comparison's first look (10 pairs) takes over half
#: a second, so a signal sent when timing begins lands while the workers are timed.
SLOW_MODEL = """
import time
import torch


class Slow(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(16, 16)

    def forward(self, x):
        time.sleep(0.03)
        return self.fc(x)


def factory():
    return Slow().eval(), torch.randn(4, 16)
"""


def _lines(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    text = path.read_text("utf-8")
    complete = text[: text.rfind("\n") + 1]  # a line still being written is left for later
    return [json.loads(line) for line in complete.splitlines() if line.strip()]


def _children(pid: int) -> set[int]:
    """The live descendants of ``pid`` (read from /proc)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()
        parents[int(entry.name)] = int(fields[1])
    found: set[int] = set()
    frontier = {pid}
    while frontier:
        frontier = {p for p, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def _alive(pid: int) -> bool:
    """Whether ``pid`` exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2] != "Z"


def _wait_for(predicate: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def _signal_self(signum: int) -> None:
    """Send ``signum`` to this process and wait for it (a handler that raises ends the wait)."""
    os.kill(os.getpid(), signum)
    time.sleep(5)


def _timing_started(log: Path) -> bool:
    """A candidate (not eager) entered its ``measure`` phase."""
    return any(
        e["event"] == "aitune_fp.validation.phase"
        and e.get("phase") == "measure"
        and e.get("backend_description") != "eager baseline"
        for e in _lines(log)
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    ("signum", "named"),
    [
        (signal.SIGTERM, "Terminated: SIGTERM"),
        (signal.SIGHUP, "Terminated: SIGHUP"),
        (signal.SIGINT, "KeyboardInterrupt"),  # Ctrl-C, as it was: what the others match
    ],
    ids=["SIGTERM", "SIGHUP", "SIGINT"],
)
def test_a_signal_mid_timing_ends_the_tune_as_ctrl_c_does(
    tmp_path: Path, signum: signal.Signals, named: str
) -> None:
    """The log ends with ``finished`` (interrupted), no worker outlives it, exit 128 + signal."""
    model = tmp_path / "slow_model.py"
    model.write_text(SLOW_MODEL, "utf-8")
    log = tmp_path / "events.jsonl"
    command = [
        sys.executable,
        "-m",
        "aitune_fp",
        "tune",
        "--model",
        f"{model}:factory",
        "--backends",
        "eager",
        "--strategy",
        "one",
        "--max-seconds",
        "60",
        "--json-log",
        str(log),
        "--cache-dir",
        str(tmp_path / "cache"),
    ]
    proc = subprocess.Popen(
        command,
        env=ENV,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # no signal meant for the test's own group reaches it
    )
    try:
        _wait_for(lambda: _timing_started(log) or proc.poll() is not None, 120, "candidate timing")
        assert proc.poll() is None, f"the tune ended before timing: {proc.communicate()[1]}"
        workers = _children(proc.pid)
        assert workers, "no worker process was found while the candidate was timed"
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 128 + signum, (proc.returncode, err)
    events = _lines(log)
    last = events[-1]
    assert last["event"] == "aitune_fp.validation.finished", [e["event"] for e in events[-3:]]
    assert last["outcome"] == "interrupted"
    assert last["reason"] == f"interrupted ({named})"
    assert sum(e["event"] == "aitune_fp.validation.finished" for e in events) == 1
    assert not any(e["event"] == "aitune_fp.validation.candidate_measured" for e in events)
    said = (
        "interrupted" if signum == signal.SIGINT else f"terminated by {signal.Signals(signum).name}"
    )
    assert f"aitune-fp: {said}" in err
    _wait_for(lambda: not any(_alive(p) for p in workers), 10, f"workers {sorted(workers)} to end")


@pytest.mark.slow
def test_sigterm_mid_sweep_records_every_model_and_exits_143(tmp_path: Path) -> None:
    """SIGTERM while a sweep's task runs: its process ends, the rest cancelled, the log closed."""
    from tests.sweep_models import NAP_DIR_ENV

    models = ROOT / "tests" / "sweep_models.py"
    naps = tmp_path / "naps"
    naps.mkdir()
    spec = tmp_path / "s.toml"
    spec.write_text(
        'backends = ["eager"]\n[budget]\nlooks = [10, 20]\nmax_seconds = 5.0\n'
        f'[[models]]\nmodel = "{models}:napper"\n[[models]]\nmodel = "{models}:tiny"\n',
        "utf-8",
    )
    log = tmp_path / "e.jsonl"
    proc = subprocess.Popen(
        [sys.executable, "-m", "aitune_fp", "sweep", str(spec), "--log", str(log), "-q"],
        env={**ENV, NAP_DIR_ENV: str(naps)},  # the napper naps 60 s: it is mid-task when signalled
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        _wait_for(lambda: any(naps.iterdir()) or proc.poll() is not None, 120, "the task")
        assert proc.poll() is None, proc.communicate()[1]
        (task,) = (int(p.name.split("-")[1]) for p in naps.iterdir())
        family = _children(proc.pid)
        assert task in family
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 128 + signal.SIGTERM, (proc.returncode, err)
    assert "interrupted: what finished is in" in err
    lines = _lines(log)
    assert lines[-1]["event"] == "aitune_fp.sweep.finished"
    failed = [x for x in lines if x["event"] == "aitune_fp.sweep.task_failed"]
    assert sorted(x["module_name"] for x in failed) == ["napper", "tiny"]
    assert {x["error_type"] for x in failed} == {"Cancelled"}
    assert all("interrupted (SIGTERM)" in x["reason"] for x in failed)
    _wait_for(lambda: not any(_alive(p) for p in family), 10, f"processes {sorted(family)} to end")


class TestGuard:
    """The command line's guard: SIGTERM and SIGHUP raised as :class:`Terminated`."""

    @pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
    def test_raises_terminated_and_restores_the_handlers(self, signum: signal.Signals) -> None:
        """The signal unwinds as an interrupt naming it; the old handlers are back after."""
        before = signal.getsignal(signum)
        with pytest.raises(Terminated) as raised, terminate_as_interrupt():
            _signal_self(signum)
        assert isinstance(raised.value, KeyboardInterrupt)
        assert raised.value.signum == signum
        assert raised.value.exit_code == 128 + signum
        assert str(raised.value) == signal.Signals(signum).name
        assert signal.getsignal(signum) is before

    def test_an_ignored_hangup_stays_ignored(self) -> None:
        """Under ``nohup`` (SIGHUP ignored) a hang-up does not end the command."""
        before = signal.signal(signal.SIGHUP, signal.SIG_IGN)
        try:
            with terminate_as_interrupt():
                os.kill(os.getpid(), signal.SIGHUP)
                time.sleep(0.05)
            assert signal.getsignal(signal.SIGHUP) == signal.SIG_IGN
        finally:
            signal.signal(signal.SIGHUP, before)

    def test_main_exits_128_plus_the_signal(
        self, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
    ) -> None:
        """A signal while a command runs: one line naming it on stderr, exit 128 + signal."""
        from aitune_fp.cli import report

        def signalled(*args: Any) -> int:
            _signal_self(signal.SIGTERM)
            return 0

        monkeypatch.setattr(report, "run", signalled)
        log = tmp_path / "e.jsonl"
        log.write_text("", "utf-8")
        assert main(["report", str(log)]) == 128 + signal.SIGTERM
        assert "SIGTERM" in capsys.readouterr().err
