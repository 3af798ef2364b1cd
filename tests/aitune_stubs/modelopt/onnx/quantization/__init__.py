"""Import-time placeholder for AITune on CPU (tests only; see tests/aitune_loader.py)."""

from aitune_placeholder import module_getattr as __getattr__  # noqa: F401  (PEP 562)
