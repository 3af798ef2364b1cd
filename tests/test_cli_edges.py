"""Issue 26, edge values: the same rules in ``tune``, ``check`` and sweep files.

A threshold no candidate could pass is refused (exit 2, naming the value); a negative one warns
in every command; confidence levels print with the precision they have; conflicting flags and a
plot path that cannot be written are usage errors found before anything is printed on stdout.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aitune_fp.cli import main
from aitune_fp.cli.check import threshold_warning
from aitune_fp.core.messages import fmt_level
from aitune_fp.core.speedup import MAX_REQUIRED_SPEEDUP, MAX_THRESHOLD_PERCENT
from aitune_fp.errors import InvalidValueError


def _times(tmp_path: Path) -> list[str]:
    base = [0.010 + 0.0001 * (i % 7) for i in range(40)]
    (tmp_path / "b.txt").write_text("\n".join(map(str, base)))
    (tmp_path / "c.txt").write_text("\n".join(str(t * 0.999) for t in base))
    return [
        "--baseline-times",
        str(tmp_path / "b.txt"),
        "--candidate-times",
        str(tmp_path / "c.txt"),
    ]


class TestThresholdCap:
    def test_cap_is_a_required_speedup_of_1000x(self) -> None:
        assert MAX_REQUIRED_SPEEDUP == 1000.0
        assert 1 + MAX_THRESHOLD_PERCENT / 100 == MAX_REQUIRED_SPEEDUP

    def test_sweep_files_use_the_same_cap(self) -> None:
        from aitune_fp.sweep.spec import parse_sweep

        assert parse_sweep({"models": ["mlp"], "threshold": MAX_THRESHOLD_PERCENT}).threshold
        with pytest.raises(InvalidValueError, match="threshold"):
            parse_sweep({"models": ["mlp"], "threshold": MAX_THRESHOLD_PERCENT + 1})

    @pytest.mark.parametrize("command", ["tune", "check"])
    @pytest.mark.parametrize("value", ["1e308", "99900.5", "1e6"])
    def test_unreachable_threshold_refused(
        self, command: str, value: str, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """Refused before anything runs: exit 2, one line naming the value and the cap."""
        extra = ["--baseline", "1", "--candidate", "2"] if command == "check" else []
        assert main([command, *extra, "--threshold", value]) == 2
        captured = capsys.readouterr()
        assert captured.out == ""
        err = captured.err.strip()
        assert len(err.splitlines()) == 1
        assert f"--threshold {float(value):.12g}" in err  # as typed, up to 12 digits
        assert "1000x" in err and "99900" in err
        assert "0" * 20 not in err  # no 300-digit number

    def test_the_cap_itself_is_allowed(self, capsys: pytest.CaptureFixture[str]) -> None:
        argv = ["check", "--baseline", "1", "--candidate", "1000", "--threshold", "99900"]
        assert main(argv) == 0
        assert "1000x" in capsys.readouterr().out

    def test_sweep_file_refused(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        path = tmp_path / "s.toml"
        path.write_text('threshold = 1e308\n[[models]]\nmodel = "mlp"\n', encoding="utf-8")
        assert main(["sweep", str(path), "--log", str(tmp_path / "e.jsonl")]) == 2
        err = capsys.readouterr().err
        assert "threshold" in err and "1e+308" in err and "1000x" in err


class TestNegativeThreshold:
    @given(st.floats(min_value=-99.99, max_value=MAX_THRESHOLD_PERCENT))
    def test_warning_exactly_when_negative(self, value: float) -> None:
        warning = threshold_warning(value)
        assert (warning is not None) == (value < 0)
        if warning is not None:
            assert f"{-value:.4g} % slower" in warning

    def test_check_warns_as_tune_does(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        assert main(["check", "--baseline", "100", "--candidate", "97", "--threshold=-5"]) == 0
        captured = capsys.readouterr()
        assert "warning: --threshold -5 accepts candidates up to 5 % slower" in captured.err
        assert "warning" not in captured.out
        assert main(["check", *_times(tmp_path), "--paired", "--threshold=-5"]) in (0, 1, 3)
        assert "5 % slower" in capsys.readouterr().err

    def test_sweep_warns(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The warning comes from the file's threshold, before any model runs."""
        import aitune_fp.sweep.run

        class StopError(Exception):
            pass

        def stop(*args: object, **kwargs: object) -> None:
            raise StopError

        monkeypatch.setattr(aitune_fp.sweep.run, "run_sweep", stop)
        path = tmp_path / "s.toml"
        path.write_text('threshold = -5\n[[models]]\nmodel = "mlp"\n', encoding="utf-8")
        assert main(["sweep", str(path), "--log", str(tmp_path / "e.jsonl"), "-q"]) == 70
        assert "threshold -5 accepts candidates up to 5 % slower" in capsys.readouterr().err


class TestConfidencePrecision:
    @given(st.floats(min_value=1e-6, max_value=1 - 1e-6))
    def test_level_never_rounds_to_an_end(self, level: float) -> None:
        text = fmt_level(level)
        assert text.endswith("%")
        shown = float(text[:-1]) / 100
        assert 0 < shown < 1
        assert text not in ("100%", "0%")

    @given(st.integers(min_value=1, max_value=9999))
    def test_exact_levels_print_exactly(self, basis_points: int) -> None:
        level = basis_points / 10000
        assert float(fmt_level(level)[:-1]) == pytest.approx(basis_points / 100, abs=1e-9)

    @pytest.mark.parametrize(
        ("level", "text"), [(0.95, "95%"), (0.975, "97.5%"), (0.995, "99.5%"), (0.9999, "99.99%")]
    )
    def test_examples(self, level: float, text: str) -> None:
        assert fmt_level(level) == text

    @pytest.mark.parametrize("fmt", ["table", "json"])
    def test_check_confidence_099(
        self, fmt: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        argv = ["check", *_times(tmp_path), "--paired", "--confidence", "0.99", "--format", fmt]
        main(argv)
        out = capsys.readouterr().out
        assert "100%" not in out and "100 %" not in out
        if fmt == "json":
            doc = json.loads(out)
            assert "99.5%" in doc["ruled_out"] or "too few" in doc["ruled_out"]
            assert doc["confidence"] == 0.99
        else:
            assert "99% CI" in out
            assert re.search(r"ruled out at 99\.5%", out)


class TestFlagsAndPaths:
    def test_paired_and_unpaired_conflict(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        assert main(["check", *_times(tmp_path), "--paired", "--unpaired"]) == 2
        err = capsys.readouterr().err
        assert "--paired and --unpaired conflict" in err
        assert "say how" not in err

    @pytest.mark.parametrize("target", ["/nonexistent/dir/x.png", "{tmp}/file.txt/x.png"])
    def test_plot_into_a_missing_directory(
        self, target: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        import matplotlib  # noqa: F401  # an extra README's set-up installs: never skipped

        (tmp_path / "file.txt").write_text("")
        from tests.factories import fake_log, fake_result, write_log

        log = write_log(tmp_path, fake_log(results=(fake_result(),)))
        path = target.format(tmp=tmp_path)
        assert main(["report", str(log), "--plot", path]) == 2
        captured = capsys.readouterr()
        assert captured.out == ""  # checked before the tables
        assert path in captured.err and "--plot" in captured.err
