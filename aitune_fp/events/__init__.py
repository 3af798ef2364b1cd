"""The log events: each kind a frozen payload class registered with its name and level.

Importing the package imports the three modules of kinds, so the registry is always complete.
"""

from aitune_fp.events import candidates, sweep, validation

__all__ = ["candidates", "sweep", "validation"]
