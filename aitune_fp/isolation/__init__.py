"""The process state a candidate backend may change: snapshotted, compared and put back.

A candidate's build and infer run in the user's process. Whatever they change there outlives the
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
"""

from __future__ import annotations

from aitune_fp.isolation.namespaces import NAMESPACES
from aitune_fp.isolation.snapshot import Isolation, ProcessState, isolated

__all__ = ["NAMESPACES", "Isolation", "ProcessState", "isolated"]
