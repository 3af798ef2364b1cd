"""The built-in backend registry: one entry per name, what it builds, where it runs, the defaults."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import types
from pathlib import Path

import attrs
import pytest

from aitune_fp.backends import registry
from aitune_fp.backends.eager import TorchEagerBackend
from aitune_fp.backends.protocol import Backend
from aitune_fp.backends.registry import (
    BACKENDS,
    BackendChoiceError,
    BackendEntry,
    backend_names,
    check_backend,
    default_backends,
    make_backend,
)
from aitune_fp.cli import main

#: The names the CLI has always accepted; the registry must keep every one of them.
KNOWN = {
    "eager",
    "eager-bf16",
    "eager-fp16",
    "int8-dynamic",
    "int8-weight-only",
    "channels-last",
    "compile",
    "compile-bf16",
    "compile-max-autotune",
    "onnxruntime",
    "aot-inductor",
    "cuda-graphs",
    "compile-reduce-overhead",
}


class TestEntries:
    def test_names_are_the_known_ones(self) -> None:
        """The registry holds the CLI's historical names (a new entry adds one), each under its own name."""
        assert set(backend_names()) >= KNOWN
        assert backend_names() == tuple(BACKENDS)
        assert all(entry.name == name for name, entry in BACKENDS.items())

    @pytest.mark.parametrize("name", sorted(BACKENDS))
    def test_every_entry_builds_a_backend(self, name: str) -> None:
        """Each factory returns a fresh, unbuilt Backend whose describe() is a string."""
        entry = BACKENDS[name]
        first, second = entry.factory(), entry.factory()
        assert isinstance(first, Backend)
        assert isinstance(first.describe(), str) and first.describe()
        assert first is not second
        assert entry.summary

    @pytest.mark.parametrize("name", sorted(KNOWN))
    def test_make_backend_on_each_allowed_device(self, name: str) -> None:
        """make_backend builds the entry's backend on every device kind it declares."""
        for device in BACKENDS[name].devices:
            backend = make_backend(name, device)
            assert backend.describe() == BACKENDS[name].factory().describe()

    def test_cuda_only_backends(self) -> None:
        """CUDA graphs (directly or through compile's reduce-overhead) need CUDA; the rest don't."""
        cuda_only = {n for n, e in BACKENDS.items() if e.devices == {"cuda"}}
        cpu_only = {n for n, e in BACKENDS.items() if e.devices == {"cpu"}}
        assert cuda_only == {"cuda-graphs", "compile-reduce-overhead"}
        assert cpu_only == {"int8-dynamic"}  # PyTorch's dynamic quantized kernels are CPU kernels
        assert all(
            e.devices == {"cpu", "cuda"}
            for n, e in BACKENDS.items()
            if n not in cuda_only | cpu_only
        )

    def test_mapping_is_read_only(self) -> None:
        """BACKENDS cannot be changed in place: a new backend is a new entry in the source."""
        with pytest.raises(TypeError):
            BACKENDS["x"] = BACKENDS["eager"]  # type: ignore[index]

    def test_entry_is_frozen(self) -> None:
        """An entry is a value: its fields cannot be reassigned."""
        with pytest.raises(attrs.exceptions.FrozenInstanceError):
            BACKENDS["eager"].name = "other"  # type: ignore[misc]

    @pytest.mark.parametrize(
        ("devices", "default_on", "match"),
        [
            (frozenset(), frozenset(), "devices must not be empty"),
            (frozenset({"tpu"}), frozenset(), "frozenset of"),
            (frozenset({"cpu"}), frozenset({"cuda"}), "not a subset"),
        ],
    )
    def test_entry_refuses_inconsistent_devices(
        self, devices: frozenset[str], default_on: frozenset[str], match: str
    ) -> None:
        """An entry that runs nowhere, on an unknown device, or defaults where it can't run fails."""
        with pytest.raises(ValueError, match=match):
            BackendEntry("x", TorchEagerBackend, devices, default_on)


class TestDefaults:
    @pytest.mark.parametrize("device", ["cpu", "cuda"])
    def test_defaults_are_allowed_names(self, device: str) -> None:
        """Every default is a registered name that runs on that device."""
        defaults = default_backends(device)
        assert defaults
        assert set(defaults) <= set(backend_names())
        assert all(device in BACKENDS[n].devices for n in defaults)

    def test_defaults_keep_their_order(self) -> None:
        """The default candidates, in the order first-wins tries them (int8 only on CPU)."""
        assert default_backends("cpu") == ("compile", "eager-bf16", "int8-dynamic")
        assert default_backends("cuda") == (
            "compile",
            "eager-bf16",
            "eager-fp16",
            "int8-weight-only",
            "onnxruntime",
            "cuda-graphs",
            "compile-reduce-overhead",
        )

    def test_cuda_defaults_cover_what_the_issue_asks(self) -> None:
        """CUDA graphs, reduce-overhead compile, bf16 and fp16, int8, ONNX Runtime's CUDA provider."""
        cuda = {n: BACKENDS[n].factory().describe() for n in default_backends("cuda")}
        assert cuda["cuda-graphs"] == "CudaGraphBackend()"
        assert cuda["compile-reduce-overhead"] == "TorchCompileBackend(mode=reduce-overhead)"
        assert cuda["eager-bf16"] == "TorchEagerBackend(dtype=torch.bfloat16)"
        assert cuda["eager-fp16"] == "TorchEagerBackend(dtype=torch.float16)"
        assert cuda["int8-weight-only"] == "Int8DynamicBackend(scheme=weight-only)"
        assert cuda["onnxruntime"] == "OnnxRuntimeBackend()"

    def test_indexed_cuda_device(self) -> None:
        """A ``cuda:N`` device is of kind cuda."""
        assert default_backends("cuda:1") == default_backends("cuda")
        assert check_backend("cuda-graphs", "cuda:0") is BACKENDS["cuda-graphs"]

    def test_unknown_device(self) -> None:
        """A device kind no backend knows is refused, naming it and the known ones."""
        with pytest.raises(BackendChoiceError, match=r"unknown device 'tpu'.*cpu, cuda"):
            default_backends("tpu")


class TestErrors:
    def test_unknown_name(self) -> None:
        """An unknown name raises a ValueError (not KeyError) naming it and every valid name."""
        with pytest.raises(ValueError, match="unknown backend 'warp-drive'") as info:
            make_backend("warp-drive", "cpu")
        assert isinstance(info.value, BackendChoiceError)
        assert not isinstance(info.value, KeyError)
        assert all(name in str(info.value) for name in KNOWN)

    @pytest.mark.parametrize("name", ["cuda-graphs", "compile-reduce-overhead"])
    def test_cuda_only_on_cpu(self, name: str) -> None:
        """A CUDA-only backend asked for on CPU is refused, saying where it runs."""
        with pytest.raises(BackendChoiceError, match=f"backend '{name}' runs on cuda only"):
            make_backend(name, "cpu")

    def test_cli_reports_cuda_only_on_cpu(self, capsys: pytest.CaptureFixture[str]) -> None:
        """The CLI turns a wrong-device choice into a one-line usage error (exit 2)."""
        assert main(["tune", "--device", "cpu", "--backends", "cuda-graphs"]) == 2
        err = capsys.readouterr().err
        assert "--backends: backend 'cuda-graphs' runs on cuda only, not on cpu" in err
        assert len(err.strip().splitlines()) == 1


class TestPublicSurface:
    def test_docs_example_runs(self) -> None:
        """The registry example in docs/backends.md runs and its comments tell the truth."""
        text = (Path(__file__).parent.parent / "docs" / "backends.md").read_text()
        section = text[text.index("## Backends by name") :]
        block = re.search(r"```python\n(.*?)```", section, re.S)
        assert block is not None
        namespace: dict[str, object] = {"__name__": "docs_registry"}
        exec(compile(block.group(1), "docs/backends.md", "exec"), namespace)
        backend = namespace["backend"]
        assert isinstance(backend, Backend)
        assert backend.describe() == "TorchCompileBackend(dtype=torch.bfloat16)"
        with pytest.raises(BackendChoiceError, match="runs on cuda only, not on cpu"):
            make_backend("cuda-graphs", "cpu")
        for name in KNOWN:
            assert f"| `{name}` |" in section

    def test_registry_does_not_import_torch(self) -> None:
        """Names, defaults and the CLI's help read the registry without importing torch."""
        code = (
            "import sys\n"
            "from aitune_fp.backends.registry import backend_names, default_backends\n"
            "from aitune_fp.cli import build_parser\n"
            "build_parser().format_help()\n"
            "print(len(backend_names()), default_backends('cpu'))\n"
            "assert 'torch' not in sys.modules, 'torch was imported'\n"
        )
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=False
        )
        assert out.returncode == 0, out.stderr


class TestAddingABackend:
    """A new built-in backend is one registry entry: the CLI needs no other change."""

    @pytest.fixture
    def built(self, monkeypatch: pytest.MonkeyPatch) -> list[Backend]:
        """Register ``eager-copy`` (CPU only, no default) in a copy of the mapping."""
        made: list[Backend] = []

        def factory() -> Backend:
            backend = TorchEagerBackend()
            made.append(backend)
            return backend

        entry = BackendEntry(
            "eager-copy", factory, frozenset({"cpu"}), frozenset(), "a test-only backend"
        )
        monkeypatch.setattr(
            registry, "BACKENDS", types.MappingProxyType({**BACKENDS, entry.name: entry})
        )
        return made

    def test_listed_in_help(self, built: list[Backend], capsys: pytest.CaptureFixture[str]) -> None:
        """``tune --help`` lists the new name; the defaults stay the same."""
        with pytest.raises(SystemExit) as info:
            main(["tune", "--help"])
        assert info.value.code == 0
        assert "eager-copy" in "".join(capsys.readouterr().out.split())  # wrapped at hyphens
        assert "eager-copy" not in default_backends("cpu")
        assert built == []

    def test_cli_accepts_and_builds_it(
        self, built: list[Backend], tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """``--backends eager-copy`` is accepted, constructed through the entry and tuned."""
        rc = main(
            [
                "tune",
                "--device",
                "cpu",
                "--backends",
                "eager-copy",
                "--strategy",
                "one",
                "--decision",
                "point",
                "--warmup-calls",
                "1",
                "--steps",
                "2",
                "--format",
                "json",
                "--quiet",
                "--cache-dir",
                str(tmp_path),
            ]
        )
        out = capsys.readouterr().out
        assert rc == 0
        assert len(built) == 1
        doc = json.loads(out)
        assert doc["command"] == "tune"
        assert "TorchEagerBackend()" in out

    def test_cli_refuses_it_on_cuda(self, built: list[Backend]) -> None:
        """The new entry's devices are enforced like any built-in's."""
        with pytest.raises(BackendChoiceError, match="runs on cpu only, not on cuda"):
            check_backend("eager-copy", "cuda")
        assert built == []


class TestSettings:
    def test_compile_takes_its_settings(self) -> None:
        """Settings reach torch.compile's options; the description shows them."""
        from aitune_fp.backends.registry import make_backend

        backend = make_backend("compile", "cpu", {"mode": "max-autotune", "fullgraph": True})
        assert backend.describe() == "TorchCompileBackend(mode=max-autotune,fullgraph=True)"

    @pytest.mark.parametrize(
        ("name", "settings", "words"),
        [
            ("eager", {"dtype": "bfloat16"}, "has no setting 'dtype' (settings it takes: none)"),
            ("compile", {"mode": "fast"}, "setting 'mode' must be one of"),
            ("compile", {"dynamic": 1}, "setting 'dynamic' must be one of True, False, got 1"),
            ("warp", {}, "unknown backend 'warp'"),
        ],
    )
    def test_bad_settings_are_refused_by_name(
        self, name: str, settings: dict[str, object], words: str
    ) -> None:
        """An unknown setting or value is a BackendChoiceError naming backend, key and value."""
        from aitune_fp.backends.registry import check_settings

        with pytest.raises(BackendChoiceError) as info:
            check_settings(name, settings)
        assert words in str(info.value)
