"""The library's exceptions, pure: base ``AitunefpError``, each specific one also its builtin's."""

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
    """A backend cannot run here: an optional package is missing, or the device it needs is absent."""


class CandidateHungError(AitunefpError, RuntimeError):
    """A step of a candidate ran past its deadline and was interrupted (stage ``hung``)."""


class BackendFailedError(AitunefpError, RuntimeError):
    """A built backend could not run a call it should serve (a capture or a recompile failed)."""


def error_name(exc: BaseException) -> str:
    """The class name of what was raised; an error raised in a worker names the original."""
    named = getattr(exc, "error_type", None)
    return named if isinstance(named, str) and named else type(exc).__name__
