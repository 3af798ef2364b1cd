"""What a tune must not change (the model, the caller's samples, the process), as one value."""

from __future__ import annotations

import sys
import threading

import attrs
import torch

from aitune_fp.isolation.model import ModelGuard
from aitune_fp.isolation.samples import SampleGuard
from aitune_fp.isolation.snapshot import ProcessState
from aitune_fp.pipeline.values import (
    ModelChangedError,
    ProcessChangedError,
    TuneTarget,
    has_lazy,
)

#: The project's own modules that decide and measure: a candidate that rebinds one of their
#: functions (a patched verdict) is a change to the process like a patched torch function.
_JUDGES = ("aitune_fp.core.", "aitune_fp.measure.", "aitune_fp.profiling.", "aitune_fp.pipeline.")


@attrs.frozen(eq=False)
class Guards:
    """Snapshots of model, samples and process; the tune's thread; the model's modes to restore."""

    model: ModelGuard | None
    samples: SampleGuard
    process: ProcessState
    thread: int
    was_training: tuple[torch.nn.Module, ...]

    @classmethod
    def take(cls, target: TuneTarget) -> Guards:
        """Put the model in eval mode and snapshot what the tune must not change."""
        module = target.module
        was_training = tuple(ModelGuard.training_modules(module))
        if was_training:
            module.eval()
        return cls(
            model=None if has_lazy(module) else ModelGuard(module),
            samples=SampleGuard(target.data),
            process=process_state(target),
            thread=threading.get_ident(),  # the tune's thread (the watchdog's is another)
            was_training=was_training,
        )

    def settled(self, target: TuneTarget) -> Guards:
        """Snapshot again after eager's first calls (a lazy model has its parameters then)."""
        model = self.model
        if model is None or model.changed() is not None:
            model = ModelGuard(target.module)
        return attrs.evolve(self, model=model, process=process_state(target))

    def changed(self) -> ModelChangedError | ProcessChangedError | None:
        """The error to record when the model, the samples or the process changed (restored)."""
        if threading.get_ident() == self.thread:  # grad mode and friends are per thread
            changes = self.process.changed()
            if changes:
                unrestored = self.process.restore()
                shown = "; ".join(changes[:4]) + (
                    f"; and {len(changes) - 4} more" if len(changes) > 4 else ""
                )
                kept = f" (could not be restored: {'; '.join(unrestored)})" if unrestored else ""
                return ProcessChangedError(
                    f"the candidate changed the process: {shown}; it was restored{kept}"
                )
        what = self.samples.changed()
        if what is not None:
            self.samples.restore()
            return ModelChangedError(
                f"the candidate changed the caller's samples: {what}; they were restored"
            )
        what = None if self.model is None else self.model.changed()
        if what is None or self.model is None:
            return None
        self.model.restore()
        return ModelChangedError(f"the candidate changed the model: {what}; the model was restored")


def process_state(target: TuneTarget) -> ProcessState:
    """The process state a candidate must leave alone, including the model's classes and our judges.

    A patched model class would reach eager's private copy; a patched judge would fake a verdict.
    """
    own = {type(m) for m in target.module.modules() if not type(m).__module__.startswith("torch.")}
    judges = [m for name, m in sorted(sys.modules.items()) if name.startswith(_JUDGES)]
    return ProcessState.capture(extra=[*sorted(own, key=repr), *judges])
