"""One check for the CLI's usage errors, shared by the tests of every flag."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from aitune_fp.cli import main


def usage_error(argv: Sequence[str], capsys: pytest.CaptureFixture[str]) -> str:
    """The one stderr line of ``aitune-fp argv`` refused as a usage error (exit 2, nothing more)."""
    assert main(list(argv)) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err
