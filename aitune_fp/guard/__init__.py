"""The user's model and samples, guarded: what a tune must leave unchanged, and how to put it back.

A :class:`ModelGuard` is taken before anything runs. It isolates the whole module object rather
than a list of known edits: for every submodule it keeps the class and the entire instance
``__dict__``. Plain values (numbers, strings, dtypes, devices, tuples of them) are kept by value;
dicts, lists and sets (``_modules``, ``_parameters``, ``_buffers``, every hook dict, a user's own
containers) by the object and a shallow copy of what they hold; anything else by identity. Every
tensor it reaches (parameters, buffers, tensors held in an attribute or one container deep) is
kept by identity with a host copy of its values, its dtype, shape and ``requires_grad``, so a
candidate that swaps one (as in-place quantization does), writes into it, casts it, flips its
``requires_grad``, adds a hook or an attribute, or replaces ``forward`` or ``__class__`` is found
and undone. Device moves are not changes: the tune itself moves the module.

A :class:`SampleGuard` does the same for the caller's samples: every tensor in them, nested ones
too, and the mutable lists and dicts that hold them.

Parts: :mod:`~aitune_fp.guard.values` (how a value, a container and a tensor are kept, compared,
described and put back), :mod:`~aitune_fp.guard.model` (:class:`ModelGuard`, over every submodule)
and :mod:`~aitune_fp.guard.samples` (:class:`SampleGuard`, over the caller's samples).
"""

from __future__ import annotations

from aitune_fp.guard.model import ModelGuard
from aitune_fp.guard.samples import SampleGuard

__all__ = ["ModelGuard", "SampleGuard"]
