"""The correctness check on honest reduced precision and on offset-hiding candidates (issue 49).

For each model (the embedded ones and the examples), ``eager-bf16`` and ``int8-dynamic`` are
built as a tune builds them and checked against eager with ``check_correctness`` on the
recorded sample and its held-out samples (seed 0) in one check as the tune does: with
``--inputs domain`` (the default) the tune's draws across the domain (the near draw, a wide
draw beyond the recorded range, non-contiguous / channels_last / requires-grad variants, ids up
to the embedding table), with ``--inputs near`` the near draw only (before them); the line
gives the verdict and the worst value of each criterion against its budget. Then an
"offset" model (eager = 100 + a small input-dependent signal) is checked against four
candidates: the constant 100, eager's mean over the inputs, the right offset with a wrong
signal, and bf16 of the same model (the honest twin).

Usage: python benchmarks/variation.py [--models mlp,convnet,...] [--backends eager-bf16,...]
"""

from __future__ import annotations

import argparse
import inspect
import tempfile
import time
from collections.abc import Callable
from typing import Any

import torch

from aitune_fp.backends.registry import make_backend
from aitune_fp.correctness.check import check_correctness
from aitune_fp.correctness.failures import CorrectnessError
from aitune_fp.inputs import GraphSpec, Sample
from aitune_fp.isolation.domain import embedding_limits, heldout_domain
from aitune_fp.isolation.heldout import heldout_samples
from aitune_fp.models import load_model
from aitune_fp.pipeline.values import declared_dtype

MODELS = (
    "mlp",
    "convnet",
    "transformer",
    "examples/resnet18.py:factory",
    "examples/gpt2_tiny.py:factory",
    "examples/mobilenet_v2.py:factory",
    "examples/distilbert.py:factory",
    "examples/t5_small_encoder.py:factory",
    "examples/whisper_tiny_encoder.py:factory",
    "examples/vit_b16.py:factory",
    "examples/bert_base.py:factory",
)


def verdict(
    candidate: Callable[..., Any],
    reference: Callable[..., Any],
    spec: GraphSpec,
    data: list[Sample],
    **options: Any,
) -> str:
    """``accepted: <criteria>`` or ``rejected: <reason>`` (the reason cut to its criteria)."""
    if "heldout" in inspect.signature(check_correctness).parameters:
        options.setdefault("heldout", data[1:])
        options.update(heldout_seed=0)
        data = data[:1]
    try:
        found = check_correctness(candidate, reference, spec, data, grad_mode=False, **options)
    except CorrectnessError as err:
        text = str(err)
        return "rejected: " + (text if len(text) < 400 else text[:397] + "...")
    notes = "".join(f"; {note}" for note in getattr(found, "notes", ()))
    if not found.criteria:
        return f"accepted: element-wise, max abs error {found.max_abs_error:.3g}{notes}"
    sign = {"top1_agreement": ">="}
    return (
        "accepted: "
        + "; ".join(
            f"{c.name} {c.value:.3g} {sign.get(c.name, '<=')} {c.budget:.3g}"
            for c in found.criteria
        )
        + notes
    )


def held_out(module: torch.nn.Module, sample: Sample, spec: GraphSpec, inputs: str) -> list[Sample]:
    """The held-out samples: the near draw only (``near``, before issue 49's domain draws), or
    the tune's (``domain``: near, wide, layout and grad draws, ids up to the embedding tables)."""
    if inputs == "near":
        return list(heldout_samples([sample], 0, batch_axes=spec.batch_axes))
    limits = embedding_limits(module, sample)
    return list(heldout_domain([sample], 0, batch_axes=spec.batch_axes, id_limits=limits))


def models(names: list[str], backends: list[str], inputs: str = "domain") -> None:
    """The honest reduced-precision candidates of each model."""
    for name in names:
        loaded = load_model(name)
        spec = loaded.graph_spec
        data = [loaded.sample, *held_out(loaded.module, loaded.sample, spec, inputs)]
        for backend_name in backends:
            start = time.perf_counter()
            with tempfile.TemporaryDirectory() as cache:
                try:
                    built = make_backend(backend_name, "cpu").build(
                        loaded.module, spec, [loaded.sample], "cpu", cache
                    )
                except Exception as exc:
                    line = f"not built: {type(exc).__name__}: {str(exc)[:200]}"
                else:
                    line = verdict(
                        built,
                        loaded.module,
                        spec,
                        data,
                        expected_dtype=declared_dtype(built),
                        tolerances=built.tolerances,
                    )
            took = time.perf_counter() - start
            print(f"| {name} | {backend_name} | {line} | {took:.1f} s |", flush=True)


class Offset(torch.nn.Module):
    """Eager: 100 plus a small input-dependent signal (a linear map of the input, RMS about 0.75)."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(16, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return 100.0 + 1.3 * self.linear(x)


def offsets() -> None:
    """The offset model against the candidates that hide behind its offset, and bf16."""
    torch.manual_seed(0)
    model = Offset().eval()
    spec = GraphSpec(8)
    sample = Sample((torch.randn(8, 16),))
    data = [sample, *heldout_samples([sample], 0)]
    with torch.no_grad():
        mean = torch.cat([model(*s.args) for s in data]).mean(dim=0)
        wrong = Offset().eval()
    half = Offset().eval()
    half.load_state_dict(model.state_dict())
    half = half.to(torch.bfloat16)
    candidates: dict[str, tuple[Callable[..., Any], torch.dtype | None]] = {
        "the constant 100": (lambda x: torch.full((x.shape[0], 8), 100.0), torch.bfloat16),
        "eager's mean over the inputs": (
            lambda x: mean.expand(x.shape[0], 8).clone(),
            torch.bfloat16,
        ),
        "right offset, wrong signal": (lambda x: wrong(x), torch.bfloat16),
        "bf16 of the model (honest)": (lambda x: half(x.bfloat16()), torch.bfloat16),
        "the model itself (honest)": (model, None),
    }
    for label, (candidate, dtype) in candidates.items():
        line = verdict(candidate, model, spec, data, expected_dtype=dtype)
        print(f"| offset model | {label} | {line} |", flush=True)


def main() -> None:
    """Print the table rows."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--backends", default="eager-bf16,int8-dynamic")
    parser.add_argument("--no-offsets", action="store_true")
    parser.add_argument("--inputs", choices=("domain", "near"), default="domain")
    args = parser.parse_args()
    torch.set_num_threads(1)
    if not args.no_offsets:
        offsets()
    if args.models:
        models(args.models.split(","), args.backends.split(","), args.inputs)


if __name__ == "__main__":
    main()
