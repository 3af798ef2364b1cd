"""``BackendBase``: the lifecycle every built-in backend shares (build once, then active/inactive).

A backend writes only ``_build`` and ``_infer`` (``_deactivate``/``_activate`` to release state).
"""

from __future__ import annotations

import gc
import hashlib
import inspect
import json
import time
import traceback
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, ClassVar, TypeVar

import attrs
import torch

from aitune_fp._tree import module_device
from aitune_fp.backends.protocol import Backend, BackendState
from aitune_fp.backends.support import (
    config_value_to_json,
    cuda_unavailable_reason,
    safe_folder_name,
)
from aitune_fp.correctness.tolerances import Tolerances
from aitune_fp.errors import (
    BackendUnavailableError,
    InvalidStateError,
    InvalidTypeError,
    InvalidValueError,
)
from aitune_fp.inputs import check_samples

if TYPE_CHECKING:
    from aitune_fp.inputs import GraphSpec, Sample

__all__ = [
    "BUILD_LOG_NAME",
    "ArtefactChangedError",
    "BackendBase",
    "Build",
    "ModuleBackend",
    "UnavailableBackend",
    "artefact_digest",
]

#: Name of the per-backend build log inside ``cache_dir/<key()>/``.
BUILD_LOG_NAME = "build.log"

_BackendT = TypeVar("_BackendT", bound="BackendBase")


def _describe_value(value: Any) -> str:
    """Render a JSON config value the way AITune's describe() does: bare, no quotes."""
    if isinstance(value, (list, dict)):
        return json.dumps(value, sort_keys=True, separators=(",", ":"))
    return str(value)


@attrs.frozen
class Build:
    """What :meth:`BackendBase.build` hands ``_build``: the module, its spec, samples, device."""

    module: torch.nn.Module
    graph_spec: GraphSpec
    data: list[Sample]
    device: torch.device


class BackendBase:
    """Base class with the backend lifecycle; subclasses implement ``_build`` and ``_infer``."""

    # Class-level defaults (a subclass need not call ``super().__init__()``); name-mangled so a
    # subclass attribute such as ``self._state`` or ``self._device`` can never clash with them.
    __state: BackendState = BackendState.INIT
    __device: torch.device | None = None
    __tolerances: Tolerances | None = None
    __build_dir: Path | None = None

    #: The accuracy budget this backend's transformation is expected to keep against eager, or
    #: None for the library's default tiers (exact up to float rounding). Reduced precision and
    #: int8 backends declare a wider one, with the reason in their docstring.
    default_tolerances: ClassVar[Tolerances | None] = None
    _dtype: torch.dtype | None = None

    # ---- what subclasses implement -------------------------------------------------------

    def _config(self) -> dict[str, Any]:
        """Return the options of this backend (constructor argument names -> values)."""
        return {}

    def _build(self, given: Build) -> None:
        """Prepare inference for ``module`` on ``device`` (the state is handled by the base)."""
        raise NotImplementedError(f"{type(self).__name__} must implement _build")

    def _infer(self, *args: Any, **kwargs: Any) -> Any:
        """Run one inference call; only called while active."""
        raise NotImplementedError(f"{type(self).__name__} must implement _infer")

    #: The file (in :attr:`build_dir`) a build writes that holds all it built; None: none.
    artefact_name: ClassVar[str | None] = None

    def artefact(self) -> Path | None:
        """The file its build wrote that holds all it built (None: none; it is rebuilt instead)."""
        if self.artefact_name is None or self.__build_dir is None:
            return None
        return self.__build_dir / self.artefact_name

    def _load_artefact(self, given: Build) -> None:
        """Take what a build of this backend (in another process) left in :meth:`artefact`."""
        raise InvalidStateError(f"{type(self).__name__} saves no artefact to load")

    def _activate(self) -> None:
        """Re-acquire what ``_deactivate`` released (default: nothing to do)."""

    def _deactivate(self) -> None:
        """Release compiled or captured state (default: nothing to do)."""

    @property
    def dtype(self) -> torch.dtype | None:
        """The reduced (autocast) dtype the backend computes in (``_dtype``), or None."""
        return self._dtype

    def unavailable_reason(self, device: torch.device | str) -> str | None:
        """Why this backend cannot run on ``device`` on this machine, or None when it can."""
        return cuda_unavailable_reason(torch.device(device))

    def _default_tolerances(self) -> Tolerances | None:
        """The budget of this configuration (default: the class's ``default_tolerances``)."""
        return self.default_tolerances

    @property
    def build_dir(self) -> Path | None:
        """The folder in the cache dir for this backend (build log, files it writes); None before."""
        return self.__build_dir

    @property
    def tolerances(self) -> Tolerances | None:
        """The accuracy budget the correctness checks use: the user's override, else the default."""
        return self.__tolerances if self.__tolerances is not None else self._default_tolerances()

    @tolerances.setter
    def tolerances(self, value: Tolerances | None) -> None:
        if value is not None and not isinstance(value, Tolerances):
            raise InvalidTypeError(f"tolerances must be a Tolerances or None, got {value!r}")
        self.__tolerances = value

    # ---- configuration -------------------------------------------------------------------

    @property
    def name(self) -> str:
        """The backend's name: its class name."""
        return type(self).__name__

    def to_dict(self) -> dict[str, Any]:
        """Return ``{"backend": name, "config": {...}}``, JSON-ready."""
        config = {key: config_value_to_json(key, value) for key, value in self._config().items()}
        return {"backend": self.name, "config": config}

    def __defaults(self) -> dict[str, Any]:
        """Return the JSON form of the constructor's defaults, read from its signature."""
        defaults: dict[str, Any] = {}
        try:
            parameters = inspect.signature(type(self).__init__).parameters
        except (TypeError, ValueError):  # pragma: no cover - builtins without a signature
            return defaults
        for name, parameter in parameters.items():
            if parameter.default is not inspect.Parameter.empty:
                try:
                    defaults[name] = config_value_to_json(name, parameter.default)
                except (TypeError, ValueError):
                    continue
        return defaults

    def describe(self) -> str:
        """Return ``"ClassName(k=v,...)"`` listing only options that differ from their defaults."""
        defaults = self.__defaults()
        config = self.to_dict()["config"]
        changed = [
            f"{key}={_describe_value(value)}"
            for key, value in config.items()
            if key not in defaults or defaults[key] != value
        ]
        return f"{self.name}({','.join(changed)})"

    def key(self) -> str:
        """Return ``"ClassName_<10 hex>"``: a hash of the JSON configuration (stable, path-safe)."""
        payload = json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))
        digest = hashlib.sha256(payload.encode("utf-8")).hexdigest()[:10]
        return f"{safe_folder_name(self.name)}_{digest}"

    def __repr__(self) -> str:
        """Show the description and the lifecycle state."""
        return f"<{self.describe()} state={self.__state.value}>"

    # ---- lifecycle -----------------------------------------------------------------------

    @property
    def state(self) -> BackendState:
        """The lifecycle state."""
        return self.__state

    @property
    def is_active(self) -> bool:
        """True when the backend is built and active (inference allowed)."""
        return self.__state is BackendState.ACTIVE

    @property
    def device(self) -> torch.device | None:
        """The device given to :meth:`build` (None before the build)."""
        return self.__device

    def build(
        self: _BackendT,
        module: torch.nn.Module,
        graph_spec: GraphSpec,
        data: Sequence[Sample],
        device: torch.device | str,
        cache_dir: Path | str,
        *,
        load: str | None = None,
    ) -> _BackendT:
        """Build once for ``module`` and return self, active; log to ``cache_dir/<key()>/build.log``.

        ``load``: the digest of another process's artefact there, loaded instead (refused if it
        differs). On failure: the backend failed, the module back on its device, the error raised.
        """
        if self.__state is not BackendState.INIT:
            raise InvalidStateError(
                f"{self.describe()} was already built (state: {self.__state.value}); build may be "
                "called only once per backend object: create a new backend to build again"
            )
        if not isinstance(module, torch.nn.Module):
            raise InvalidTypeError(
                f"module must be a torch.nn.Module, got {module!r} ({type(module).__name__})"
            )
        check_samples("data", data)
        target = torch.device(device)
        log_dir = Path(cache_dir) / safe_folder_name(self.key())
        log_dir.mkdir(parents=True, exist_ok=True)
        self.__build_dir = log_dir
        original_device = module_device(module)
        given = Build(module, graph_spec, list(data), target)
        self.__state = BackendState.BUILDING
        self.__device = target
        with (log_dir / BUILD_LOG_NAME).open("a", encoding="utf-8") as log:
            log.write(f"\nBackend: {self.describe()}\n")
            log.write(f"Device: {target}\nSamples: {len(given.data)}\n")
            log.flush()
            start = time.perf_counter()
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                try:
                    reason = self.unavailable_reason(target)
                    if reason is not None:
                        raise BackendUnavailableError(f"{self.describe()} is unavailable: {reason}")
                    if load is None:
                        self._build(given)
                    else:
                        found = artefact_digest(self.artefact())
                        if found != load:
                            raise ArtefactChangedError(
                                f"{self.describe()}'s artefact {self.artefact()} changed since "
                                f"it was built and timed (digest {load[:12]}, now {found[:12]})"
                            )
                        self._load_artefact(given)
                        log.write(f"Loaded the artefact {self.artefact()}, not built again\n")
                except BaseException as exc:
                    _write_warnings(log, caught)
                    self.__fail(module, original_device, exc, log)
                    raise
            _write_warnings(log, caught)
            log.write(f"Build succeeded in {time.perf_counter() - start:.3f} s\n")
        self.__state = BackendState.ACTIVE
        return self

    def __fail(
        self,
        module: torch.nn.Module,
        original_device: torch.device | None,
        exc: BaseException,
        log: IO[str],
    ) -> None:
        """Record a failed build, release partial state and return the module to its device."""
        log.write("\nBackend build failed\n")
        log.write(f"Exception type: {type(exc).__name__}\n")
        log.write(f"Exception details: {exc}\n")
        log.write("Full traceback:\n")
        log.write("".join(traceback.format_exception(type(exc), exc, exc.__traceback__)))
        self.__state = BackendState.FAILED
        try:
            self._deactivate()
        except Exception as cleanup_exc:  # keep the original error; note the secondary one
            log.write(f"Cleanup after the failure also failed: {cleanup_exc!r}\n")
        if original_device is not None:
            try:
                module.to(original_device)
            except Exception as move_exc:
                log.write(f"Moving the module back to {original_device} failed: {move_exc!r}\n")
        _release_memory()

    def activate(self) -> None:
        """Make a built, inactive backend active again (a no-op when already active)."""
        if self.__state is BackendState.ACTIVE:
            return
        if self.__state is not BackendState.INACTIVE:
            raise InvalidStateError(
                f"Cannot activate {self.describe()} in state {self.__state.value}: "
                "only a successfully built backend can be activated"
            )
        self._activate()
        self.__state = BackendState.ACTIVE

    def deactivate(self) -> None:
        """Release compiled/captured state; inference is refused until :meth:`activate`."""
        if self.__state in (BackendState.INACTIVE, BackendState.FAILED):
            return
        if self.__state is not BackendState.ACTIVE:
            raise InvalidStateError(
                f"Cannot deactivate {self.describe()} in state {self.__state.value}: build it first"
            )
        try:
            self._deactivate()
        finally:
            self.__state = BackendState.INACTIVE
            _release_memory()

    def infer(self, *args: Any, **kwargs: Any) -> Any:
        """Run inference on one batch; the backend must be built and active."""
        if self.__state is not BackendState.ACTIVE:
            raise InvalidStateError(
                f"Cannot run inference, backend {self.describe()} is not active "
                f"(state: {self.__state.value}); build() or activate() it first"
            )
        return self._infer(*args, **kwargs)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Same as :meth:`infer`."""
        return self.infer(*args, **kwargs)


class ModuleBackend(BackendBase):
    """Compiles or captures the caller's module, moved to the device, at build and at activate."""

    _given: Build | None = None

    def _build(self, given: Build) -> None:
        """Move the module to the device, keep what it was built from, and :meth:`_prepare`."""
        given.module.to(given.device)
        self._given = given
        self._prepare(given)

    def _activate(self) -> None:
        """Move the module back to the build's device (another backend may have moved it)."""
        assert self._given is not None
        self._given.module.to(self._given.device)
        self._prepare(self._given)

    def _prepare(self, given: Build) -> None:
        """Compile or capture what runs ``given.module``, at build and activate (default: none)."""


class ArtefactChangedError(InvalidStateError):
    """The artefact to load is not the one its digest names (rewritten or gone since)."""


def artefact_digest(path: Path | None) -> str:
    """SHA-256 of an artefact file (empty text where there is none)."""
    if path is None or not path.is_file():
        return ""
    digest = hashlib.sha256()
    with path.open("rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _write_warnings(log: IO[str], caught: list[warnings.WarningMessage]) -> None:
    """Append the Python warnings raised during the build to the log."""
    if not caught:
        return
    log.write(f"Warnings during build ({len(caught)}):\n")
    for item in caught:
        log.write(warnings.formatwarning(item.message, item.category, item.filename, item.lineno))


def _release_memory() -> None:
    """Collect garbage and return cached CUDA memory (when CUDA was used)."""
    gc.collect()
    if torch.cuda.is_available() and torch.cuda.is_initialized():  # type: ignore[no-untyped-call]
        torch.cuda.empty_cache()


class UnavailableBackend(BackendBase):
    """Stands for a backend that cannot run here, so that a tune records it as ``unavailable``."""

    def __init__(self, backend: Backend, reason: str) -> None:
        """Carry ``backend``'s description and key, and why it cannot run."""
        if not isinstance(reason, str) or not reason:
            raise InvalidValueError(f"reason must be a non-empty str, got {reason!r}")
        self._description = backend.describe()
        self._key = backend.key()
        self._reason = reason

    def describe(self) -> str:
        """The real backend's description."""
        return self._description

    def key(self) -> str:
        """The real backend's key (its cache folder)."""
        return self._key

    def unavailable_reason(self, device: torch.device | str) -> str | None:
        """Always the reason given."""
        return self._reason
