"""Embedded models and loading a user's model from a file."""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from aitune_fp.inputs import Sample
from aitune_fp.models import (
    DEFAULT_MODEL,
    MODELS,
    UserModelError,
    load_model,
    load_user_model,
    model_source,
    resolve_factory,
)


class TestEmbeddedModels:
    @pytest.mark.parametrize("name", sorted(MODELS))
    def test_model_runs_on_its_batched_sample(self, name: str) -> None:
        """Each embedded model is in eval mode and runs on its sample batched to the max size."""
        model = MODELS[name]()
        assert model.name == name
        assert not model.module.training
        size = model.graph_spec.get_max_batch_size()
        batch = model.graph_spec.make_batch(model.sample, size)
        with torch.no_grad():
            out = batch.call(model.module)
        assert out.shape[0] == size
        assert torch.isfinite(out).all()

    @pytest.mark.parametrize("name", sorted(MODELS))
    def test_model_is_deterministic_and_leaves_global_rng(self, name: str) -> None:
        """Two builds have equal weights and samples; the global RNG state is untouched."""
        state = torch.random.get_rng_state()
        first, second = MODELS[name](), MODELS[name]()
        assert torch.equal(torch.random.get_rng_state(), state)
        for a, b in zip(first.module.parameters(), second.module.parameters(), strict=True):
            assert torch.equal(a, b)
        assert torch.equal(first.sample.args[0], second.sample.args[0])

    def test_default_is_registered(self) -> None:
        """The default model name is in the registry."""
        assert DEFAULT_MODEL in MODELS


def _write(tmp_path: Path, body: str) -> str:
    path = tmp_path / "user_model.py"
    path.write_text(body)
    return str(path)


MODULE_ONLY = """
import torch
def make():
    return torch.nn.Linear(8, 4)
"""

WITH_SAMPLE = """
import torch
def make():
    return torch.nn.Linear(8, 4), torch.ones(6, 8)
"""


class TestLoadUserModel:
    def test_module_with_input_shape(self, tmp_path: Path) -> None:
        """A factory returning a module gets a random input of --input-shape; batch = first dim."""
        model = load_user_model(_write(tmp_path, MODULE_ONLY) + ":make", input_shape=(3, 8))
        assert isinstance(model.module, torch.nn.Linear)
        assert model.sample.args[0].shape == (3, 8)
        assert model.graph_spec.get_max_batch_size() == 3
        assert model.name == "make"

    def test_a_training_model_is_put_in_eval_and_that_is_recorded(self, tmp_path: Path) -> None:
        """A factory's module in training mode is evaluated in eval mode; the CLI is told."""
        model = load_user_model(_write(tmp_path, MODULE_ONLY) + ":make", input_shape=(3, 8))
        assert model.was_training and not model.module.training
        body = MODULE_ONLY.replace("torch.nn.Linear(8, 4)", "torch.nn.Linear(8, 4).eval()")
        assert not load_user_model(
            _write(tmp_path, body) + ":make", input_shape=(3, 8)
        ).was_training

    def test_the_cli_says_a_training_model_is_validated_in_eval(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        from aitune_fp.cli import main

        spec = _write(tmp_path, MODULE_ONLY) + ":make"
        argv = ["tune", "--model", spec, "--input-shape", "4,8", "--backends", "eager-bf16",
                "--strategy", "one", "--max-seconds", "2", "--looks", "10,20",
                "--cache-dir", str(tmp_path / "cache")]  # fmt: skip
        code = main(argv)
        err = capsys.readouterr().err
        assert code == 0, err
        assert "came in training mode; it is validated in eval mode" in err

    def test_module_and_sample(self, tmp_path: Path) -> None:
        """A factory returning (module, tensor) uses that tensor as the sample."""
        model = load_user_model(_write(tmp_path, WITH_SAMPLE) + ":make", max_batch_size=12)
        assert isinstance(model.sample, Sample)
        assert torch.equal(model.sample.args[0], torch.ones(6, 8))
        assert model.graph_spec.get_max_batch_size() == 12

    @pytest.mark.parametrize(
        ("body", "spec_suffix", "kwargs", "match"),
        [
            (MODULE_ONLY, ":nope", {"input_shape": (1, 8)}, "no factory named 'nope'"),
            (MODULE_ONLY, ":make", {}, "input-shape"),
            (WITH_SAMPLE, ":make", {"input_shape": (1, 8)}, "drop --input-shape"),
            (
                "def make():\n    raise RuntimeError('kaput')\n",
                ":make",
                {},
                "raised RuntimeError: kaput",
            ),
            ("def make():\n    return 42\n", ":make", {}, "must return a torch.nn.Module"),
            ("x = = 1\n", ":make", {}, "importing model file"),
            ("import torch\nmake = 3\n", ":make", {}, "not callable"),
            (
                "import torch\ndef make():\n    return torch.nn.Linear(2, 2), 'text'\n",
                ":make",
                {},
                "sample",
            ),
            (MODULE_ONLY, ":make", {"input_shape": (0, 8)}, "positive ints"),
        ],
    )
    def test_errors_are_user_model_errors(
        self, tmp_path: Path, body: str, spec_suffix: str, kwargs: dict[str, object], match: str
    ) -> None:
        """Every broken factory or file is a UserModelError (a ValueError) with a clear message."""
        with pytest.raises(UserModelError, match=match):
            load_user_model(_write(tmp_path, body) + spec_suffix, **kwargs)  # type: ignore[arg-type]

    def test_missing_file(self, tmp_path: Path) -> None:
        """A path that does not exist is reported by name."""
        with pytest.raises(UserModelError, match="not found"):
            load_user_model(f"{tmp_path}/absent.py:make", input_shape=(1,))

    @pytest.mark.parametrize("spec", ["no_colon.py", ":make", "file.py:", "f.py:not-an-id"])
    def test_bad_spec(self, spec: str) -> None:
        """A spec that is not 'path:factory' is refused before anything is imported."""
        with pytest.raises(UserModelError):
            load_user_model(spec, input_shape=(1,))


# ---- importable factories: package.module:callable --------------------------------------------


def _package(root: Path, name: str, body: str) -> None:
    """A package ``name`` with a ``models`` module holding ``body``, under ``root``."""
    package = root / name
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "models.py").write_text(body)


@pytest.fixture(autouse=True)
def _forget_test_modules() -> Iterator[None]:
    """Drop the ``zoo_*`` modules a test imported, so the next test imports its own."""
    yield
    for name in [n for n in sys.modules if n.startswith("zoo_")]:
        del sys.modules[name]


class TestImportableFactory:
    def test_package_module_factory_loads(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """``pkg.models:make`` is imported from sys.path like any module, not read as a file."""
        _package(tmp_path, "zoo_pkg_a", WITH_SAMPLE)
        monkeypatch.syspath_prepend(str(tmp_path))
        model = load_model("zoo_pkg_a.models:make")
        assert isinstance(model.module, torch.nn.Linear)
        assert torch.equal(model.sample.args[0], torch.ones(6, 8))
        assert model.name == "make"
        assert not model.module.training

    def test_top_level_module_with_input_shape(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A module without a package works too, and ``input_shape`` applies as for a file."""
        (tmp_path / "zoo_mod_b.py").write_text(MODULE_ONLY)
        monkeypatch.syspath_prepend(str(tmp_path))
        model = load_model("zoo_mod_b:make", input_shape=(5, 8))
        assert model.sample.args[0].shape == (5, 8)

    @pytest.mark.parametrize(
        ("spec", "words"),
        [
            ("zoo_absent_pkg.models:make", "cannot import module 'zoo_absent_pkg.models'"),
            ("zoo_pkg_c.absent:make", "cannot import module 'zoo_pkg_c.absent'"),
            ("zoo_pkg_c.models:nope", "module 'zoo_pkg_c.models' has no factory named 'nope'"),
            ("zoo_pkg_c.models:value", "'value' in module 'zoo_pkg_c.models' is not callable"),
            ("zoo_pkg_c.broken:make", "importing model module 'zoo_pkg_c.broken' failed"),
            ("zoo pkg:make", "neither a path/to/file.py nor a module name"),
        ],
    )
    def test_errors_name_the_module_and_factory(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spec: str, words: str
    ) -> None:
        _package(tmp_path, "zoo_pkg_c", MODULE_ONLY + "value = 3\n")
        (tmp_path / "zoo_pkg_c" / "broken.py").write_text("raise RuntimeError('kaput')\n")
        monkeypatch.syspath_prepend(str(tmp_path))
        with pytest.raises(UserModelError) as info:
            load_model(spec, input_shape=(1, 8))
        assert words in str(info.value)

    def test_missing_module_says_how_to_make_it_importable(self) -> None:
        with pytest.raises(UserModelError, match="PYTHONPATH") as info:
            load_model("zoo_nowhere_xyz:make")
        assert "path/to/file.py:factory" in str(info.value)

    @pytest.mark.parametrize(
        ("spec", "kind", "target"),
        [
            ("pkg.mod:make", "module", "pkg.mod"),
            ("mod:make", "module", "mod"),
            ("model.py:make", "file", "model.py"),
            ("dir/model:make", "file", "dir/model"),
            ("./model.py:make", "file", "./model.py"),
            ("/abs/path/model.py:make", "file", "/abs/path/model.py"),
        ],
    )
    def test_source_kind(self, spec: str, kind: str, target: str) -> None:
        """A target ending in .py or holding a path separator is a file; else a module name."""
        assert model_source(spec) == (kind, target, "make")

    def test_resolve_factory_does_not_call_it(self, tmp_path: Path) -> None:
        """Resolving imports the file and finds the callable without building the model."""
        path = _write(tmp_path, "def make():\n    raise RuntimeError('built')\n")
        factory = resolve_factory(f"{path}:make")
        assert callable(factory)
        with pytest.raises(UserModelError, match="no factory named 'other'"):
            resolve_factory(f"{path}:other")

    def test_load_model_names_every_form_for_a_bad_name(self) -> None:
        with pytest.raises(UserModelError, match=r"package\.module:factory"):
            load_model("resnet")

    def test_tune_help_lists_every_model_form(
        self, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """``tune --help`` names each embedded model and both factory forms, and the two forms
        it shows are the file and the module kinds the loader tells apart."""
        from aitune_fp.cli import main

        monkeypatch.setenv("COLUMNS", "60")  # a narrow terminal: the help is wrapped
        with pytest.raises(SystemExit) as exited:
            main(["tune", "--help"])
        assert exited.value.code == 0
        text = " ".join(capsys.readouterr().out.split())
        model_help = text.split("--model MODEL ", 1)[1].split(" --input-shape INPUT_SHAPE ", 1)[0]
        for name in MODELS:
            assert re.search(rf"\b{name}\b", model_help), name
        forms = re.findall(r"[\w./]+:factory", model_help)
        assert forms == ["path/to/file.py:factory", "package.module:factory"]
        assert [model_source(form)[0] for form in forms] == ["file", "module"]
        unwrapped = "".join(model_help.split())  # argparse also breaks lines at hyphens
        assert "PYTHONPATH" in unwrapped and "--input-shape" in unwrapped


@pytest.mark.parametrize(("package", "extra"), [("transformers", "hf"), ("onnxruntime", "onnx")])
def test_a_model_file_missing_an_extras_package_says_which_extra(
    package: str, extra: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file that imports a package one of the extras installs names the pip line."""
    path = tmp_path / "m.py"
    path.write_text(f"import {package}\n\ndef factory():\n    pass\n", "utf-8")
    monkeypatch.setitem(sys.modules, package, None)  # import fails as if not installed
    with pytest.raises(UserModelError, match=re.escape(f"pip install 'aitune-fp[{extra}]'")):
        resolve_factory(f"{path}:factory")


def test_another_missing_package_gets_no_pip_hint(tmp_path: Path) -> None:
    path = tmp_path / "m.py"
    path.write_text("import no_such_package_xyz\n", "utf-8")
    with pytest.raises(UserModelError, match="no_such_package_xyz") as raised:
        resolve_factory(f"{path}:factory")
    assert "pip install" not in str(raised.value)
