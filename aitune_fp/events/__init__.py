"""The log events: each kind a frozen payload class registered with its name and level.

Importing the package imports the four modules of kinds, so the registry is always complete.
"""

from aitune_fp.events import baseline, candidates, sweep, validation

__all__ = ["baseline", "candidates", "sweep", "validation"]
