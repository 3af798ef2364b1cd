"""The local executor: a sweep's tasks one after another on this machine, each killable."""

from __future__ import annotations

import multiprocessing
import multiprocessing.connection
import time
from collections.abc import Callable, Sequence

from aitune_fp.profiling.serving import fork_server
from aitune_fp.sweep.task import (
    CRASHED,
    SweepTask,
    TaskOutcome,
    failed_outcome,
    hung_outcome,
    run_task,
    safe,
)

#: What a child process sends instead of an outcome when a KeyboardInterrupt ended its task.
_INTERRUPTED = "interrupted"


def _child_main(conn: multiprocessing.connection.Connection, task: SweepTask) -> None:
    """A task's child process: run it, send its outcome (or that Ctrl-C stopped it) back."""
    try:
        result: TaskOutcome | str = run_task(task)
    except KeyboardInterrupt:
        result = _INTERRUPTED
    conn.send(result)
    conn.close()


def _stop(process: multiprocessing.process.BaseProcess) -> None:
    """End a child process: SIGTERM, then SIGKILL if it is still there 5 s later."""
    if process.is_alive():
        process.terminate()
        process.join(5.0)
    if process.is_alive():
        process.kill()
    process.join()


class LocalExecutor:
    """Runs the tasks one after another here; one with a deadline in a child killed at it."""

    name = "local"

    def __init__(self, *, in_process: bool = False) -> None:
        """``in_process``: run every task in this process, deadlines ignored."""
        self.in_process = in_process

    def run(self, tasks: Sequence[SweepTask], on_outcome: Callable[[TaskOutcome], None]) -> None:
        """Run each task in turn (a Ctrl-C stops at the task in progress, killing its process)."""
        for task in tasks:
            if self.in_process or task.task_timeout_s is None:
                on_outcome(run_task(task))
            else:
                on_outcome(self._in_child(task, task.task_timeout_s))

    @staticmethod
    def _in_child(task: SweepTask, timeout_s: float) -> TaskOutcome:
        context = fork_server()
        receive, send = context.Pipe(duplex=False)
        process = context.Process(
            target=_child_main, args=(send, task), name=f"aitune_fp-task-{safe(task.model.name)}"
        )
        try:
            process.start()
            send.close()  # the child holds the only writer: its death reads as end of file
            deadline = time.monotonic() + timeout_s
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    return hung_outcome(task)
                ready = multiprocessing.connection.wait([receive, process.sentinel], left)
                if receive in ready:
                    try:
                        result = receive.recv()
                    except EOFError:
                        break
                    if result == _INTERRUPTED:
                        raise KeyboardInterrupt
                    assert isinstance(result, TaskOutcome)
                    return result
                if process.sentinel in ready and not receive.poll():
                    break
        finally:
            _stop(process)
            send.close()
            receive.close()
        return failed_outcome(
            task,
            CRASHED,
            f"the task's process died unexpectedly (exit code {process.exitcode})",
        )
