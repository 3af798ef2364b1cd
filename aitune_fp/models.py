"""Embedded models for the main job (``aitune-fp tune``), and loading a user's model."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, Literal, cast

import attrs

from aitune_fp.core.config import MAX_BATCH
from aitune_fp.errors import InvalidTypeError, InvalidValueError
from aitune_fp.inputs import GraphSpec, Sample, as_sample
from aitune_fp.profiling.recipe import import_file

if TYPE_CHECKING:
    import torch

DEFAULT_MODEL = "mlp"


class UserModelError(InvalidValueError):
    """A user's model file or factory could not give a module and a sample (input error)."""


@attrs.frozen(kw_only=True, eq=False)
class EmbeddedModel:
    """A module to tune, the sample it is called with, and how that sample is batched."""

    name: str
    module: torch.nn.Module
    sample: Sample
    graph_spec: GraphSpec
    #: The factory returned it in training mode (it is put in eval mode: say so).
    was_training: bool = False


def _generator(seed: int) -> torch.Generator:
    import torch

    return torch.Generator().manual_seed(seed)


@contextlib.contextmanager
def _private_rng() -> Iterator[None]:
    """Build modules without consuming the caller's global CPU RNG (it is restored afterwards)."""
    import torch

    with torch.random.fork_rng(devices=[]):
        yield


def _seeded_init(module: torch.nn.Module, seed: int) -> None:
    """Re-initialise every parameter from a private generator (deterministic, global RNG untouched)."""
    import torch

    gen = _generator(seed)
    with torch.no_grad():
        for param in module.parameters():
            if param.dim() > 1:
                bound = (6.0 / (param.shape[0] + param.shape[1])) ** 0.5
                param.copy_(torch.rand(param.shape, generator=gen) * 2 * bound - bound)
            else:
                param.copy_(torch.randn(param.shape, generator=gen) * 0.02)


def _finish(
    name: str, module: torch.nn.Module, shape: Sequence[int], max_batch_size: int
) -> EmbeddedModel:
    import torch

    _seeded_init(module, seed=0)
    module.eval()
    example = torch.randn(tuple(shape), generator=_generator(1))
    return EmbeddedModel(
        name=name,
        module=module,
        sample=Sample((example,)),
        graph_spec=GraphSpec(max_batch_size=max_batch_size),
    )


def mlp() -> EmbeddedModel:
    """The default: a 256 -> 1024 -> 1024 -> 256 GELU MLP at batch 32 (about 100 MFLOP a call)."""
    from torch import nn

    with _private_rng():
        module = nn.Sequential(
            nn.Linear(256, 1024),
            nn.GELU(),
            nn.Linear(1024, 1024),
            nn.GELU(),
            nn.Linear(1024, 256),
        )
    return _finish("mlp", module, (4, 256), max_batch_size=32)


def convnet() -> EmbeddedModel:
    """A small conv net on 3x32x32 images at batch 8: two conv/ReLU/pool stages and a classifier."""
    from torch import nn

    with _private_rng():
        module = nn.Sequential(
            nn.Conv2d(3, 32, kernel_size=3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(32, 64, kernel_size=3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Flatten(),
            nn.Linear(64 * 8 * 8, 10),
        )
    return _finish("convnet", module, (2, 3, 32, 32), max_batch_size=8)


def transformer() -> EmbeddedModel:
    """One transformer encoder block (d_model 128, 4 heads, FF 256) on 8 sequences of 32 tokens."""
    from torch import nn

    with _private_rng():
        module = nn.TransformerEncoderLayer(
            d_model=128, nhead=4, dim_feedforward=256, dropout=0.0, batch_first=True
        )
    return _finish("transformer", module, (2, 32, 128), max_batch_size=8)


#: Embedded models by name (``aitune-fp tune --model NAME``).
MODELS: Mapping[str, Callable[[], EmbeddedModel]] = {
    "mlp": mlp,
    "convnet": convnet,
    "transformer": transformer,
}


#: What a model spec's target is: a Python file, or a module importable from ``sys.path``.
SourceKind = Literal["file", "module"]


def model_source(spec: str) -> tuple[SourceKind, str, str]:
    """Split ``target:factory`` into ``(kind, target, factory)``; nothing is imported."""
    if not isinstance(spec, str):
        raise InvalidTypeError(
            f"spec must be a str 'path/to/file.py:factory' or 'package.module:factory', "
            f"got {spec!r}"
        )
    target, sep, factory = spec.rpartition(":")
    if not sep or not target or not factory:
        raise UserModelError(
            "model spec must look like 'path/to/file.py:factory' or 'package.module:factory', "
            f"got {spec!r}"
        )
    if not factory.isidentifier():
        raise UserModelError(f"factory name in {spec!r} is not a Python identifier: {factory!r}")
    separators = [s for s in (os.sep, os.altsep, "/") if s]
    if target.endswith(".py") or any(s in target for s in separators):
        return "file", target, factory
    if all(part.isidentifier() for part in target.split(".")):
        return "module", target, factory
    raise UserModelError(
        f"{target!r} in {spec!r} is neither a path/to/file.py nor a module name (package.module)"
    )


def _import_file(path: str) -> Any:
    if not os.path.isfile(path):
        raise UserModelError(f"model file not found: {path!r}")
    try:
        user = import_file(f"aitune_fp_user_model_{uuid.uuid4().hex}", path)
    except Exception as exc:
        raise UserModelError(
            f"importing model file {path!r} failed: {type(exc).__name__}: {exc}{_extra_hint(exc)}"
        ) from exc
    if user is None:
        raise UserModelError(f"cannot import {path!r} as a Python file")
    return user


#: Packages a model file may need that one of this project's extras installs.
_EXTRAS: Final = {"transformers": "hf", "onnxruntime": "onnx", "onnx": "onnx"}


def _extra_hint(exc: BaseException) -> str:
    """`` (pip install 'aitune-fp[hf]')`` when ``exc`` is a missing package an extra installs."""
    missing = (getattr(exc, "name", None) or "").split(".")[0]
    if not isinstance(exc, ModuleNotFoundError) or missing not in _EXTRAS:
        return ""
    return f" (pip install 'aitune-fp[{_EXTRAS[missing]}]')"


def _import_module(name: str) -> Any:
    """Import ``name`` from ``sys.path``; a module that is not there says how to make it so."""
    try:
        return importlib.import_module(name)
    except Exception as exc:
        missing = (isinstance(exc, ModuleNotFoundError) and exc.name) or ""
        if missing and (name == missing or name.startswith(f"{missing}.")):
            raise UserModelError(
                f"cannot import module {name!r} for the model: no module named {missing!r} "
                "(install it, or put the folder holding it on PYTHONPATH; a file is given as "
                "path/to/file.py:factory)"
            ) from exc
        raise UserModelError(
            f"importing model module {name!r} failed: {type(exc).__name__}: {exc}{_extra_hint(exc)}"
        ) from exc


def resolve_factory(spec: str) -> Callable[[], Any]:
    """Import the file or module ``spec`` names and return its factory, without calling it."""
    kind, target, factory_name = model_source(spec)
    if kind == "file":
        user, where = _import_file(target), f"model file {target!r}"
    else:
        user, where = _import_module(target), f"module {target!r}"
    factory = getattr(user, factory_name, None)
    if factory is None:
        raise UserModelError(f"{where} has no factory named {factory_name!r}")
    if not callable(factory):
        raise UserModelError(f"{factory_name!r} in {where} is not callable")
    return cast("Callable[[], Any]", factory)


def _to_sample(value: object, spec: str) -> Sample:
    import torch

    if isinstance(value, torch.Tensor):
        return Sample((value,))
    if isinstance(value, tuple) and value and all(isinstance(v, torch.Tensor) for v in value):
        return Sample(value)
    try:
        return as_sample(value)
    except TypeError as exc:
        raise UserModelError(
            f"factory {spec!r} returned a sample that is not a tensor, a tuple of tensors, "
            f"a Sample or an (args, kwargs) pair: {type(value).__name__}"
        ) from exc


def checked_shape(input_shape: object, name: str = "input_shape") -> tuple[int, ...]:
    """``input_shape`` as a tuple of positive ints, else a UserModelError naming ``name``."""
    if isinstance(input_shape, (str, bytes)) or not isinstance(input_shape, Sequence):
        raise UserModelError(
            f"{name} must be a sequence of ints like [8, 256], got {input_shape!r}"
        )
    dims = tuple(input_shape)
    if not dims or any(isinstance(d, bool) or not isinstance(d, int) or d < 1 for d in dims):
        raise UserModelError(f"{name} must be positive ints like [8, 256], got {input_shape!r}")
    return dims


def load_user_model(
    spec: str,
    *,
    input_shape: Sequence[int] | None = None,
    max_batch_size: int | None = None,
) -> EmbeddedModel:
    """Import ``path/file.py:factory`` or ``package.module:factory``; call it for the module."""
    import torch

    factory_name = model_source(spec)[2]
    factory = resolve_factory(spec)
    try:
        made = factory()
    except Exception as exc:
        raise UserModelError(f"factory {spec!r} raised {type(exc).__name__}: {exc}") from exc
    sample: Sample | None = None
    if isinstance(made, tuple) and len(made) == 2:
        module, sample = made[0], _to_sample(made[1], spec)
    else:
        module = made
    if not isinstance(module, torch.nn.Module):
        raise UserModelError(
            f"factory {spec!r} must return a torch.nn.Module or (module, sample), "
            f"got {type(made).__name__}"
        )
    if sample is None:
        if input_shape is None:
            raise UserModelError(
                f"factory {spec!r} returned only a module: give --input-shape (e.g. 8,256) "
                "or return (module, sample)"
            )
        shape = checked_shape(input_shape)
        sample = Sample((torch.randn(shape, generator=_generator(1)),))
    elif input_shape is not None:
        raise UserModelError(f"factory {spec!r} returned its own sample: drop --input-shape")
    if max_batch_size is None:
        first = next((v for _, v in sample.items() if isinstance(v, torch.Tensor)), None)
        max_batch_size = int(first.shape[0]) if first is not None and first.dim() > 0 else 1
    if (
        isinstance(max_batch_size, bool)
        or not isinstance(max_batch_size, int)
        or max_batch_size < 1
    ):
        raise UserModelError(f"max_batch_size must be an int >= 1, got {max_batch_size!r}")
    was_training = any(m.training for m in module.modules())
    module.eval()
    return EmbeddedModel(
        name=factory_name,
        module=module,
        sample=sample,
        graph_spec=GraphSpec(max_batch_size=max_batch_size),
        was_training=was_training,
    )


def check_source(spec: str, shaped: bool, model: str = "model", shape: str = "input_shape") -> None:
    """Refuse a ``spec`` naming no model, or a shape for an embedded one (names as spelled)."""
    if spec in MODELS and shaped:
        raise UserModelError(
            f"{shape} applies only to a user model (file.py:factory or package.module:factory), "
            f"not to the embedded {spec!r}"
        )
    if spec not in MODELS and ":" not in spec:
        raise UserModelError(
            f"{model} must be one of {', '.join(MODELS)}, path/to/file.py:factory or "
            f"package.module:factory, got {spec!r}"
        )


def load_model(spec: str, *, input_shape: Sequence[int] | None = None) -> EmbeddedModel:
    """The model ``spec`` names: an embedded one, a file's factory or a module's factory."""
    if not isinstance(spec, str):
        raise InvalidTypeError(f"model must be a str, got {spec!r}")
    check_source(spec, input_shape is not None)
    if spec in MODELS:
        return MODELS[spec]()
    return load_user_model(spec, input_shape=input_shape)


def at_batch_size(model: EmbeddedModel, rows: int, *, name: str = "batch_size") -> EmbeddedModel:
    """``model`` whose sample is tiled to ``rows`` along its batch axis; a problem names ``name``."""
    spec = model.graph_spec
    if isinstance(rows, bool) or not isinstance(rows, int) or not 1 <= rows <= MAX_BATCH:
        raise UserModelError(f"{name} must be an integer from 1 to {MAX_BATCH}, got {rows!r}")
    if rows != spec.max_batch_size and spec.batch_dim(model.sample) is None:
        raise UserModelError(
            f"{name} {rows}: {model.name}'s sample has no batched tensor input (a tensor whose "
            "first dimension is the batch), so its batch cannot change"
        )
    if rows < spec.min_batch_size:
        raise UserModelError(
            f"{name} must be >= {model.name}'s smallest batch ({spec.min_batch_size}), got {rows}"
        )
    return attrs.evolve(model, graph_spec=attrs.evolve(spec, max_batch_size=rows))
