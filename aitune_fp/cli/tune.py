"""``aitune-fp tune``: validate candidate backends against eager on a model (the main job)."""

from __future__ import annotations

import argparse
import contextlib
import tempfile
from pathlib import Path
from typing import IO, Any

from aitune_fp.backends import registry
from aitune_fp.cli._shared import (
    EXIT_OK,
    EXIT_USAGE,
    PROG,
    UsageError,
    escape_control,
    json_text,
    make_console,
    stdout_to_stderr,
    usage_errors,
)
from aitune_fp.cli.check import check_threshold_arg
from aitune_fp.cli.plain import print_parts
from aitune_fp.cli.progress import JsonLines, TuneProgress, configure_logging
from aitune_fp.cli.rendering import markdown_run, not_tried, render_run, run_dict
from aitune_fp.cli.tune_args import (
    accuracy_options,
    add_arguments,
    config_flags,
    profiling_config,
    strategy_settings,
)
from aitune_fp.core._checks import comma_items
from aitune_fp.core.config import needs_cuda
from aitune_fp.errors import InvalidValueError
from aitune_fp.events.sending import open_log
from aitune_fp.events.sending import sinks as event_sinks
from aitune_fp.profiling.threads import omp_threads, set_threads, too_many_threads, usable_cpus


def _parse_shape(text: str) -> tuple[int, ...]:
    try:
        shape = tuple(int(x) for x in comma_items(text, ",x"))
    except ValueError as exc:  # an empty item says which; a word is quoted whole
        why = f": {exc}" if isinstance(exc, InvalidValueError) else f", got {text!r}"
        raise UsageError(f"--input-shape must look like 8,256{why}") from None
    if any(d < 1 for d in shape):
        raise UsageError(f"--input-shape must be positive integers, got {text!r}")
    return shape


def _backend_names(text: str | None, device: str, *, auto: bool) -> list[str]:
    """The candidate names; with ``auto``, a name for another device is kept (unavailable)."""
    if text is None:
        return list(registry.default_backends(device))
    with usage_errors((InvalidValueError,), "--backends"):
        names = comma_items(text)
    for n in names:
        try:
            registry.check_backend(n, device)
        except registry.BackendChoiceError as exc:
            if not (auto and n in registry.BACKENDS):
                raise UsageError(f"--backends: {exc}") from exc
    return names


def _resolve_device(text: str) -> str:
    import torch

    if text == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if text == "cpu":
        return "cpu"
    if text == "cuda" or text.startswith("cuda:"):
        if not torch.cuda.is_available():
            raise UsageError(f"--device {text} asked for CUDA but no CUDA device is available")
        index = text.partition(":")[2]
        if index and (not index.isdigit() or int(index) >= torch.cuda.device_count()):
            raise UsageError(
                f"--device {text}: no such CUDA device ({torch.cuda.device_count()} present)"
            )
        return text
    raise UsageError(f"--device must be auto, cpu, cuda or cuda:N, got {text!r}")


def _load_model(args: argparse.Namespace) -> Any:
    from aitune_fp.models import UserModelError, at_batch_size, check_source, load_model

    with usage_errors((UserModelError,)):
        check_source(args.model, args.input_shape is not None, "--model", "--input-shape")
        shape = _parse_shape(args.input_shape) if args.input_shape is not None else None
        model = load_model(args.model, input_shape=shape)
        if args.batch_size is not None:
            model = at_batch_size(model, args.batch_size, name="--batch-size")
    return model


def _preflight(model: Any, device: str, args: argparse.Namespace, cache_dir: Path) -> None:
    """Call eager once on the tune's batch: a failure, or an output not comparable, is a UsageError."""
    import torch

    from aitune_fp.backends.eager import TorchEagerBackend
    from aitune_fp.core.messages import one_line
    from aitune_fp.correctness.compare import check_comparable
    from aitune_fp.correctness.failures import CorrectnessError
    from aitune_fp.pipeline.values import on_device

    spec = model.graph_spec
    try:
        (sample,) = on_device([model.sample], device)  # the tune moves it the same way
        batch = spec.make_batch(sample, spec.get_max_batch_size())
        eager = TorchEagerBackend().build(
            model.module, spec, [model.sample], device, cache_dir / "preflight"
        )
        with torch.no_grad():
            output = batch.call(eager)
    except Exception as exc:
        given = f" (--input-shape {args.input_shape})" if args.input_shape else ""
        raise UsageError(
            f"the eager baseline failed on this model and input{given}: "
            f"{type(exc).__name__}: {one_line(exc)} (log under {cache_dir})"
        ) from exc
    try:
        check_comparable(output)
    except CorrectnessError as exc:
        raise UsageError(
            f"eager's output on this model cannot be compared with a candidate's: {one_line(exc)}"
        ) from exc


def _cache_dir(text: str | None) -> Path:
    if text is None:
        return Path(tempfile.mkdtemp(prefix="aitune_fp-"))
    path = Path(text)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot create --cache-dir {text!r}: {exc.strerror}") from exc
    return path


def forks_from_server(isolation: str | None, device: str, threads: int | None) -> bool:
    """Whether this tune's workers start from the fork server: CPU workers of several threads."""
    several = (threads or omp_threads() or usable_cpus()) > 1
    return isolation != "in_process" and not device.startswith("cuda") and several


def run(args: argparse.Namespace, out: IO[str], err: IO[str]) -> int:
    """Run ``tune`` with parsed ``args``; return its exit code."""
    config = profiling_config(args)
    if config.threads is not None:  # before torch loads: the sweep's code path too
        if (problem := too_many_threads(config.threads, "--threads")) is not None:
            raise UsageError(problem)
        set_threads(config.threads)
    if forks_from_server(args.isolation, args.device, config.threads):
        from aitune_fp.profiling.serving import start_fork_server

        start_fork_server()  # its preload runs beside this process's imports
    accuracy = accuracy_options(args)
    options = strategy_settings(args)
    threshold = check_threshold_arg(args.threshold, err)
    try:
        json_log = None if args.json_log is None else open_log(args.json_log)
    except OSError as exc:
        raise UsageError(f"cannot write --json-log {args.json_log!r}: {exc.strerror}") from exc
    with json_log or contextlib.nullcontext():
        return _tune(args, config, threshold, accuracy, options, json_log, out, err)


def _tune(
    args: argparse.Namespace,
    config: Any,
    threshold: float,
    accuracy: dict[str, Any],
    options: dict[str, Any],
    json_log: IO[str] | None,
    out: IO[str],
    err: IO[str],
) -> int:
    from aitune_fp.pipeline.strategy_registry import check_backends
    from aitune_fp.pipeline.values import describe
    from aitune_fp.sweep.task import tune_model

    device = _resolve_device(args.device)
    if (need := needs_cuda(config, device)) is not None:
        field, value, why = need
        raise UsageError(
            f"{config_flags()[field]} {value} needs a CUDA device ({why}); "
            f"the tune runs on {device}"
        )
    names = _backend_names(args.backends, device, auto=args.device == "auto")
    with usage_errors((InvalidValueError,)):
        check_backends(args.strategy, names)
    model = _load_model(args)
    cache_dir = _cache_dir(args.cache_dir)
    with stdout_to_stderr():
        _preflight(model, device, args, cache_dir)
    if model.was_training:  # after the pre-flight: a failing tune still says one line
        err.write(f"note: {args.model} came in training mode; it is validated in eval mode\n")
    # a backend this machine cannot run (no CUDA, a missing extra) is recorded as unavailable
    backends = [registry.make_candidate(n, device) for n in names]
    console = make_console(err)
    progress = TuneProgress(console, quiet=args.quiet, candidates=[describe(b) for b in backends])
    sinks = [progress] + ([JsonLines(json_log)] if json_log is not None else [])
    configure_logging()  # structlog prints nothing: the sinks show and write the events
    if not args.quiet:
        console.print(
            f"{PROG}: tuning {escape_control(model.name)} on {device} "
            f"({', '.join(names)}; {args.strategy}; {config.decision}; cache {cache_dir})"
        )
    with stdout_to_stderr(), progress, event_sinks(*sinks):
        report, error = tune_model(
            model, model.name, backends, args.strategy, options, device, cache_dir,
            threshold=threshold, profiling=config, accuracy=accuracy, isolation=args.isolation,
        )  # fmt: skip
    skipped = not_tried(report, [describe(b) for b in backends], args.strategy)
    if args.format == "json":
        doc: dict[str, Any] = {
            "command": "tune",
            "cache_dir": str(cache_dir),
            "run": run_dict(report, baseline_at=progress.baseline_at, not_tried=skipped),
        }
        if error is not None:
            doc["error"] = str(error)
        out.write(json_text(doc) + "\n")
    else:
        message = None if error is None else str(error)
        shown = {"baseline_at": progress.baseline_at, "not_tried": skipped, "verbose": args.verbose}
        if args.format == "markdown":
            out.write(markdown_run(report, error=message, **shown))
        else:
            print_parts(make_console(out), render_run(report, error=message, **shown))
    out.flush()
    if report.baseline_error and not report.disabled:
        err.write(
            f"{PROG}: error: the eager baseline failed on this model and input: "
            f"{escape_control(report.baseline_error)} (log under {cache_dir})\n"
        )
        return EXIT_USAGE
    return EXIT_OK


def add_parser(sub: Any) -> None:
    """Add the ``tune`` subcommand to ``sub``."""
    add_arguments(sub).set_defaults(func=run)
