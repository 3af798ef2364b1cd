"""``aitune-fp report --plot``: the figure checked through matplotlib's artists (issue 26).

The figure is built by :func:`aitune_fp.cli.plot.build_figure`, the function the CLI saves, so
what is checked here is what the user gets: one colour and one legend label per verdict, the
legend outside the data, a log speedup axis with the required speedup marked, and every row
present, a row or run with no estimate drawn as such with its reason in a note below.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import matplotlib  # an extra README's set-up installs: never skipped
import numpy as np
import pytest

matplotlib.use("Agg")

from matplotlib.axes import Axes
from matplotlib.collections import Collection
from matplotlib.colors import to_rgba
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from aitune_fp.cli import main
from aitune_fp.cli.plot import NO_ESTIMATE, VERDICT_COLOURS, VERDICT_LABELS, build_figure
from aitune_fp.core.results import PerformanceValidationResult
from aitune_fp.events.candidates import (
    CandidateFailed,
    CandidateMeasured,
)
from aitune_fp.events.ingest import IngestReport, ingest
from aitune_fp.events.validation import (
    BaselineFailed,
    BaselineMeasured,
    Finished,
    Selected,
    Started,
)
from tests.factories import fake_result

NEED = 1.01


def _result(
    desc: str,
    verdict: str,
    estimate: float | None,
    low: float | None = None,
    high: float | None = None,
    *,
    decision: str = "statistical",
    need: float = NEED,
    reason: str = "",
) -> PerformanceValidationResult:
    """One measured candidate as a tune records it (mean ratio 5 % off the estimate)."""
    mean_ratio = (estimate or 1.0) * 1.05
    fields: dict[str, Any] = {
        "estimate": estimate,
        "ci_low": low,
        "ci_high": high,
        "confidence": 0.98 if estimate is not None and decision == "statistical" else None,
        "required_speedup": need,
        "verdict": verdict,
        "decision": decision,
        "reason": reason or f"{verdict} at 40 pairs",
        "n_baseline": 40,
        "n_candidate": 40,
    }
    if decision == "point":
        fields.update(estimate=None, ci_low=None, ci_high=None)
        mean_ratio = estimate or 1.0
    return fake_result(
        desc, throughput=500.0 * mean_ratio, baseline_throughput=500.0, speedup=mean_ratio, **fields
    )


def _run(
    run: str,
    module: str,
    *,
    results: tuple[PerformanceValidationResult, ...] = (),
    failures: tuple[tuple[str, str, str], ...] = (),
    baseline_error: str | None = None,
    need: float = NEED,
    decision: str = "statistical",
) -> list[str]:
    """The JSON lines ``--json-log`` writes for one run (timestamps left out)."""
    made = [
        Started(
            run_id=run,
            module_name=module,
            strategy="best-of",
            device="cuda:0",
            decision=decision,
            min_speedup_threshold_percent=round((need - 1) * 100, 6),
            required_speedup=need,
            batch_size=32,
        ).to_event()
    ]
    if baseline_error is None:
        made.append(
            BaselineMeasured(
                run_id=run,
                module_name=module,
                backend_description="TorchEagerBackend()",
                batch_size=32,
                throughput_samples_per_s=500.0,
                n_calls=20,
                duration_s=0.4,
                decision=decision,
            ).to_event()
        )
    else:
        kind, _, why = baseline_error.partition(": ")
        made.append(
            BaselineFailed(
                run_id=run, module_name=module, error_type=kind, reason=why, traceback_path=None
            ).to_event()
        )
    made += [
        CandidateMeasured(run_id=run, module_name=module, result=r, duration_s=3.0).to_event()
        for r in results
    ]
    made += [
        CandidateFailed(
            run_id=run,
            module_name=module,
            backend_description=desc,
            stage=stage,
            error_type=why.partition(": ")[0],
            reason=why.partition(": ")[2],
            traceback_path=None,
        ).to_event()
        for desc, stage, why in failures
    ]
    best = max((r for r in results if r.passed), key=lambda r: r.speedup, default=None)
    chosen = (
        None
        if baseline_error
        else "TorchEagerBackend()"
        if best is None
        else best.backend_description
    )
    if chosen is not None:
        made.append(
            Selected.of(
                run,
                module,
                backend_description=chosen,
                is_baseline=best is None,
                result=best,
                baseline_throughput=500.0,
                info_on=True,
            )
        )
    made.append(
        Finished(
            run_id=run,
            module_name=module,
            outcome="error" if baseline_error else "baseline" if best is None else "candidate",
            backend_description=chosen,
            n_candidates=len(results) + len(failures),
            n_measured=len(results),
            n_passed=sum(r.passed for r in results),
            n_failed=len(failures),
            duration_s=30.0,
        ).to_event()
    )
    return [json.dumps({"event": e.name, **e.fields}) for e in made]


def realistic_log() -> list[str]:
    """A GPU tune of resnet50 (one backend at 31x, a bf16 row with no estimate) and gpt2.

    Both gpt2 runs end without any estimate: its eager baseline ran out of memory once, and
    every candidate failed to build the second time. This log renders ``docs/report-plot.png``.
    """
    resnet = (
        _result("TorchCompileBackend(mode='max-autotune')", "faster", 1.42, 1.37, 1.47),
        _result("TorchCompileBackend(mode='reduce-overhead')", "inconclusive", 1.02, 0.991, 1.048),
        _result(
            "OnnxRuntimeBackend(provider='CUDAExecutionProvider')", "not_faster", 0.87, 0.84, 0.9
        ),
        _result("TensorRTBackend(precision='fp16')", "faster", 31.2, 30.1, 32.4),
        _result(
            "TorchEagerBackend(dtype=torch.bfloat16)",
            "inconclusive",
            None,
            reason="budget spent before the first look (0 pairs)",
        ),
    )
    gpt2_failures = (
        (
            "TorchCompileBackend(mode='max-autotune')",
            "build",
            "Unsupported: dynamic shape operator: aten.nonzero.default",
        ),
        ("OnnxRuntimeBackend()", "build", "ExportError: unsupported ONNX opset 21"),
    )
    return [
        *_run("3f9a1c27d0e84b55", "resnet50", results=resnet),
        *_run(
            "8b02e4f1a9c3477d",
            "gpt2",
            baseline_error="OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
        ),
        *_run("c41d7e90b2a54f18", "gpt2", failures=gpt2_failures),
    ]


def _report(lines: list[str]) -> IngestReport:
    return ingest(lines)


def _panels(fig: Figure) -> list[Axes]:
    return [ax for ax in fig.axes if ax.get_gid() == "panel"]


def _rows(ax: Axes) -> list[str]:
    """The row labels, top row first."""
    return [t.get_text() for t in ax.get_yticklabels()]


def _row_at(ax: Axes, y: float) -> str:
    """The label of the row drawn at height ``y``."""
    at = dict(zip(ax.get_yticks(), _rows(ax), strict=True))
    return str(at[round(y)])


def _markers(ax: Axes, verdict: str) -> Collection | None:
    found = [c for c in ax.collections if c.get_gid() == f"verdict:{verdict}"]
    assert len(found) <= 1
    return found[0] if found else None


def _offsets(markers: Collection) -> list[list[float]]:
    """Where ``markers`` are drawn, ``[x, y]`` each."""
    return np.asarray(markers.get_offsets(), dtype=float).tolist()  # type: ignore[no-any-return]


def _facecolors(markers: Collection) -> list[tuple[float, ...]]:
    return [tuple(c) for c in np.asarray(markers.get_facecolor(), dtype=float)]


def _xdata(line: Line2D) -> list[float]:
    return np.asarray(line.get_xdata(), dtype=float).tolist()  # type: ignore[no-any-return]


def _thresholds(ax: Axes) -> list[Line2D]:
    return [line for line in ax.get_lines() if line.get_gid() == "threshold"]


def _legend_labels(fig: Figure) -> list[str]:
    (legend,) = fig.legends
    return [t.get_text() for t in legend.get_texts()]


def _notes(fig: Figure) -> str:
    return "\n".join(t.get_text() for t in fig.texts if t.get_gid() == "notes")


class TestLegendAndColours:
    def test_each_verdict_has_its_own_label(self) -> None:
        """faster, not faster, inconclusive and no estimate each have a legend entry."""
        fig = build_figure(_report(realistic_log()))
        labels = _legend_labels(fig)
        for verdict in ("faster", "not_faster", "inconclusive"):
            assert labels.count(VERDICT_LABELS[verdict]) == 1
        assert labels.count(NO_ESTIMATE) == 1
        assert "required speedup 1.01x" in labels
        assert len(set(VERDICT_COLOURS.values())) == 3

    def test_markers_take_their_verdicts_colour(self) -> None:
        """Every point sits in its verdict's collection, drawn in that verdict's colour."""
        fig = build_figure(_report(realistic_log()))
        (resnet, _) = _panels(fig)
        expected = {
            "faster": ["max-autotune", "TensorRT"],
            "not_faster": ["OnnxRuntime"],
            "inconclusive": ["reduce-overhead"],
        }
        for verdict, names in expected.items():
            markers = _markers(resnet, verdict)
            assert markers is not None
            colours = _facecolors(markers)
            assert all(tuple(c) == to_rgba(VERDICT_COLOURS[verdict]) for c in colours)
            drawn = [_row_at(resnet, y) for _, y in _offsets(markers)]
            assert len(drawn) == len(names)
            for name in names:
                assert sum(name in row for row in drawn) == 1

    def test_only_verdicts_present_are_in_the_legend(self) -> None:
        """A log where everything was faster: no inconclusive or no-estimate entry."""
        lines = _run("a1", "mlp", results=(_result("B()", "faster", 1.3, 1.2, 1.4),))
        labels = _legend_labels(build_figure(_report(lines)))
        assert VERDICT_LABELS["faster"] in labels
        assert VERDICT_LABELS["inconclusive"] not in labels and NO_ESTIMATE not in labels

    def test_legend_is_outside_every_panel(self) -> None:
        """The legend box never covers data: it overlaps no panel on the rendered canvas."""
        fig = build_figure(_report(realistic_log()))
        fig.canvas.draw()
        box = fig.legends[0].get_window_extent()
        for ax in _panels(fig):
            assert not box.overlaps(ax.get_window_extent())


class TestRows:
    def test_every_row_and_run_is_drawn(self) -> None:
        """5 results and 2 failures as rows; the run whose baseline failed as one row."""
        fig = build_figure(_report(realistic_log()))
        resnet, gpt2 = _panels(fig)
        assert len(_rows(resnet)) == 5
        assert any("bfloat16" in row for row in _rows(resnet))
        assert len(_rows(gpt2)) == 3
        assert sum("run 8b02e4" in row for row in _rows(gpt2)) == 1
        assert sum("run c41d7e" in row for row in _rows(gpt2)) == 2

    def test_no_estimate_rows_are_marked_with_a_numbered_note(self) -> None:
        """Hollow markers at the axis edge, "no estimate [n]", the reason in note [n] below."""
        fig = build_figure(_report(realistic_log()))
        resnet, gpt2 = _panels(fig)
        hollow = [_markers(ax, "none") for ax in (resnet, gpt2)]
        assert [len(_offsets(m)) for m in hollow if m is not None] == [1, 3]
        for m in hollow:
            assert m is not None and all(c[3] == 0 for c in _facecolors(m))
        marks = [t.get_text() for ax in (resnet, gpt2) for t in ax.texts]
        assert [m for m in marks if m.startswith(NO_ESTIMATE)] == [
            f"{NO_ESTIMATE} [{i}]" for i in range(1, 5)
        ]
        notes = _notes(fig)
        for i, why in enumerate(
            (
                "budget spent before the first look",
                "eager baseline failed: OutOfMemoryError: CUDA out of memory",
                "failed at build: Unsupported: dynamic shape",
                "failed at build: ExportError",
            ),
            start=1,
        ):
            assert f"[{i}]" in notes and why in notes

    def test_a_long_reason_is_cut_and_says_where_the_rest_is(self) -> None:
        long = "RuntimeError: " + "x" * 2000
        lines = _run("a1", "mlp", failures=(("B()", "build", long),))
        notes = _notes(build_figure(_report(lines)))
        assert len(notes) < 500
        assert "report --format json" in notes

    def test_a_log_with_no_estimate_at_all_still_plots(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """Runs without an estimate are not "no plot written": the plot says why per run."""
        path = tmp_path / "log.jsonl"
        path.write_text("\n".join(_run("a1", "gpt2", baseline_error="OSError: no GPU")) + "\n")
        target = tmp_path / "p.png"
        assert main(["report", str(path), "--plot", str(target)]) == 0
        assert target.read_bytes().startswith(b"\x89PNG")
        assert "1 row without an estimate" in capsys.readouterr().err

    def test_control_characters_in_names_are_escaped(self) -> None:
        lines = _run(
            "a1", "m\x1b[2J", results=(_result("Evil\x1b[31m()", "faster", 1.2, 1.1, 1.3),)
        )
        fig = build_figure(_report(lines))
        (ax,) = _panels(fig)
        assert "\x1b" not in _rows(ax)[0] + ax.get_title()


class TestAxis:
    def test_speedup_axis_is_log(self) -> None:
        fig = build_figure(_report(realistic_log()))
        assert all(ax.get_xscale() == "log" for ax in _panels(fig))

    def test_31x_does_not_squash_the_rest(self) -> None:
        """With 31x on the axis, 0.87x and 1.42x stay a tenth of its width apart (linear: 2 %)."""
        fig = build_figure(_report(realistic_log()))
        resnet = _panels(fig)[0]
        low, high = resnet.get_xlim()
        assert low < 0.84 and high > 32.4

        def at(x: float) -> float:
            return (math.log(x) - math.log(low)) / (math.log(high) - math.log(low))

        assert at(1.42) - at(0.87) > 0.1
        assert at(1.02) - at(0.87) > 0.03

    def test_threshold_line_at_the_required_speedup(self) -> None:
        """One labelled vertical line at the gate in each panel."""
        fig = build_figure(_report(realistic_log()))
        for ax in _panels(fig):
            (line,) = _thresholds(ax)
            assert set(_xdata(line)) == {NEED}
            assert line.get_label() == "required speedup 1.01x"

    def test_runs_with_different_thresholds_mark_each_row(self) -> None:
        """Two runs of one module gated at 1.01x and 1.10x: each row marked at its own."""
        lines = _run("a1", "mlp", results=(_result("B()", "faster", 1.3, 1.2, 1.4),))
        lines += _run(
            "b2",
            "mlp",
            need=1.1,
            results=(_result("C()", "not_faster", 1.0, 0.95, 1.05, need=1.1),),
        )
        fig = build_figure(_report(lines))
        (ax,) = _panels(fig)
        marked = sorted({x for line in _thresholds(ax) for x in _xdata(line)})
        assert marked == [1.01, 1.1]
        assert "required speedup (per run)" in _legend_labels(fig)

    def test_point_mode_and_open_interval(self) -> None:
        """A point-mode row has no bar; an interval open above runs to the axis edge."""
        lines = _run(
            "p1",
            "mlp",
            decision="point",
            results=(_result("B()", "faster", 1.3, decision="point"),),
        )
        lines += _run("s1", "mlp", results=(_result("C()", "inconclusive", 1.1, 0.8, None),))
        fig = build_figure(_report(lines))
        (ax,) = _panels(fig)
        assert _markers(ax, "faster") is not None and _markers(ax, "inconclusive") is not None
        (right,) = [child for child in ax.child_axes if child.get_gid() == "figures"]
        figures = [t.get_text() for t in right.get_yticklabels()]
        assert sorted(figures) == ["1.10x [0.800, ∞]", "1.30x"]
        arrows = [c for c in ax.collections if c.get_gid() == "open"]
        assert [o for a in arrows for o in _offsets(a)] == [[ax.get_xlim()[1], 0.0]]


def test_docs_png_exists_and_is_small() -> None:
    """docs/report-plot.png, rendered from :func:`realistic_log` (``python -m tests.test_plot``)."""
    png = Path(__file__).resolve().parents[1] / "docs" / "report-plot.png"
    assert png.read_bytes().startswith(b"\x89PNG")
    assert png.stat().st_size < 200_000


if __name__ == "__main__":  # python -m tests.test_plot: re-render docs/report-plot.png
    DOCS_PNG = Path(__file__).resolve().parents[1] / "docs" / "report-plot.png"
    build_figure(_report(realistic_log())).savefig(DOCS_PNG)
