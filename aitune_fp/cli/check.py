"""``aitune-fp check``: the pure gate for CI, on two throughputs or two latency files (no torch)."""

from __future__ import annotations

import argparse
import json
import math
from typing import IO, Any

from aitune_fp.cli._shared import (
    EXIT_INCONCLUSIVE,
    EXIT_NOT_MET,
    EXIT_OK,
    PROG,
    UsageError,
    escape_control,
    finite_arg,
    json_text,
    make_console,
    usage_errors,
)
from aitune_fp.cli.rendering import md_cell, md_table
from aitune_fp.cli.rows import fmt_flags
from aitune_fp.cli.tune_args import add_rows
from aitune_fp.core._checks import check_threshold
from aitune_fp.core.messages import (
    fmt_level,
    fmt_speedup_msg_short,
    fmt_throughput_detail,
    ruled_out,
)
from aitune_fp.core.speedup import (
    Gate,
    unreachable_threshold,
)
from aitune_fp.errors import InvalidValueError


def _refuse_constant(name: str) -> float:
    raise InvalidValueError(f"non-finite number {name}")


def parse_times(text: str, source: str = "input") -> list[float]:
    """Latencies in seconds: a JSON array, or one number a line (``#`` comments, a BOM skipped).

    A value that is not a finite number > 0 is a :class:`UsageError` naming the line or item.
    """
    text = text.removeprefix("\ufeff")
    name = escape_control(source)
    stripped = text.strip()
    values: list[float] = []
    if stripped.startswith("["):
        try:
            data = json.loads(stripped, parse_constant=_refuse_constant)
        except (ValueError, RecursionError) as exc:
            raise UsageError(f"{name}: not a JSON array of numbers ({exc})") from exc
        if not isinstance(data, list):
            raise UsageError(f"{name}: expected a JSON array of numbers")
        for i, item in enumerate(data):
            if isinstance(item, bool) or not isinstance(item, (int, float)):
                raise UsageError(
                    f"{name}: item {i} is not a number: {escape_control(repr(item))[:40]}"
                )
            try:
                value = float(item)
            except OverflowError:  # an integer too large for a float (a 400-digit one)
                raise UsageError(
                    f"{name}: item {i} is an integer of {len(str(item))} digits, beyond float range"
                ) from None
            values.append(_latency(value, f"{name}: item {i}"))
        return values
    for line_no, line in enumerate(text.splitlines(), start=1):
        item = line.split("#", 1)[0].strip()
        if not item:
            continue
        try:
            value = float(item)
        except ValueError:
            raise UsageError(
                f"{name}: line {line_no} is not a number: {escape_control(item[:40])!r}"
            ) from None
        values.append(_latency(value, f"{name}: line {line_no}"))
    return values


def _latency(value: float, where: str) -> float:
    if not math.isfinite(value):
        raise UsageError(f"{where} is not a finite number: {value!r}")
    if value <= 0:
        raise UsageError(f"{where} is not a latency > 0: {value!r}")
    return value


def _read_times(path: str, flag: str) -> list[float]:
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except (OSError, UnicodeDecodeError) as exc:
        why = getattr(exc, "strerror", None) or exc
        raise UsageError(f"cannot read {flag} {escape_control(path)!r}: {why}") from exc
    values = parse_times(text, source=path)
    if len(values) < 2:
        raise UsageError(
            f"{flag} {escape_control(path)!r} needs at least 2 latencies, got {len(values)}"
        )
    return values


def check_threshold_arg(value: float | None, err: IO[str], flag: str = "--threshold") -> float:
    """``--threshold`` as a percent (finite, > -100, reachable); a negative one warned on ``err``."""
    with usage_errors():
        threshold = check_threshold(flag, value)
    if (problem := unreachable_threshold(flag, threshold)) is not None:
        raise UsageError(problem)
    warning = threshold_warning(threshold, flag)
    if warning is not None:
        err.write(f"{PROG}: warning: {warning}\n")
    return threshold


def threshold_warning(threshold: float, flag: str = "--threshold") -> str | None:
    """The warning for a negative threshold (it accepts slower candidates), else None."""
    if threshold >= 0:
        return None
    return f"{flag} {threshold:.4g} accepts candidates up to {-threshold:.4g} % slower than eager"


def _emit(
    out: IO[str], fmt: str, text: str, doc: dict[str, Any], md: tuple[list[str], list[str]]
) -> None:
    if fmt == "json":
        out.write(json_text({"command": "check", **doc}) + "\n")
        out.flush()
    elif fmt == "markdown":
        head, row = md
        notes = [f"\n> {md_cell(doc['warning'])}"] if doc.get("warning") else []
        out.write("\n".join([md_table(head, [row]), *notes]) + "\n")
        out.flush()
    else:
        make_console(out).print(text)


def _throughputs(args: argparse.Namespace, threshold: float, out: IO[str]) -> int:
    for flag, given in (
        ("--paired", args.paired),
        ("--unpaired", args.unpaired),
        ("--confidence", args.confidence is not None),
    ):
        if given:
            raise UsageError(
                f"{flag} applies to --baseline-times/--candidate-times, not to throughputs"
            )
    if args.baseline is None or args.candidate is None:
        raise UsageError("--baseline and --candidate go together")
    base = finite_arg("--baseline", args.baseline)
    cand = finite_arg("--candidate", args.candidate)
    if base <= 0:
        raise UsageError(f"--baseline must be > 0 samples/s, got {base:.4g}")
    if cand < 0:
        raise UsageError(f"--candidate must be >= 0 samples/s, got {cand:.4g}")
    speedup = cand / base
    if not math.isfinite(speedup):
        raise UsageError(
            f"--candidate / --baseline ({cand:.4g} / {base:.4g}) is too large to compute"
        )
    need = Gate(threshold).required_speedup
    met = speedup >= need
    word = "meets" if met else "misses"
    text = (
        fmt_speedup_msg_short(speedup, fmt_throughput_detail(base, cand))
        + f"\n{word} the {threshold:.4g}% threshold (required speedup {need:.4g}x)"
    )
    doc = {
        "mode": "throughputs",
        "baseline_samples_per_s": base,
        "candidate_samples_per_s": cand,
        "speedup": speedup,
        "min_speedup_threshold_percent": threshold,
        "required_speedup": need,
        "met": met,
    }
    md = (
        ["Result", "Speedup", "Required", "Eager/s", "Candidate/s"],
        [
            "met" if met else "not met",
            f"{speedup:.4g}x",
            f"{need:.4g}x ({threshold:.4g}%)",
            f"{base:.4g}",
            f"{cand:.4g}",
        ],
    )
    _emit(out, args.format, text, doc, md)
    return EXIT_OK if met else EXIT_NOT_MET


def _latencies(args: argparse.Namespace, threshold: float, out: IO[str]) -> int:
    from aitune_fp.core.sequential import decide_speedup

    if args.baseline_times is None or args.candidate_times is None:
        raise UsageError("--baseline-times and --candidate-times go together")
    if args.paired and args.unpaired:
        raise UsageError(
            "--paired and --unpaired conflict: give one (--paired: latency i of both files was "
            "timed together, interleaved; --unpaired: one file was recorded after the other)"
        )
    base = _read_times(args.baseline_times, "--baseline-times")
    cand = _read_times(args.candidate_times, "--candidate-times")
    if args.paired and len(base) != len(cand):
        raise UsageError(
            f"--paired needs as many latencies in --baseline-times ({len(base)}) as in "
            f"--candidate-times ({len(cand)})"
        )
    confidence = 0.95 if args.confidence is None else finite_arg("--confidence", args.confidence)
    if not 0 < confidence < 1:
        raise UsageError(f"--confidence must lie strictly between 0 and 1, got {confidence:.4g}")
    # The decision depends on ratios only: scale both arms by one number so that extreme
    # magnitudes (1e308 s, 1e-300 s) stay inside float range during the computation.
    scale = max(max(base), max(cand))
    base_s, cand_s = [t / scale for t in base], [t / scale for t in cand]
    if min(min(base_s), min(cand_s)) <= 0:
        raise UsageError(
            "the latencies span too many orders of magnitude to compare "
            f"(from {min(min(base), min(cand)):.4g} s to {scale:.4g} s)"
        )
    if args.paired == args.unpaired:
        raise UsageError(
            "say how the latency files were recorded: --paired (latency i of both arms timed "
            "together, interleaved; recommended) or --unpaired (one file recorded after the "
            "other: drift between the two recordings is not controlled, and an identical "
            "candidate was called faster 21 % of the time on a drifting machine)"
        )
    try:
        decision = decide_speedup(
            base_s,
            cand_s,
            threshold,
            confidence=confidence,
            paired=args.paired,
            guard_dependence=args.paired,
        )
    except (ArithmeticError, ValueError) as exc:
        raise UsageError(f"cannot decide on these latencies: {exc}") from exc
    high = "∞" if math.isinf(decision.ci_high) else f"{decision.ci_high:.4f}x"
    excluded = ruled_out(decision)  # its level at the precision it has (core's fmt_level)
    text = (
        f"verdict: {decision.verdict} (speedup {decision.speedup:.4f}x, "
        f"{fmt_level(decision.confidence)} CI [{decision.ci_low:.4f}x, {high}], "
        f"speedup >= {decision.required_speedup:.4g}x needs the lower bound above it; "
        f"n={decision.n_baseline}/{decision.n_candidate}, {decision.method})\n"
        f"{excluded}"
    )
    if decision.flags:
        text += f"\nquality: {fmt_flags(decision.flags)}"
    warning = None
    if args.unpaired:
        warning = (
            "unpaired recordings: the two files were not timed interleaved, so machine drift "
            "between them is not controlled; record with --paired to rely on this verdict"
        )
        text = f"warning: {warning}\n{text}"
    doc = {
        "mode": "latencies",
        "baseline_times": args.baseline_times,
        "candidate_times": args.candidate_times,
        "min_speedup_threshold_percent": threshold,
        "warning": warning,
        **decision.to_dict(),
        "ruled_out": excluded,
    }
    md = (
        ["Verdict", f"Speedup [{fmt_level(decision.confidence)} CI]", "Required", "n", "Ruled out"],
        [
            decision.verdict,
            f"{decision.speedup:.4f}x [{decision.ci_low:.4f}, {high.rstrip('x')}]",
            f"{decision.required_speedup:.4g}x",
            f"{decision.n_baseline}/{decision.n_candidate}",
            excluded,
        ],
    )
    _emit(out, args.format, text, doc, md)
    return {"faster": EXIT_OK, "not_faster": EXIT_NOT_MET}.get(decision.verdict, EXIT_INCONCLUSIVE)


def run(args: argparse.Namespace, out: IO[str], err: IO[str]) -> int:
    """Run ``check`` with parsed ``args``; return its exit code."""
    threshold = check_threshold_arg(args.threshold, err)
    has_tp = args.baseline is not None or args.candidate is not None
    has_times = args.baseline_times is not None or args.candidate_times is not None
    if has_tp == has_times:
        raise UsageError(
            "give either --baseline and --candidate (throughputs) or "
            "--baseline-times and --candidate-times (latency files)"
        )
    if has_tp:
        return _throughputs(args, threshold, out)
    return _latencies(args, threshold, out)


def add_parser(sub: Any) -> None:
    """Add the ``check`` subcommand to ``sub``."""
    check = sub.add_parser(
        "check",
        help="gate two throughputs or two sets of latencies (for CI scripts)",
        description="Exit 0 when the candidate meets the threshold, 1 when not, "
        "3 when timings are inconclusive, 2 on bad input.",
    )
    check.add_argument("--baseline", type=float, help="eager throughput (samples/s)")
    check.add_argument("--candidate", type=float, help="candidate throughput (samples/s)")
    check.add_argument(
        "--baseline-times", help="file of eager latencies (s): one a line, or a JSON array"
    )
    check.add_argument("--candidate-times", help="file of candidate latencies (s)")
    add_rows(check, ("threshold",))
    check.add_argument(
        "--paired",
        action="store_true",
        help="latency files: latency i of both arms timed together, interleaved (recommended)",
    )
    check.add_argument(
        "--unpaired",
        action="store_true",
        help="latency files: recorded one after the other; drift is not controlled (warned)",
    )
    check.add_argument(
        "--confidence",
        type=float,
        help="latency files: two-sided level of the one interval (0.95: each bound one-sided at "
        "97.5 %%; not tune's guarantee over all looks)",
    )
    add_rows(check, ("format",))
    check.set_defaults(func=run)
