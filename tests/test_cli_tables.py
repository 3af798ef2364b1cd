"""Issue 26, tables: names and paths never split, truncated reasons say where the full text is,
JSON figures equal the tables', and stderr lines read naturally."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from rich.console import Console

from aitune_fp.cli import main
from aitune_fp.cli.plain import print_parts
from aitune_fp.cli.progress import TuneProgress
from aitune_fp.cli.rendering import MAX_REASON, final_line, render_run, run_dict
from aitune_fp.core.report import CandidateFailure, TuneReport
from aitune_fp.events.candidates import CandidateFailed
from aitune_fp.events.validation import Look, PhaseEntered
from tests.factories import fake_log, fake_result, write_log

LONG_NAME = "TorchEagerBackend(dtype=torch.bfloat16)"
LOG = "/tmp/aitune_fp-abcdefgh/TorchCompileBackend_0123456789abcdef/build-failure-traceback.log"


def _render(run: TuneReport, width: int) -> str:
    buf = io.StringIO()
    console = Console(file=buf, width=width, force_terminal=False, color_system=None)
    print_parts(console, render_run(run))
    return buf.getvalue()


def _run(reason: str = "boom", path: str | None = LOG) -> TuneReport:
    wide = fake_result(
        LONG_NAME,
        flags=(
            "warmup_not_steady",
            "serial_correlation",
            "budget_spent",
            "level_shift_after_pair_12",
        ),
    )
    failure = CandidateFailure(
        backend_description="TorchCompileBackend(mode=max-autotune-no-cudagraphs)",
        stage="correctness",
        error_type="CorrectnessError",
        reason=reason,
        traceback_path=path,
    )
    return TuneReport(
        run_id="r",
        module_name="mlp",
        results=(wide,),
        failures=(failure,),
        decision="statistical",
    )


@pytest.mark.parametrize("width", [80, 100, 120, 160])
def test_backend_names_and_log_paths_are_never_split(width: int) -> None:
    text = _render(_run(), width)
    lines = text.splitlines()
    assert any(LONG_NAME in line for line in lines), text
    assert any("TorchCompileBackend(mode=max-autotune-no-cudagraphs)" in line for line in lines)
    assert any(LOG in line for line in lines), text  # copyable as one piece


@pytest.mark.parametrize("width", [80, 160])
def test_reasons_wrap_on_words(width: int) -> None:
    reason = "outputs differ from eager: max abs error 2.5e-01 exceeds atol " + "x" * 5
    text = _render(_run(reason=reason + " and more words to wrap " * 6), width)
    words = {w for line in text.splitlines() for w in line.split()}
    assert set(reason.split()) <= words


def test_a_truncated_reason_says_where_the_full_text_is() -> None:
    reason = "mismatch at " + ", ".join(f"[{i}] 2.{i:04d}" for i in range(200))
    assert len(reason) > MAX_REASON
    text = _render(_run(reason=reason), 160)
    flat = " ".join(text.split())
    assert "… (full text in log [1])" in flat
    assert f"[1] {LOG}" in text
    # without a log file, --format json has it
    text = _render(_run(reason=reason, path=None), 160)
    assert "… (full text: --format json)" in " ".join(text.split())


def test_logs_listed_once_each() -> None:
    run = _run()
    twice = TuneReport(
        run_id="r", module_name="m", failures=(run.failures[0], run.failures[0]), decision="point"
    )
    text = _render(twice, 160)
    assert text.count(LOG) == 1


def test_json_selected_summary_equals_the_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """11.17x vs 16.84x: the JSON's summary quoted the mean-latency ratio, the table the
    estimate the verdict was decided on. Now both say the estimate; AITune's line is kept."""
    fast = fake_result("F()", estimate=16.84, ci_low=15.0, ci_high=18.0, verdict="faster")
    fast_speedup = fast.speedup
    path = write_log(tmp_path, fake_log(results=(fast,), selected="F()", outcome="candidate"))
    assert main(["report", str(path)]) == 0
    table_last = capsys.readouterr().out.strip().splitlines()[-1]
    assert main(["report", str(path), "--format", "json"]) == 0
    run = json.loads(capsys.readouterr().out)["runs"][0]
    assert run["selected_summary"] == table_last
    assert "16.84x" in run["selected_summary"]
    assert run["selected_estimate"] == 16.84
    assert run["selected_speedup"] == fast_speedup
    assert f"{fast_speedup:.2f}x" in run["selected_summary_aitune"]


def test_run_dict_of_a_baseline_selection() -> None:
    run = TuneReport(
        run_id="r",
        module_name="m",
        selected_backend="TorchEagerBackend()",
        selected_is_baseline=True,
        selected_summary="ℹ️ Baseline was selected: TorchEagerBackend()",
    )
    doc = run_dict(run)
    assert doc["selected_summary"] == final_line(run).plain
    assert doc["selected_estimate"] is None and doc["selected_speedup"] is None


def test_unavailable_reads_naturally() -> None:
    buf = io.StringIO()
    progress = TuneProgress(
        Console(file=buf, width=160, force_terminal=False), quiet=False, candidates=[]
    )
    progress(
        CandidateFailed(
            run_id="r",
            module_name="m",
            backend_description="CudaGraphBackend()",
            stage="unavailable",
            error_type="BackendUnavailableError",
            reason="CudaGraphBackend needs a CUDA device",
            traceback_path=None,
        ).to_event()
    )
    line = buf.getvalue().strip()
    assert "failed at unavailable" not in line
    assert "CudaGraphBackend() is unavailable here: CudaGraphBackend needs a CUDA device" in line


def test_first_wins_says_what_it_did_not_try() -> None:
    from aitune_fp.cli.rendering import not_tried

    fast = fake_result(
        "OnnxRuntimeBackend()", estimate=1.5, ci_low=1.4, ci_high=1.6, verdict="faster"
    )
    run = TuneReport(
        run_id="r",
        module_name="m",
        results=(fast,),
        selected_backend="OnnxRuntimeBackend()",
        selected_is_baseline=False,
        decision="statistical",
    )
    candidates = ["OnnxRuntimeBackend()", "TorchCompileBackend()"]
    notes = not_tried(run, candidates, "first-wins")
    assert notes == [("TorchCompileBackend()", "first-wins stopped at OnnxRuntimeBackend()")]
    text = _render_with(run, notes)
    assert "TorchCompileBackend() not tried: first-wins stopped at OnnxRuntimeBackend()" in text
    assert run_dict(run, not_tried=notes)["not_tried"] == [
        {"backend_description": "TorchCompileBackend()", "reason": notes[0][1]}
    ]
    assert not_tried(run, candidates[:1], "first-wins") == []


def _render_with(run: TuneReport, notes: list[tuple[str, str]]) -> str:
    buf = io.StringIO()
    console = Console(file=buf, width=160, force_terminal=False, color_system=None)
    print_parts(console, render_run(run, not_tried=notes))
    return buf.getvalue()


def _gfm_tables(text: str) -> list[list[list[str]]]:
    """The tables of ``text`` as a GFM parser (markdown-it-py) reads them: rows of cell texts."""
    from markdown_it import MarkdownIt

    tokens = MarkdownIt("commonmark").enable("table").parse(text)
    tables: list[list[list[str]]] = []
    row: list[str] = []
    for i, tok in enumerate(tokens):
        if tok.type == "table_open":
            tables.append([])
        elif tok.type == "tr_open":
            row = []
        elif tok.type in ("th_open", "td_open"):
            row.append(tokens[i + 1].content)
        elif tok.type == "tr_close":
            tables[-1].append(row)
    return tables


def test_markdown_run_is_a_gfm_table() -> None:
    from aitune_fp.cli.rendering import markdown_run

    run = _run(reason="a | pipe\nand a newline")
    text = markdown_run(run, not_tried=[("X()", "first-wins stopped at Y()")])
    results, failures = _gfm_tables(text)
    assert results[0][:5] == [
        "Backend",
        "Eager/s",
        "Candidate/s",
        "Speedup [98% CI]",
        "Verdict",
    ]
    assert results[1][0] == LONG_NAME
    assert results[1][3] == "0.95x [0.892, 0.999]"
    assert len(failures) == 2 and len(failures[1]) == 5
    assert failures[1][3] == "a | pipe and a newline"  # one line, the pipe escaped
    assert failures[1][4] == LOG
    assert "- X() not tried: first-wins stopped at Y()" in text


@pytest.mark.parametrize(
    "argv",
    [
        ["check", "--baseline", "100", "--candidate", "112", "--threshold", "5"],
        ["report", "{log}"],
    ],
)
def test_commands_write_markdown(
    argv: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fast = fake_result("F()", estimate=1.52, ci_low=1.44, ci_high=1.61, verdict="faster")
    log = write_log(
        tmp_path, fake_log(results=(fake_result(), fast), selected="F()", outcome="candidate")
    )
    main([a.format(log=log) for a in argv] + ["--format", "markdown"])
    out = capsys.readouterr().out
    tables = _gfm_tables(out)
    assert tables, out
    assert all(len(row) == len(table[0]) for table in tables for row in table)
    if argv[0] == "report":
        assert [row[0] for row in tables[0][1:]] == ["B()", "F()"]
    else:
        assert tables[0][1][0] == "met"


def test_sweep_summary_markdown() -> None:
    from types import SimpleNamespace

    from aitune_fp.cli.sweep import _summary_markdown

    cell = SimpleNamespace(verdict="faster", estimate=1.5, ci_low=1.4, ci_high=1.6, note="")
    summary = SimpleNamespace(
        backends=["compile", "eager-bf16"],
        models=["mlp", "broken"],
        failed=[SimpleNamespace(model="broken", error_type="RuntimeError", reason="a|b")],
        cell=lambda model, backend: cell if backend == "compile" else None,
    )
    (table,) = _gfm_tables(_summary_markdown("s", summary))
    assert table == [
        ["Model", "compile", "eager-bf16"],
        ["mlp", "faster 1.50x [1.400, 1.600]", "—"],
        ["broken", "failed: RuntimeError: a|b", ""],
    ]


@pytest.mark.slow
def test_tune_markdown_parses_as_gfm(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A real (tiny) tune with --format markdown: one results table, every row complete."""
    argv = ["tune", "--backends", "eager", "--max-seconds", "5", "--looks", "10,20", "-q"]
    assert main([*argv, "--cache-dir", str(tmp_path), "--format", "markdown"]) == 0
    out = capsys.readouterr().out
    (results,) = _gfm_tables(out)
    assert results[0][0] == "Backend" and results[1][0] == "TorchEagerBackend()"
    assert all(len(row) == 6 for row in results)  # the glance: -v adds the rest
    assert out.startswith("### mlp")


def test_the_live_display_estimates_the_time_left_to_the_last_look() -> None:
    """Issue 35: an ETA beside the pairs, from the pace of the pairs timed so far."""
    now = [100.0]
    progress = TuneProgress(
        Console(file=io.StringIO(), width=160, force_terminal=True),
        quiet=False,
        candidates=["C()"],
        clock=lambda: now[0],
    )
    progress(
        PhaseEntered(
            run_id="r", module_name="m", backend_description="C()", phase="measure"
        ).to_event()
    )
    now[0] = 110.0  # 20 pairs in 10 s: 300 more take about 150 s

    def look(n_pairs: int) -> str:
        progress(
            Look(
                run_id="r",
                module_name="m",
                backend_description="C()",
                n_pairs=n_pairs,
                max_pairs=320,
                verdict="inconclusive",
                estimate=1.0,
                ci_low=0.9,
                ci_high=1.1,
            ).to_event()
        )
        return str(progress.progress.tasks[0].fields["phase"])

    assert look(20) == "measure 20/320 pairs [0.900, 1.100], at most about 150 s left"
    assert look(320) == "measure 320/320 pairs [0.900, 1.100]"


def test_a_row_decided_on_no_pairs_shows_no_rates() -> None:
    """An ``inconclusive`` row whose budget ended before any pair (0 pairs) has no timed rates:
    what the warm-up read is not shown as eager's and the candidate's samples/s."""
    from aitune_fp.cli.rows import result_rows

    none = fake_result(
        "N()", estimate=None, ci_low=None, ci_high=None, verdict="inconclusive", n_baseline=0
    )
    timed = fake_result("T()", n_baseline=20)
    _, (empty, kept) = result_rows([none, timed])
    assert empty[1:3] == ("—", "—")
    assert kept[1:3] != ("—", "—")
