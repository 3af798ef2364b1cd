"""What a tune must not change: the model, the caller's samples and the process state.

Kept from the tune's start, checked (then restored) after each candidate step.
"""

from __future__ import annotations

import sys
import threading
from typing import TYPE_CHECKING

from aitune_fp.isolation.model import ModelGuard
from aitune_fp.isolation.samples import SampleGuard
from aitune_fp.isolation.snapshot import ProcessState
from aitune_fp.pipeline.values import (
    ModelChangedError,
    ProcessChangedError,
    has_lazy,
)

if TYPE_CHECKING:
    from aitune_fp.pipeline.tune import TuneSession


def take_model(session: TuneSession) -> None:
    """Put the model in eval mode and snapshot what the tune must not change (once).

    ``open`` does it; a driver whose library runs the model before ``open`` (AITune
    profiles eager in its ``_pre_tune``) calls it first. ``finish`` gives the model back.
    """
    if session.taken:
        return
    session.taken = True
    module = session.target.module
    session.was_training = ModelGuard.training_modules(module)
    if session.was_training:
        module.eval()
    session.guard = None if has_lazy(module) else ModelGuard(module)
    session.sample_guard = SampleGuard(session.target.data)
    session.thread = threading.get_ident()  # the tune's thread (the watchdog's is another)
    session.process = process_state(session)


def settle_guard(session: TuneSession) -> None:
    """After eager's first calls, snapshot again if eager itself changed the model.

    A lazily initialised model gets its parameters then: that state is the one candidates
    must leave alone.
    """
    if session.guard is None or session.guard.changed() is not None:
        session.guard = ModelGuard(session.target.module)
    session.process = process_state(session)  # what eager's first calls set up is the state


#: The project's own modules that decide and measure: a candidate that rebinds one of their
#: functions (a patched verdict) is a change to the process like a patched torch function.
_JUDGES = ("aitune_fp.core.", "aitune_fp.measure.", "aitune_fp.profiling.", "aitune_fp.pipeline.")


def process_state(session: TuneSession) -> ProcessState:
    """The process state a candidate must leave alone, with the model's classes and our judges.

    The project's modules that judge it (a patched verdict), and the model's own classes: a candidate that patches the user's class (its ``forward``) reaches eager's
    private copy too.
    """
    own = {
        type(m)
        for m in session.target.module.modules()
        if not type(m).__module__.startswith("torch.")
    }
    judges = [m for name, m in sorted(sys.modules.items()) if name.startswith(_JUDGES)]
    return ProcessState.capture(extra=[*sorted(own, key=repr), *judges])


def model_changed(session: TuneSession) -> ModelChangedError | ProcessChangedError | None:
    """The error to record when the model, the caller's samples or the process changed.

    Whatever changed is restored; the process to its state at the start of the tune.
    """
    if session.process is not None and threading.get_ident() == session.thread:
        changes = session.process.changed()  # grad mode and friends are per thread
        if changes:
            unrestored = session.process.restore()
            shown = "; ".join(changes[:4]) + (
                f"; and {len(changes) - 4} more" if len(changes) > 4 else ""
            )
            kept = f" (could not be restored: {'; '.join(unrestored)})" if unrestored else ""
            return ProcessChangedError(
                f"the candidate changed the process: {shown}; it was restored{kept}"
            )
    if session.sample_guard is not None:
        what = session.sample_guard.changed()
        if what is not None:
            session.sample_guard.restore()
            return ModelChangedError(
                f"the candidate changed the caller's samples: {what}; they were restored"
            )
    what = None if session.guard is None else session.guard.changed()
    if what is None:
        return None
    assert session.guard is not None
    session.guard.restore()
    return ModelChangedError(f"the candidate changed the model: {what}; the model was restored")
