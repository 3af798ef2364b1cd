"""``aitune-fp tune``'s up-front eager call also checks that eager's output can be compared.

An output structure the correctness check cannot compare is found there, before any candidate
is built: one line naming the type and the fix, exit 2. A registered pytree output passes it.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from aitune_fp.cli import main

OPAQUE_MODEL = """
import torch

class Opaque:
    def __init__(self, tensor):
        self.tensor = tensor

class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)

    def forward(self, x):
        return {"logits": self.linear(x), "cache": Opaque(x)}

def make():
    return Model(), torch.ones(2, 4)
"""

#: A model returning a cache object that registers itself, as transformers' DynamicCache does.
CACHE_MODEL = """
import torch
from torch.utils import _pytree

class Cache:
    def __init__(self, keys):
        self.key_cache = list(keys)

if Cache not in _pytree.SUPPORTED_NODES:
    _pytree.register_pytree_node(
        Cache,
        lambda c: ([c.key_cache], None),
        lambda children, _: Cache(children[0]),
        flatten_with_keys_fn=lambda c: ([(_pytree.GetAttrKey("key_cache"), c.key_cache)], None),
    )

class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)

    def forward(self, x):
        hidden = self.linear(x)
        return {"logits": hidden, "cache": Cache([hidden, hidden * 2])}

def make():
    return Model(), torch.ones(2, 4)
"""


@pytest.fixture
def no_candidates(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail the test if any candidate backend is made."""
    from aitune_fp.backends import registry

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("a candidate was made before the output check")

    monkeypatch.setattr(registry, "make_candidate", refuse)
    monkeypatch.setattr(registry, "make_backend", refuse)


def test_an_output_that_cannot_be_compared_exits_2_before_any_candidate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], no_candidates: None
) -> None:
    path = tmp_path / "opaque_model.py"
    path.write_text(OPAQUE_MODEL)
    argv = ["tune", "--model", f"{path}:make", "--backends", "eager", "-q"]
    assert main([*argv, "--cache-dir", str(tmp_path / "c")]) == 2
    captured = capsys.readouterr()
    (line,) = captured.err.strip().splitlines()
    assert line.startswith("aitune-fp: error: ")
    assert "output['cache']" in line
    assert "Opaque" in line
    assert "register_pytree_node" in line
    assert captured.out == ""


def test_a_registered_cache_output_passes_the_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The up-front check accepts a pytree output: the tune goes on to make its candidates."""
    from aitune_fp.backends import registry
    from aitune_fp.cli._shared import UsageError

    def reached(*args: object, **kwargs: object) -> None:
        raise UsageError("stopped at the first candidate")

    monkeypatch.setattr(registry, "make_candidate", reached)
    path = tmp_path / "cache_model.py"
    path.write_text(CACHE_MODEL)
    argv = ["tune", "--model", f"{path}:make", "--backends", "eager", "-q"]
    assert main([*argv, "--cache-dir", str(tmp_path / "c")]) == 2
    *notes, line = capsys.readouterr().err.strip().splitlines()
    assert line == "aitune-fp: error: stopped at the first candidate"
    assert all(note.startswith("note: ") for note in notes)  # e.g. it came in training mode


def test_importable_factory_on_the_command_line(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    no_candidates: None,
) -> None:
    """``--model package.module:factory`` reaches the loader (here: up to the output check)."""
    package = tmp_path / "zoo_cli_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "models.py").write_text(OPAQUE_MODEL)
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        argv = ["tune", "--model", "zoo_cli_pkg.models:make", "--backends", "eager", "-q"]
        assert main([*argv, "--cache-dir", str(tmp_path / "c")]) == 2  # its Opaque output
        (line,) = capsys.readouterr().err.strip().splitlines()
        assert "cannot compare an output of type zoo_cli_pkg.models.Opaque" in line
    finally:
        for name in [n for n in sys.modules if n.startswith("zoo_cli_pkg")]:
            del sys.modules[name]


def test_a_missing_module_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], no_candidates: None
) -> None:
    argv = ["tune", "--model", "zoo_nowhere_cli.models:make", "--backends", "eager", "-q"]
    assert main([*argv, "--cache-dir", str(tmp_path / "c")]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "cannot import module 'zoo_nowhere_cli.models'" in line
