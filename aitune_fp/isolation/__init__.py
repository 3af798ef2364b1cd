"""What a candidate must not change, and how it is put back: the process, the user's model and samples.

Process state. A candidate's build and infer run in the user's process. Whatever they change there outlives the
tune (thread counts, backend flags, the default dtype, grad mode), and whatever eager's forward
resolves through (``torch.nn.functional.linear``, ``nn.Module.__call__``, global module hooks,
torch function and dispatch modes, aten kernels) changes eager's speed as well: a candidate that
slows eager down looks faster than it is. :class:`ProcessState` is a cheap snapshot of all of it
(about 1 ms to take and compare: identities and flag values, no copies of callables); :meth:`ProcessState.changed` names
each difference and :meth:`ProcessState.restore` puts it back. :func:`isolated` wraps a block in
both.

Thread-local state (grad, inference and autocast modes, the mode stacks, the default device) is
the calling thread's. Torch setting itself up is not a change: a replacement whose code lives in
torch's own files (``import torch._dynamo`` wraps ``torch.manual_seed``, ``torch.compile`` patches
``nn.Module.__init__``) is neither reported nor undone, and neither is a new submodule attribute.

Parts: :mod:`~aitune_fp.isolation.flags` (the table of torch's process and thread settings, found
by enumerating torch), :mod:`~aitune_fp.isolation.namespaces` (which namespaces' callables are
fingerprinted, and their edits), :mod:`~aitune_fp.isolation.registries` (global module hooks, the
torch function and dispatch mode stacks, the default device, aten kernels) and
:mod:`~aitune_fp.isolation.snapshot` (:class:`ProcessState` over all of them, :func:`isolated`).

Model and samples. A :class:`ModelGuard` is taken before anything runs. It isolates the whole module object rather
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

Parts: :mod:`~aitune_fp.isolation.values` (how a value, a container and a tensor are kept, compared,
described and put back), :mod:`~aitune_fp.isolation.model` (:class:`ModelGuard`, over every submodule)
and :mod:`~aitune_fp.isolation.samples` (:class:`SampleGuard`, over the caller's samples).

Also here: :mod:`~aitune_fp.isolation.exclusive` (one tune per module object at a time) and
:mod:`~aitune_fp.isolation.heldout` (the inputs a candidate never saw before it is timed) and
:mod:`~aitune_fp.isolation.domain` (held-out inputs beyond the recorded envelope).
"""

from __future__ import annotations

from aitune_fp.isolation.model import ModelGuard
from aitune_fp.isolation.namespaces import NAMESPACES
from aitune_fp.isolation.samples import SampleGuard
from aitune_fp.isolation.snapshot import Isolation, ProcessState, isolated

__all__ = ["NAMESPACES", "Isolation", "ModelGuard", "ProcessState", "SampleGuard", "isolated"]
