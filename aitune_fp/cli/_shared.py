"""What every ``aitune-fp`` command shares: exit codes, the usage error, safe text, consoles."""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import re
import sys
from collections.abc import Iterator
from typing import IO, Any

from rich.console import Console

from aitune_fp.errors import AitunefpError

PROG = "aitune-fp"
#: Exit codes, one meaning each across commands (docs/cli.md): done (``check``: faster, met) ...
EXIT_OK = 0
#: ... ``check``: not faster, not met ...
EXIT_NOT_MET = 1
#: ... a usage or input error (one line on stderr) ...
EXIT_USAGE = 2
#: ... ``check``: inconclusive ...
EXIT_INCONCLUSIVE = 3
#: ... ``sweep``: a model has no report (the others do) ...
EXIT_PARTIAL = 4
#: ... an unexpected failure, its traceback saved (sysexits' EX_SOFTWARE).
EXIT_FAILURE = 70
#: Ctrl-C: 128 + SIGINT, as a shell reports it (SIGTERM and SIGHUP: 128 + theirs, ``signals``).
EXIT_INTERRUPTED = 130
#: stdout closed by the reader (``| head``): 128 + SIGPIPE, as a shell reports a killed writer.
EXIT_BROKEN_PIPE = 141


class UsageError(AitunefpError):
    """A usage or input error: reported as one line on stderr with exit code 2."""


class OneName(argparse.Action):
    """``store`` (``store_const`` at ``nargs=0``) for a flag with an old name as well.

    Either name alone, or both agreeing, sets the value; disagreeing (the last would win unseen),
    they are refused by name.
    """

    def __call__(
        self, parser: Any, namespace: argparse.Namespace, values: Any, option: str | None = None
    ) -> None:
        """Set the value; raise a UsageError naming both if another name set it differently."""
        value = self.const if self.nargs == 0 else values
        now = (option, value, option if self.nargs == 0 else f"{option} {value}")
        seen = getattr(parser, "_aitune_fp_said", None)  # this parse's: (namespace, dest -> now)
        if seen is None or seen[0] is not namespace:
            seen = (namespace, {})
            parser._aitune_fp_said = seen
        said: dict[str, tuple[Any, ...]] = seen[1]
        before = said.setdefault(self.dest, now)
        if before[0] != option and before[1] != value:
            old, new = (now, before) if self.help == argparse.SUPPRESS else (before, now)
            raise UsageError(
                f"{old[2]} (an old name of {new[0]}) disagrees with {new[2]}: give {new[0]} alone"
            )
        said[self.dest] = now
        setattr(namespace, self.dest, value)


@contextlib.contextmanager
def usage_errors(
    kinds: tuple[type[Exception], ...] = (TypeError, ValueError), flag: str = ""
) -> Iterator[None]:
    """Within the block, an error of ``kinds`` (a bad value) is a UsageError led by ``flag``."""
    try:
        yield
    except kinds as exc:
        raise UsageError(f"{flag}: {exc}" if flag else str(exc)) from exc


#: Control (C0, DEL, C1) and bidi-override characters: never written raw to a terminal.
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escaped(match: re.Match[str]) -> str:
    ch = match.group()
    code = ord(ch)
    if code <= 0x9F:
        return _NAMED.get(ch, f"\\x{code:02x}")
    return f"\\u{code:04x}"


def escape_control(text: str) -> str:
    r"""``text`` with control, C1 and bidi-override characters escaped (``\x1b``, ``\n``, ...).

    For text from user code or a log, so it cannot move the cursor, recolour or reorder the terminal.
    """
    return _UNSAFE.sub(_escaped, text)


def json_text(document: Any) -> str:
    r"""One JSON document: UTF-8, finite numbers only, DEL, C1 and bidi overrides written ``\uXXXX``.

    A non-finite number is a ``ValueError`` (it would not be JSON).
    """
    text = json.dumps(document, ensure_ascii=False, allow_nan=False)
    return _UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def finite_arg(flag: str, value: float | None) -> float:
    """``value`` if it is a finite number, else a :class:`UsageError` naming ``flag``."""
    if value is None or not math.isfinite(value):
        raise UsageError(f"{flag} must be a finite number, got {value!r}")
    return value


class _Console(Console):
    """A rich console that lets a broken pipe reach ``main`` (rich's own handler exits 1)."""

    def on_broken_pipe(self) -> None:
        """Stop writing and raise: ``main`` turns it into exit code 141, quietly."""
        self.quiet = True
        raise BrokenPipeError


#: Width of tables written to a file or pipe when ``COLUMNS`` does not say (rich's default, 80, wraps every reason).
PIPE_WIDTH = 160


def make_console(stream: IO[str]) -> Console:
    """A rich console on ``stream``, markup, emoji and highlighting off; 160 wide off a terminal."""
    isatty = getattr(stream, "isatty", None)
    try:
        tty = bool(isatty()) if isatty is not None else False
    except (OSError, ValueError):
        tty = False
    width = None if tty or os.environ.get("COLUMNS", "").isdigit() else PIPE_WIDTH
    return _Console(
        file=stream,
        width=width,
        markup=False,
        emoji=False,
        highlight=False,
        soft_wrap=False,
    )


@contextlib.contextmanager
def stdout_to_stderr() -> Iterator[None]:
    """Send everything written to fd 1 (torch, compilers, subprocesses) to stderr meanwhile."""
    sys.stdout.flush()
    try:
        saved = os.dup(1)
    except OSError:
        with contextlib.redirect_stdout(sys.stderr):
            yield
        return
    try:
        os.dup2(2, 1)
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved, 1)
        os.close(saved)
