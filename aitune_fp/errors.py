"""The library's exceptions: one base, :class:`AitunefpError`, with the specific errors under it.

Every error aitune_fp raises on purpose is an :class:`AitunefpError`, so callers can catch the
library's errors in one clause. Each specific error also subclasses the builtin it stands for
(``ValueError``, ``TypeError``, ``RuntimeError``), so code written against the builtins keeps
working. The rule for bad arguments: the wrong kind of value (a str where a number is wanted, a
bool where an int is wanted, None where a value is required) is an :class:`InvalidTypeError`;
the right kind with a bad value (NaN, infinity, negative, out of range, not one of the choices)
is an :class:`InvalidValueError`.

Errors that belong to one subsystem live next to it and derive from :class:`AitunefpError` too:
``CorrectnessError`` (aitune_fp.correctness), ``ProfilingError`` (aitune_fp.profiling),
``UserModelError`` (aitune_fp.models) and the CLI's ``UsageError``.

Pure: importing this module imports nothing else.
"""

from __future__ import annotations

__all__ = [
    "AitunefpError",
    "BackendFailedError",
    "BackendUnavailableError",
    "CandidateHungError",
    "InvalidStateError",
    "InvalidTypeError",
    "InvalidValueError",
    "error_name",
]


class AitunefpError(Exception):
    """Base of every error aitune_fp raises on purpose: catch it to catch them all."""


class InvalidValueError(AitunefpError, ValueError):
    """An argument or field has the right type but a bad value (NaN, out of range, unknown name)."""


class InvalidTypeError(AitunefpError, TypeError):
    """An argument or field has the wrong type (str for a number, bool for an int, None)."""


class InvalidStateError(AitunefpError, RuntimeError):
    """An object was used in a state that does not allow the call (e.g. outside its ``with``)."""


class BackendUnavailableError(AitunefpError, RuntimeError):
    """A backend cannot run here: an optional package is missing, or the device it needs is absent.

    Not the model's fault and not a bug: validation records the candidate as ``unavailable`` with
    this message as the reason, and moves on.
    """


class CandidateHungError(AitunefpError, RuntimeError):
    """A step of a candidate ran past its deadline and was interrupted (stage ``hung``)."""


class BackendFailedError(AitunefpError, RuntimeError):
    """A built backend could not run a call it should serve (a capture or a recompile failed).

    Raised from inference; validation records the candidate's failure at the stage it happened.
    """


def error_name(exc: BaseException) -> str:
    """The class name of what was raised; an error raised in a worker names the original.

    (its ``error_type``), so a failure reads as it would have in one process.
    """
    named = getattr(exc, "error_type", None)
    return named if isinstance(named, str) and named else type(exc).__name__
