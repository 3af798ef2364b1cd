"""The errors a correctness check raises: the candidate is wrong, or eager itself failed."""

from __future__ import annotations

import functools
from typing import Any, Literal, TypeAlias, get_args

from aitune_fp.core._checks import check_choice
from aitune_fp.core.mismatch import Mismatch
from aitune_fp.errors import AitunefpError, InvalidTypeError

#: The checks a :class:`CorrectnessError` can name.
#: ``device``, ``requires_grad`` and ``aliasing`` (an output overwritten by the next call) are
#: the output contract beside the values: a caller gets what eager would have given it.
CheckName: TypeAlias = Literal[
    "finite",
    "structure",
    "shape",
    "dtype",
    "device",
    "requires_grad",
    "aliasing",
    "inputs",
    "values",
    "type",
    "exception",
]
CHECKS: tuple[CheckName, ...] = get_args(CheckName)


class CorrectnessError(AitunefpError, RuntimeError):
    """A candidate's outputs disagree with the eager reference (or the candidate call failed)."""

    def __init__(
        self,
        message: str,
        *,
        path: str,
        check: CheckName,
        sample_index: int | None = None,
        batch_size: int | None = None,
        mismatch: Mismatch | None = None,
    ) -> None:
        """Record the output ``path`` and the ``check`` that failed next to the message."""
        check_choice("check", check, CHECKS)
        if mismatch is not None and not isinstance(mismatch, Mismatch):
            raise InvalidTypeError(f"mismatch must be a Mismatch or None, got {mismatch!r}")
        super().__init__(message)
        self.path = path
        self.check: CheckName = check
        self.sample_index = sample_index
        self.batch_size = batch_size
        self.mismatch = mismatch

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickle with the keyword attributes (exceptions pickle only ``args`` by default)."""
        keywords = {k: getattr(self, k) for k in ("path", "check", "sample_index", "batch_size")}
        return functools.partial(CorrectnessError, mismatch=self.mismatch, **keywords), (str(self),)


class ReferenceFailedError(AitunefpError, RuntimeError):
    """The eager reference itself failed on a sample, so nothing can be compared."""
