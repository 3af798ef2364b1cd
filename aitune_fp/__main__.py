"""``python -m aitune_fp``: the same command line as the ``aitune-fp`` console script."""

from __future__ import annotations

from aitune_fp.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
