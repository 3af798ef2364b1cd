"""``aitune-fp``: tune, check, report, sweep; results on stdout, progress on stderr."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
import traceback
from collections.abc import Sequence
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
from aitune_fp.cli.signals import Terminated, terminate_as_interrupt


class _Parser(argparse.ArgumentParser):
    """argparse with errors as :class:`UsageError` (one line, exit 2) instead of sys.exit."""

    def error(self, message: str) -> Any:
        """Raise instead of printing usage and exiting."""
        raise UsageError(f"{message} (see {self.prog} --help)")


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
