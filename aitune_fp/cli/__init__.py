"""``aitune-fp``: tune, check, report, sweep; results on stdout, progress on stderr."""

from __future__ import annotations

import argparse
import contextlib
import difflib
import os
import signal
import sys
import tempfile
import threading
import traceback
from collections.abc import Iterator, Sequence
from types import FrameType
from typing import Any

from aitune_fp.cli import check, report, sweep, tune
from aitune_fp.cli._shared import (
    EXIT_BROKEN_PIPE,
    EXIT_FAILURE,
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    PROG,
    UsageError,
    escape_control,
)

#: The signals raised as :class:`Terminated` while a command runs.
SIGNALS = (signal.SIGTERM, signal.SIGHUP)


class Terminated(KeyboardInterrupt):
    """A SIGTERM or SIGHUP arrived; the command exits with ``128 + signum``, as a shell reports."""

    def __init__(self, signum: int) -> None:
        """Name the signal: ``str()`` is ``SIGTERM`` or ``SIGHUP``."""
        super().__init__(signal.Signals(signum).name)
        self.signum = signum

    @property
    def exit_code(self) -> int:
        """128 + the signal's number: what a shell reports for a process the signal ended."""
        return 128 + self.signum


class Received:
    """The exit code of whichever of :data:`SIGNALS` arrived while the guard was on (None: none)."""

    exit_code: int | None = None


@contextlib.contextmanager
def terminate_as_interrupt() -> Iterator[Received]:
    """While the block runs, SIGTERM and SIGHUP raise Terminated in the main thread (once).

    So a tune kills its workers and closes its log with ``finished``; the library never installs this.
    """
    received = Received()
    if threading.current_thread() is not threading.main_thread():
        yield received
        return

    def handler(signum: int, frame: FrameType | None) -> None:
        received.exit_code = 128 + signum
        for each in SIGNALS:
            if signal.getsignal(each) is handler:
                signal.signal(each, signal.SIG_DFL)
        raise Terminated(signum)

    saved = {each: signal.getsignal(each) for each in SIGNALS}
    try:
        for each, before in saved.items():
            if before is not signal.SIG_IGN:
                signal.signal(each, handler)
        yield received
    finally:
        for each, before in saved.items():
            signal.signal(each, before if before is not None else signal.SIG_DFL)


class _Parser(argparse.ArgumentParser):
    """argparse with errors as :class:`UsageError` (one line, exit 2) instead of sys.exit.

    A shortened flag is not taken for the one it begins (a typo would run a whole tune).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        """argparse's, without abbreviations."""
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> Any:
        """Raise instead of printing usage and exiting."""
        raise UsageError(f"{message} (see {self.prog} --help)")

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> tuple[Any, list[str]]:
        """argparse's, an unknown flag refused by this (sub)command, naming a close one it has."""
        parsed, extras = super().parse_known_args(args, namespace)
        if extras:
            flags = [
                o for a in self._actions if a.help != argparse.SUPPRESS for o in a.option_strings
            ]
            typed = next((e.partition("=")[0] for e in extras if e.startswith("-")), "")
            close = difflib.get_close_matches(typed, flags, n=1)
            meant = f"; did you mean {close[0]}?" if close else ""
            self.error(f"unrecognized arguments: {' '.join(extras)}{meant}")
        return parsed, extras


def build_parser() -> argparse.ArgumentParser:
    """The ``aitune-fp`` argument parser (subcommands tune, check, report, sweep)."""
    from aitune_fp import __version__

    parser = _Parser(
        prog=PROG,
        description="Is a compiled PyTorch inference backend really faster than eager? "
        "Measure, then decide.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(
        dest="command", metavar="{tune,check,report,sweep}", parser_class=_Parser
    )
    for command in (tune, check, report, sweep):
        command.add_parser(sub)
    return parser


def _save_traceback() -> str:
    fd, path = tempfile.mkstemp(prefix="aitune_fp-error-", suffix=".log")
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(traceback.format_exc())
    return path


def _silence_stdout() -> None:
    """After a broken pipe: point fd 1 at /dev/null so the exit-time flush cannot fail again."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``aitune-fp`` with ``argv`` (default ``sys.argv[1:]``); return the exit code."""
    out, err = sys.stdout, sys.stderr
    try:
        with terminate_as_interrupt() as received:
            parser = build_parser()
            args = parser.parse_args(argv)
            if args.command is None:
                parser.print_help(err)
                return EXIT_USAGE
            code: int = args.func(args, out, err)
            out.flush()
        if code == EXIT_INTERRUPTED and received.exit_code is not None:
            return received.exit_code  # a sweep that caught the interrupt: the signal's code
        return code
    except BrokenPipeError:
        _silence_stdout()
        return EXIT_BROKEN_PIPE
    except UsageError as exc:
        print(f"{PROG}: error: {escape_control(str(exc))}", file=err)
        return EXIT_USAGE
    except Terminated as exc:
        print(f"{PROG}: terminated by {exc}", file=err)
        return exc.exit_code
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=err)
        return EXIT_INTERRUPTED
    except Exception as exc:
        path = _save_traceback()
        print(
            f"{PROG}: unexpected error: {type(exc).__name__}: {escape_control(str(exc))[:300]} "
            f"(traceback saved to {path})",
            file=err,
        )
        return EXIT_FAILURE
