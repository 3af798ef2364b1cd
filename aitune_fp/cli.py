"""``aitune-fp``: tune on an embedded model, gate in CI scripts, report from event logs.

The only place logging is configured. ``tune`` sends every aitune_fp event through structlog
processors that drive the progress display (stderr), optionally write JSON lines (``--json-log``),
and never print to stdout: stdout carries only the results (a table, or one JSON document).
Exit codes: 0 done, 1 unexpected failure (traceback saved to a file whose path is printed),
2 usage or input error (one line on stderr), 3 ``check`` was inconclusive.
Top-level imports stay torch-free so ``check`` and ``report`` start fast; ``tune`` imports torch.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import math
import os
import re
import shutil
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator, Mapping, MutableMapping, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from aitune_fp.backends import registry
from aitune_fp.core.config import DECISION_MODES
from aitune_fp.core.messages import (
    ANSI_FASTER,
    ANSI_RESET,
    ANSI_SLOWER,
    fmt_baseline_selected,
    fmt_speedup_msg,
    fmt_speedup_msg_short,
    fmt_throughput_detail,
)
from aitune_fp.core.speedup import compute_speedup, meets_threshold, required_speedup
from aitune_fp.errors import AitunefpError

if TYPE_CHECKING:
    from aitune_fp.core.results import PerformanceValidationResult
    from aitune_fp.ingest import IngestReport, RunSummary

__all__ = [
    "EXIT_FAILURE",
    "EXIT_INCONCLUSIVE",
    "EXIT_OK",
    "EXIT_USAGE",
    "UsageError",
    "build_parser",
    "escape_control",
    "main",
    "parse_times",
    "use_color",
]

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_INCONCLUSIVE = 3

PROG = "aitune-fp"


class UsageError(AitunefpError):
    """A usage or input error: reported as one line on stderr with exit code 2."""


# --------------------------------------------------------------------------------------------
# Terminal helpers (pure)
# --------------------------------------------------------------------------------------------

_BIDI = {0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A)}


def escape_control(text: str) -> str:
    r"""Return ``text`` with control and bidi-override characters escaped (``\x1b``, ``\n``, ...).

    For strings that come from user code (module names, backend descriptions, reasons) so they
    cannot move the cursor, recolour or rewrite the terminal.
    """
    out: list[str] = []
    for ch in text:
        code = ord(ch)
        if code < 0x20 or 0x7F <= code <= 0x9F:
            out.append({"\n": "\\n", "\r": "\\r", "\t": "\\t"}.get(ch, f"\\x{code:02x}"))
        elif code in _BIDI:
            out.append(f"\\u{code:04x}")
        else:
            out.append(ch)
    return "".join(out)


def use_color(stream: Any, environ: Mapping[str, str] | None = None) -> bool:
    """Colour or not: ``NO_COLOR`` (non-empty) disables, ``FORCE_COLOR`` enables, else isatty()."""
    env = os.environ if environ is None else environ
    if env.get("NO_COLOR"):
        return False
    if env.get("FORCE_COLOR"):
        return True
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty()) if isatty is not None else False
    except (OSError, ValueError):
        return False


def _paint(text: str, code: str, color: bool) -> str:
    return f"{code}{text}{ANSI_RESET}" if color else text


def _num(value: float | None, fmt: str = ".2f", suffix: str = "") -> str:
    return "—" if value is None else f"{value:{fmt}}{suffix}"


def _render_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """Left-aligned columns separated by two spaces; cells must already be escaped."""
    plain = [[_strip_ansi(c) for c in row] for row in rows]
    widths = [
        max(len(h), *(len(r[i]) for r in plain)) if plain else len(h) for i, h in enumerate(header)
    ]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)).rstrip()]
    lines.append("  ".join("-" * w for w in widths))
    for row, bare in zip(rows, plain, strict=True):
        cells = [c + " " * (w - len(b)) for c, b, w in zip(row, bare, widths, strict=True)]
        lines.append("  ".join(cells).rstrip())
    return lines


def _strip_ansi(text: str) -> str:
    out, i = [], 0
    while i < len(text):
        if text[i] == "\033":
            end = text.find("m", i)
            i = len(text) if end < 0 else end + 1
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def _ci_text(low: float | None, high: float | None) -> str:
    if low is None and high is None:
        return "—"
    return f"[{_num(low, '.3f')}, {'∞' if high is None else _num(high, '.3f')}]"


def _verdict_text(result: PerformanceValidationResult, color: bool) -> str:
    verdict = result.verdict or ("passed" if result.passed else "failed")
    if result.passed:
        return _paint(verdict, ANSI_FASTER, color)
    return _paint(verdict, ANSI_SLOWER, color)


def format_run(run: RunSummary, *, color: bool = False) -> list[str]:
    """Human lines for one run: baseline, results table, failures table, the final line."""
    lines: list[str] = []
    if run.disabled:
        lines.append("Performance validation was disabled for this run.")
    if run.baseline_throughput is not None:
        lines.append(
            f"Eager baseline: {escape_control(run.baseline_backend or 'eager')}: "
            f"{run.baseline_throughput:.2f} samples/s at batch size {_num(run.batch_size, 'd')} "
            "(up-front check; each row compares with eager timed alongside that candidate, "
            "column Eager/s)"
        )
    if run.baseline_error:
        lines.append(f"Eager baseline failed: {escape_control(run.baseline_error)}")
    if run.required_speedup is not None:
        lines.append(
            f"Gate: a candidate must reach {run.required_speedup:.4g}x eager's throughput "
            f"({_num(run.min_speedup_threshold_percent, '.4g', '%')} threshold, "
            f"{run.decision or '?'} decision"
            + (
                "; faster only when the lower confidence bound clears it)"
                if run.decision == "statistical"
                else ")"
            )
        )
    if run.results:
        confidence = next((r.confidence for r in run.results if r.confidence), None)
        ci_head = f"CI ({confidence:.0%} per look)" if confidence else "CI"
        rows = [
            [
                escape_control(r.backend_description),
                _num(r.batch_size, "d"),
                f"{r.baseline_throughput:.2f}",
                f"{r.throughput:.2f}",
                f"{r.speedup:.2f}x",
                _ci_text(r.ci_low, r.ci_high),
                _verdict_text(r, color),
                escape_control(r.reason or ""),
            ]
            for r in run.results
        ]
        lines.append("")
        lines.extend(
            _render_table(
                [
                    "Backend",
                    "Batch",
                    "Eager/s",
                    "Candidate/s",
                    "Speedup",
                    ci_head,
                    "Verdict",
                    "Reason",
                ],
                rows,
            )
        )
    if run.failures:
        rows = [
            [
                escape_control(f.backend_description),
                f.stage,
                escape_control(f.error_type),
                escape_control(f.reason),
                escape_control(f.traceback_path or "—"),
            ]
            for f in run.failures
        ]
        lines.append("")
        lines.append("Failed candidates:")
        lines.extend(_render_table(["Backend", "Stage", "Error", "Reason", "Log"], rows))
    lines.append("")
    lines.append(_final_line(run, color=color))
    return lines


def _final_line(run: RunSummary, *, color: bool) -> str:
    """The ⚡ line for a selected candidate, else the baseline-selected line."""
    if run.selected_backend is None:
        if run.outcome == "error":
            return "❌ No backend was selected (the strategy failed; see the failures above)."
        return "ℹ️ No backend was selected."
    chosen = escape_control(run.selected_backend)
    if not run.selected_is_baseline:
        match = [r for r in run.results if r.backend_description == run.selected_backend]
        passed = [r for r in match if r.passed] or match
        if passed:
            r = passed[-1]
            detail = fmt_throughput_detail(r.baseline_throughput, r.throughput)
            name = escape_control(run.module_name)
            return fmt_speedup_msg(r.speedup, detail, name, chosen, color=color)
        return f"Selected: {chosen} (not measured)"
    return escape_control(fmt_baseline_selected(run.selected_backend, run.baseline_throughput))


# --------------------------------------------------------------------------------------------
# check
# --------------------------------------------------------------------------------------------


def _refuse_constant(name: str) -> float:
    raise ValueError(f"non-finite number {name}")


def parse_times(text: str, source: str = "input") -> list[float]:
    """Parse latencies: a JSON array of numbers, or one number per line (blank/``#`` lines skipped).

    Raises :class:`UsageError` naming ``source`` and the line for anything else.
    """
    stripped = text.strip()
    if stripped.startswith("["):
        try:
            data = json.loads(stripped, parse_constant=_refuse_constant)
        except (ValueError, RecursionError) as exc:
            raise UsageError(f"{source}: not a JSON array of numbers ({exc})") from exc
        if not isinstance(data, list):
            raise UsageError(f"{source}: expected a JSON array of numbers")
        values = []
        for i, item in enumerate(data):
            if isinstance(item, bool) or not isinstance(item, (int, float)):
                raise UsageError(f"{source}: item {i} is not a number: {item!r:.40}")
            values.append(float(item))
        return values
    values = []
    for line_no, line in enumerate(text.splitlines(), start=1):
        item = line.split("#", 1)[0].strip()
        if not item:
            continue
        try:
            value = float(item)
        except ValueError:
            raise UsageError(
                f"{source}: line {line_no} is not a number: {escape_control(item[:40])!r}"
            ) from None
        if not math.isfinite(value):
            raise UsageError(f"{source}: line {line_no} is not a finite number: {item[:40]!r}")
        values.append(value)
    return values


def _read_times(path: str) -> list[float]:
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read {path!r}: {exc}") from exc
    return parse_times(text, source=path)


def _finite_arg(name: str, value: float | None) -> float:
    if value is None or not math.isfinite(value):
        raise UsageError(f"{name} must be a finite number, got {value!r}")
    return value


def cmd_check(args: argparse.Namespace, out: IO[str], err: IO[str]) -> int:
    """``check``: the pure gate for CI scripts, on throughputs or on per-call latencies."""
    color = use_color(out)
    threshold = _finite_arg("--threshold", args.threshold)
    if threshold <= -100:
        raise UsageError(f"--threshold must be > -100 (percent), got {threshold!r}")
    has_tp = args.baseline is not None or args.candidate is not None
    has_times = args.baseline_times is not None or args.candidate_times is not None
    if has_tp == has_times:
        raise UsageError(
            "give either --baseline and --candidate (throughputs) or "
            "--baseline-times and --candidate-times (latency files)"
        )
    if has_tp:
        if args.baseline is None or args.candidate is None:
            raise UsageError("--baseline and --candidate go together")
        base = _finite_arg("--baseline", args.baseline)
        cand = _finite_arg("--candidate", args.candidate)
        if base <= 0 or cand < 0:
            raise UsageError(
                f"--baseline must be > 0 and --candidate >= 0, got {args.baseline!r}, {args.candidate!r}"
            )
        speedup = compute_speedup(cand, base)
        ok = meets_threshold(speedup, threshold)
        print(
            fmt_speedup_msg_short(speedup, fmt_throughput_detail(base, cand), color=color),
            file=out,
        )
        need = required_speedup(threshold)
        word = "meets" if ok else "misses"
        print(f"{word} the {threshold:g}% threshold (required speedup {need:.4g}x)", file=out)
        return EXIT_OK if ok else EXIT_FAILURE
    if args.baseline_times is None or args.candidate_times is None:
        raise UsageError("--baseline-times and --candidate-times go together")
    from aitune_fp.core.stats import decide_speedup

    base_t = _read_times(args.baseline_times)
    cand_t = _read_times(args.candidate_times)
    try:
        decision = decide_speedup(
            base_t, cand_t, threshold, confidence=args.confidence, paired=args.paired
        )
    except (TypeError, ValueError) as exc:
        raise UsageError(str(exc)) from exc
    high = "∞" if math.isinf(decision.ci_high) else f"{decision.ci_high:.4f}x"
    verdict = {
        "faster": _paint("faster", ANSI_FASTER, color),
        "not_faster": _paint("not_faster", ANSI_SLOWER, color),
        "inconclusive": "inconclusive",
    }[decision.verdict]
    print(
        f"verdict: {verdict} (speedup {decision.speedup:.4f}x, "
        f"{decision.confidence:.0%} CI [{decision.ci_low:.4f}x, {high}], "
        f"required > {decision.required_speedup:.4g}x; "
        f"n={decision.n_baseline}/{decision.n_candidate}, {decision.method})",
        file=out,
    )
    return {"faster": EXIT_OK, "not_faster": EXIT_FAILURE}.get(decision.verdict, EXIT_INCONCLUSIVE)


# --------------------------------------------------------------------------------------------
# report
# --------------------------------------------------------------------------------------------

_MAX_BAD_SHOWN = 20


def cmd_report(args: argparse.Namespace, out: IO[str], err: IO[str]) -> int:
    """``report``: one table per run of an event log; bad lines counted with their numbers."""
    from aitune_fp import ingest as ingest_mod

    if args.plot is not None:
        _check_plot_target(args.plot)
    try:
        report = ingest_mod.ingest(args.log)
    except OSError as exc:
        raise UsageError(f"cannot read {args.log!r}: {exc.strerror or exc}") from exc
    if args.format == "json":
        print(json.dumps({"command": "report", **report.to_dict()}, ensure_ascii=False), file=out)
    else:
        color = use_color(out)
        if not report.runs:
            print(f"No aitune_fp runs in {escape_control(args.log)}.", file=out)
        for i, run in enumerate(report.runs):
            if i:
                print("", file=out)
            head = f"Run {escape_control(run.run_id)} · {escape_control(run.module_name)}"
            extras = [escape_control(x) for x in (run.strategy, run.device) if x]
            print(" · ".join([head, *extras]), file=out)
            for line in format_run(run, color=color):
                print(line, file=out)
    if report.bad_lines:
        print(
            f"{len(report.bad_lines)} of {report.n_lines} lines were not aitune_fp events:",
            file=err,
        )
        for line_no, why in report.bad_lines[:_MAX_BAD_SHOWN]:
            print(f"  line {line_no}: {escape_control(why)}", file=err)
        if len(report.bad_lines) > _MAX_BAD_SHOWN:
            print(f"  ... and {len(report.bad_lines) - _MAX_BAD_SHOWN} more", file=err)
    if args.plot is not None:
        plot_report(report, args.plot)
        print(f"plot written to {escape_control(args.plot)}", file=err)
    return EXIT_OK


def _check_plot_target(path: str) -> None:
    suffix = Path(path).suffix.lower()
    if suffix not in {".png", ".svg", ".pdf"}:
        raise UsageError(f"--plot needs a .png, .svg or .pdf file name, got {path!r}")
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise UsageError(
            "--plot needs matplotlib: pip install 'aitune-fp[plot]' (or pip install matplotlib)"
        ) from None


def plot_report(report: IngestReport, path: str) -> None:
    """Draw every measured speedup with its CI as error bars, against each run's threshold."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels: list[str] = []
    values: list[float] = []
    lows: list[float] = []
    highs: list[float] = []
    colors: list[str] = []
    thresholds: list[tuple[int, int, float]] = []
    for run in report.runs:
        start = len(labels)
        for r in run.results:
            centre = r.estimate if r.estimate is not None else r.speedup
            low = r.ci_low if r.ci_low is not None else centre
            high = r.ci_high if r.ci_high is not None else centre
            labels.append(f"{r.backend_description[:40]}\nrun {run.run_id[:6]}")
            values.append(centre)
            lows.append(max(centre - low, 0.0))
            highs.append(max(high - centre, 0.0))
            colors.append("tab:green" if r.passed else "tab:orange")
        need = run.required_speedup
        if need is None and run.results:
            need = run.results[0].required_speedup
        if need is not None and len(labels) > start:
            thresholds.append((start, len(labels), need))
    fig, ax = plt.subplots(figsize=(max(6.0, 1.6 * len(labels) + 2.0), 4.5))
    xs = list(range(len(labels)))
    if xs:
        ax.errorbar(xs, values, yerr=[lows, highs], fmt="none", ecolor="black", capsize=4)
        ax.scatter(xs, values, c=colors, zorder=3)
    for i, (a, b, need) in enumerate(thresholds):
        ax.hlines(
            need,
            a - 0.4,
            b - 0.6,
            colors="tab:red",
            linestyles="dashed",
            label="required speedup" if i == 0 else "_nolegend_",
        )
    ax.axhline(1.0, color="grey", linewidth=0.8)
    ax.set_xticks(xs, labels, fontsize=7, rotation=15, ha="right")
    ax.set_ylabel("speedup over eager (x)")
    ax.set_title("aitune_fp: speedups with confidence intervals")
    if thresholds:
        ax.legend(loc="best")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


# --------------------------------------------------------------------------------------------
# tune: logging, progress, the run
# --------------------------------------------------------------------------------------------


_PHASE_FRACTION = {"build": 0.0, "correctness": 0.25, "measure": 0.4}


class Progress:
    """Progress on stderr from aitune_fp events: one line redrawn in place on a TTY, else plain lines."""

    def __init__(
        self, stream: IO[str], *, tty: bool, quiet: bool, candidates: Sequence[str]
    ) -> None:
        self.stream = stream
        self.tty = tty
        self.quiet = quiet
        self.candidates = list(candidates)
        self.start = time.monotonic()
        self._drawn = False

    def _position(self, description: str) -> tuple[int, int]:
        total = len(self.candidates)
        index = self.candidates.index(description) + 1 if description in self.candidates else 0
        return index, total

    def _bar(self, index: int, total: int, phase: str) -> str:
        done = ((index - 1) + _PHASE_FRACTION.get(phase, 0.0)) / total if total and index else 0.0
        filled = round(20 * min(max(done, 0.0), 1.0))
        return "[" + "#" * filled + "-" * (20 - filled) + "]"

    def _write_status(self, text: str) -> None:
        if self.tty:
            width = shutil.get_terminal_size((100, 20)).columns
            self.stream.write("\r\033[2K" + text[: max(width - 1, 10)])
            self._drawn = True
        else:
            self.stream.write(text + "\n")
        self.stream.flush()

    def _write_line(self, text: str) -> None:
        self.clear()
        self.stream.write(text + "\n")
        self.stream.flush()

    def clear(self) -> None:
        """Erase the in-place status line (TTY mode)."""
        if self._drawn:
            self.stream.write("\r\033[2K")
            self.stream.flush()
            self._drawn = False

    def __call__(self, logger: Any, method: str, event_dict: MutableMapping[str, Any]) -> Any:
        """Structlog processor: show the event, pass it on unchanged."""
        with contextlib.suppress(OSError, ValueError):
            self.show(method, event_dict)
        return event_dict

    def show(self, method: str, event: Mapping[str, Any]) -> None:
        """Render one event dict (as a structlog processor sees it)."""
        name = str(event.get("event", ""))
        level = str(event.get("level", method))
        if not name.startswith("aitune_fp."):
            return
        elapsed = time.monotonic() - self.start
        if name.endswith(".phase"):
            if self.quiet:
                return
            description = escape_control(str(event.get("backend_description", "")))
            phase = str(event.get("phase", ""))
            if phase.startswith("baseline"):
                label = f"eager baseline: {phase.removeprefix('baseline_')}"
                self._write_status(f"⏳ {self._bar(0, 0, phase)} {label}  ({elapsed:.0f}s)")
                return
            index, total = self._position(str(event.get("backend_description", "")))
            where = f"[{index}/{total}] " if index else ""
            self._write_status(
                f"⏳ {self._bar(index, total, phase)} {where}{description}: {phase}  ({elapsed:.0f}s)"
            )
            return
        if name.endswith((".selected", ".finished")):
            return  # the results on stdout say it
        summary = escape_control(str(event.get("summary", name)))
        if level in ("warning", "error", "critical") or not self.quiet:
            self._write_line(summary)


class JsonLines:
    """structlog processor writing each event as one JSON line (finite numbers, UTF-8)."""

    def __init__(self, handle: IO[str]) -> None:
        self.handle = handle

    def __call__(self, logger: Any, method: str, event_dict: MutableMapping[str, Any]) -> Any:
        """Write the event dict and pass it on."""
        data = {k: _jsonable(v) for k, v in event_dict.items()}
        self.handle.write(json.dumps(data, ensure_ascii=False, allow_nan=False, default=str) + "\n")
        self.handle.flush()
        return event_dict


def _jsonable(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _drop(logger: Any, method: str, event_dict: MutableMapping[str, Any]) -> Any:
    import structlog

    raise structlog.DropEvent


def configure_logging(processors: Sequence[Callable[..., Any]]) -> None:
    """Configure structlog (and stdlib logging to stderr) for the command line: events never reach stdout."""
    import structlog

    chain: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True, key="timestamp"),
        *processors,
        _drop,
    ]
    structlog.configure(
        processors=chain,
        wrapper_class=structlog.make_filtering_bound_logger(logging.DEBUG),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
        cache_logger_on_first_use=False,
    )
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING, force=True)


@contextlib.contextmanager
def _stdout_to_stderr() -> Iterator[None]:
    """Send everything written to fd 1 (torch, compilers, subprocesses) to stderr meanwhile."""
    sys.stdout.flush()
    try:
        saved = os.dup(1)
    except OSError:
        with contextlib.redirect_stdout(sys.stderr):
            yield
        return
    try:
        os.dup2(2, 1)
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved, 1)
        os.close(saved)


def _parse_looks(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise UsageError(
            f"--looks must be comma-separated integers like 10,20,40, got {text!r}"
        ) from None


def _parse_shape(text: str) -> tuple[int, ...]:
    try:
        shape = tuple(int(x) for x in re.split(r"[,x]", text.strip()))
    except ValueError:
        raise UsageError(f"--input-shape must look like 8,256, got {text!r}") from None
    if not shape or any(d < 1 for d in shape):
        raise UsageError(f"--input-shape must be positive integers, got {text!r}")
    return shape


def _profiling_config(args: argparse.Namespace) -> Any:
    from aitune_fp.core.config import ProfilingConfig

    kwargs: dict[str, Any] = {"decision": args.decision}
    if args.looks is not None:
        kwargs["looks"] = _parse_looks(args.looks)
        if args.max_pairs is not None and kwargs["looks"][-1] != args.max_pairs:
            raise UsageError("--max-pairs must equal the last of --looks (or give only one)")
    elif args.max_pairs is not None:
        if args.max_pairs < 2:
            raise UsageError(f"--max-pairs must be >= 2, got {args.max_pairs}")
        planned = [n for n in ProfilingConfig().looks if n < args.max_pairs]
        kwargs["looks"] = (*planned, args.max_pairs)
    if args.max_seconds is not None:
        kwargs["max_seconds"] = args.max_seconds
    if args.confidence is not None:
        kwargs["confidence"] = args.confidence
    if args.warmup_calls is not None:
        kwargs["point_warmup_calls"] = args.warmup_calls
    if args.steps is not None:
        kwargs["point_steps"] = args.steps
    try:
        return ProfilingConfig(**kwargs)
    except (TypeError, ValueError) as exc:
        raise UsageError(str(exc)) from exc


def _backend_names(text: str | None, device: str) -> list[str]:
    """The ``--backends`` names (the registry's defaults for ``device`` when not given)."""
    if text is None:
        return list(registry.default_backends(device))
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise UsageError("--backends needs at least one name")
    for n in names:
        try:
            registry.check_backend(n, device)
        except registry.BackendChoiceError as exc:
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
    from aitune_fp.models import MODELS, UserModelError, load_user_model

    if args.model in MODELS:
        if args.input_shape is not None:
            raise UsageError("--input-shape applies only to a user model (--model file.py:factory)")
        return MODELS[args.model]()
    if ":" not in args.model:
        raise UsageError(
            f"--model must be one of {', '.join(MODELS)} or path/to/file.py:factory, "
            f"got {args.model!r}"
        )
    shape = _parse_shape(args.input_shape) if args.input_shape is not None else None
    try:
        return load_user_model(args.model, input_shape=shape)
    except UserModelError as exc:
        raise UsageError(str(exc)) from exc


def cmd_tune(args: argparse.Namespace, out: IO[str], err: IO[str]) -> int:
    """``tune``: validate candidate backends against eager on a model and print the verdicts."""
    config = _profiling_config(args)
    threshold = _finite_arg("--threshold", args.threshold)
    if threshold <= -100:
        raise UsageError(f"--threshold must be > -100 (percent), got {threshold!r}")
    if threshold < 0:
        print(
            f"{PROG}: warning: --threshold {threshold:g} accepts candidates up to "
            f"{-threshold:g} % slower than eager",
            file=err,
        )
    json_log: IO[str] | None = None
    if args.json_log is not None:
        try:
            json_log = open(args.json_log, "a", encoding="utf-8")  # noqa: SIM115
        except OSError as exc:
            raise UsageError(f"cannot write --json-log {args.json_log!r}: {exc.strerror}") from exc
    try:
        return _tune(args, config, threshold, json_log, out, err)
    finally:
        if json_log is not None:
            json_log.close()


def _tune(
    args: argparse.Namespace,
    config: Any,
    threshold: float,
    json_log: IO[str] | None,
    out: IO[str],
    err: IO[str],
) -> int:
    import torch

    from aitune_fp.session import describe
    from aitune_fp.strategies import (
        FirstWinsStrategy,
        MaxThroughputStrategy,
        NoValidBackendError,
        OneBackendStrategy,
    )
    from aitune_fp.validation import validation_of, with_performance_validation

    device = _resolve_device(args.device)
    names = _backend_names(args.backends, device)
    if args.strategy == "one" and len(names) != 1:
        raise UsageError(f"--strategy one needs exactly one backend, got {', '.join(names)}")
    model = _load_model(args)
    backends = [registry.make_backend(n, device) for n in names]
    if args.strategy == "one":
        inner: Any = OneBackendStrategy(backends[0])
    elif args.strategy == "first-wins":
        inner = FirstWinsStrategy(backends)
    else:
        inner = MaxThroughputStrategy(backends)
    strategy = with_performance_validation(
        inner, min_speedup_threshold_percent=threshold, profiling_config=config
    )
    if args.cache_dir is not None:
        cache_dir = Path(args.cache_dir)
        try:
            cache_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UsageError(
                f"cannot create --cache-dir {args.cache_dir!r}: {exc.strerror}"
            ) from exc
    else:
        cache_dir = Path(tempfile.mkdtemp(prefix="aitune_fp-"))

    progress = Progress(
        err,
        tty=use_color(err, {}),
        quiet=args.quiet,
        candidates=[describe(b) for b in backends],
    )
    processors: list[Any] = [progress]
    if json_log is not None:
        processors.append(JsonLines(json_log))
    configure_logging(processors)
    if not args.quiet:
        print(
            f"aitune-fp: tuning {escape_control(model.name)} on {device} "
            f"({', '.join(names)}; {args.strategy}; {config.decision}; cache {cache_dir})",
            file=err,
        )

    error: NoValidBackendError | None = None
    with _stdout_to_stderr(), torch.no_grad():
        module = model.module.to(device)
        try:
            strategy.tune(module, model.name, model.graph_spec, [model.sample], device, cache_dir)
        except NoValidBackendError as exc:
            error = exc
        finally:
            progress.clear()
    run = validation_of(strategy).last_report
    assert run is not None  # the wrapper leaves a report for every tune, failed or not
    if args.format == "json":
        doc = {"command": "tune", "cache_dir": str(cache_dir), "run": run.to_dict()}
        if error is not None:
            doc["error"] = str(error)
        print(json.dumps(doc, ensure_ascii=False, allow_nan=False), file=out)
    else:
        color = use_color(out)
        for line in format_run(run, color=color):
            print(line, file=out)
        if error is not None:
            for i, text in enumerate(str(error).splitlines()):
                print(("❌ " if i == 0 else "   ") + escape_control(text), file=out)
    out.flush()
    if run.baseline_error and not run.disabled:
        print(
            f"{PROG}: the eager baseline failed on this model and input: "
            f"{escape_control(run.baseline_error)} (log under {cache_dir})",
            file=err,
        )
        return EXIT_USAGE
    return EXIT_OK


# --------------------------------------------------------------------------------------------
# Parser and entry point
# --------------------------------------------------------------------------------------------


class _Parser(argparse.ArgumentParser):
    """argparse with errors as :class:`UsageError` (one line, exit 2) instead of sys.exit."""

    def error(self, message: str) -> Any:
        """Raise instead of printing usage and exiting."""
        raise UsageError(f"{message} (see {self.prog} --help)")


def build_parser() -> argparse.ArgumentParser:
    """The ``aitune-fp`` argument parser (subcommands tune, check, report)."""
    parser = _Parser(
        prog=PROG,
        description="Is a compiled PyTorch inference backend really faster than eager? "
        "Measure, then decide.",
    )
    from aitune_fp import __version__

    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="{tune,check,report}", parser_class=_Parser)

    tune = sub.add_parser(
        "tune",
        help="validate candidate backends against eager on a model (the main job)",
        description="Build the eager baseline and every candidate, gate each by measurement, "
        "print the verdicts. With no arguments: the default candidates on the embedded mlp.",
    )
    tune.add_argument(
        "--model",
        default="mlp",
        help="mlp (default), convnet, transformer, or path/to/file.py:factory",
    )
    tune.add_argument(
        "--input-shape", help="input shape for a user factory that returns only a module (8,256)"
    )
    tune.add_argument("--device", default="auto", help="auto (default), cpu, cuda or cuda:N")
    tune.add_argument(
        "--backends",
        help=f"comma list of {', '.join(registry.backend_names())} "
        f"(default CPU: {','.join(registry.default_backends('cpu'))}; "
        f"CUDA: {','.join(registry.default_backends('cuda'))})",
    )
    tune.add_argument(
        "--strategy", choices=("one", "first-wins", "max-throughput"), default="max-throughput"
    )
    tune.add_argument(
        "--threshold", type=float, default=1.0, help="minimum speedup in percent (default 1.0)"
    )
    tune.add_argument("--decision", choices=DECISION_MODES, default=DECISION_MODES[0])
    tune.add_argument(
        "--max-seconds", type=float, help="time budget per candidate comparison (default 60)"
    )
    tune.add_argument("--max-pairs", type=int, help="timed pairs per arm at most (default 160)")
    tune.add_argument("--looks", help="planned looks in pairs, e.g. 10,20,40,80,160")
    tune.add_argument("--confidence", type=float, help="confidence of the decision (default 0.95)")
    tune.add_argument("--warmup-calls", type=int, help="point decision: warm-up calls (10)")
    tune.add_argument("--steps", type=int, help="point decision: timed calls (20)")
    tune.add_argument(
        "--cache-dir",
        help="where builds and failure logs go (default: a new temp dir, kept so that "
        "the logs it names stay readable; its path is printed)",
    )
    tune.add_argument("--json-log", help="append every event as JSON lines to this file")
    tune.add_argument("--format", choices=("table", "json"), default="table")
    tune.add_argument("-q", "--quiet", action="store_true", help="no progress on stderr")
    tune.set_defaults(func=cmd_tune)

    check = sub.add_parser(
        "check",
        help="gate two throughputs or two sets of latencies (for CI scripts)",
        description="Exit 0 when the candidate meets the threshold, 1 when not, "
        "3 when timings are inconclusive, 2 on bad input.",
    )
    check.add_argument("--baseline", type=float, help="eager throughput (samples/s)")
    check.add_argument("--candidate", type=float, help="candidate throughput (samples/s)")
    check.add_argument("--baseline-times", help="file of eager latencies (s): one a line or JSON")
    check.add_argument("--candidate-times", help="file of candidate latencies (s)")
    check.add_argument(
        "--threshold", type=float, default=1.0, help="minimum speedup in percent (default 1.0)"
    )
    check.add_argument("--paired", action="store_true", help="latency i of both files paired")
    check.add_argument("--confidence", type=float, default=0.95)
    check.set_defaults(func=cmd_check)

    report = sub.add_parser(
        "report",
        help="tables (and a plot) from a --json-log event file",
        description="Read a JSON-lines event log; print one table per run; count bad lines.",
    )
    report.add_argument("log", help="JSON-lines file written by --json-log")
    report.add_argument("--plot", help="write a speedup/CI plot (.png, .svg or .pdf)")
    report.add_argument("--format", choices=("table", "json"), default="table")
    report.set_defaults(func=cmd_report)
    return parser


def _save_traceback() -> str:
    fd, path = tempfile.mkstemp(prefix="aitune_fp-error-", suffix=".log")
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(traceback.format_exc())
    return path


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``aitune-fp`` with ``argv`` (default ``sys.argv[1:]``); return the exit code."""
    out, err = sys.stdout, sys.stderr
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        if args.command is None:
            parser.print_help(err)
            return EXIT_USAGE
        code: int = args.func(args, out, err)
        return code
    except UsageError as exc:
        print(f"{PROG}: error: {escape_control(str(exc))}", file=err)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=err)
        return 130
    except Exception as exc:
        path = _save_traceback()
        print(
            f"{PROG}: unexpected error: {type(exc).__name__}: {escape_control(str(exc))[:300]} "
            f"(traceback saved to {path})",
            file=err,
        )
        return EXIT_FAILURE
