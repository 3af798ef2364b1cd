"""What every ``aitune-fp`` command shares: exit codes, the usage error, safe text, consoles.

No torch here (``check`` and ``report`` start fast); ``rich`` is imported only by the CLI.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import sys
from collections.abc import Iterator
from typing import IO, Any

from rich.console import Console

from aitune_fp.errors import AitunefpError

PROG = "aitune-fp"
EXIT_OK = 0
#: ``check``: not met / not faster; any command: an unexpected failure (traceback saved).
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_INCONCLUSIVE = 3
#: stdout closed by the reader (``| head``): 128 + SIGPIPE, as a shell reports a killed writer.
EXIT_BROKEN_PIPE = 141


class UsageError(AitunefpError):
    """A usage or input error: reported as one line on stderr with exit code 2."""


_BIDI = {0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A)}


def _unsafe(code: int) -> bool:
    return code < 0x20 or 0x7F <= code <= 0x9F or code in _BIDI


def escape_control(text: str) -> str:
    r"""``text`` with control, C1 and bidi-override characters escaped (``\x1b``, ``\n``, ...).

    For strings that come from user code or a log (module names, backend descriptions, reasons)
    so they cannot move the cursor, recolour, or reorder what the terminal shows.
    """
    if not any(_unsafe(ord(ch)) for ch in text):
        return text
    out: list[str] = []
    for ch in text:
        code = ord(ch)
        if code < 0x20 or 0x7F <= code <= 0x9F:
            out.append({"\n": "\\n", "\r": "\\r", "\t": "\\t"}.get(ch, f"\\x{code:02x}"))
        elif code in _BIDI:
            out.append(f"\\u{code:04x}")
        else:
            out.append(ch)
    return "".join(out)


def json_text(document: Any) -> str:
    r"""One JSON document: UTF-8 text, finite numbers only, terminal-unsafe characters escaped.

    ``json.dumps`` escapes C0 controls itself but passes DEL, C1 (U+009B opens an escape
    sequence on some terminals) and bidi overrides (U+202E) through raw; they are written as
    ``\uXXXX`` here, which any JSON reader decodes to the same string. A non-finite number is a
    ``ValueError`` (it would not be JSON).
    """
    text = json.dumps(document, ensure_ascii=False, allow_nan=False)
    if not any(_unsafe(ord(ch)) for ch in text):
        return text
    return "".join(f"\\u{ord(ch):04x}" if _unsafe(ord(ch)) else ch for ch in text)


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
    """A rich console on ``stream``: colour per rich (``NO_COLOR``, ``FORCE_COLOR``, TTY or not).

    Markup, emoji codes and highlighting are off: text from user code is printed as it is (after
    :func:`escape_control`), never interpreted. Not a terminal: ``COLUMNS`` or 160 columns.
    """
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
