"""`compile_graph`: one static-shape graph per input shape on every platform (torchair's ACL
graphs on Ascend, CUDA graphs on CUDA), and a refusal naming the missing compiler package."""

from __future__ import annotations

import importlib.util
from types import SimpleNamespace

import pytest
import torch

from npu_ops import graph_mode
from npu_ops.platform import DeviceKind


def test_npu_graph_mode_without_torchair_names_the_package(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real = importlib.util.find_spec

    def find_spec(name: str, *args: object) -> object:
        return None if name == "torchair" else real(name, *args)

    monkeypatch.setattr(graph_mode.importlib.util, "find_spec", find_spec)
    with pytest.raises(ValueError, match="needs the `torchair` package"):
        graph_mode.compile_graph(torch.nn.Identity(), DeviceKind.NPU)


def test_cpu_graph_mode_without_a_cpp_compiler_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(graph_mode.shutil, "which", lambda name: None)
    with pytest.raises(ValueError, match="C\\+\\+ compiler"):
        graph_mode.compile_graph(torch.nn.Identity(), DeviceKind.CPU)


def test_npu_graph_mode_compiles_with_torchairs_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    backend = object()
    calls: dict[str, object] = {}

    class CompilerConfig:
        pass

    def get_npu_backend(compiler_config: object) -> object:
        calls["config"] = compiler_config
        return backend

    modules = {
        "torchair": SimpleNamespace(get_npu_backend=get_npu_backend),
        "torchair.configs.compiler_config": SimpleNamespace(CompilerConfig=CompilerConfig),
    }

    def fake_compile(fn: object, **kwargs: object) -> object:
        calls.update(kwargs)
        return fn

    monkeypatch.setattr(graph_mode.importlib.util, "find_spec", lambda name: object())
    monkeypatch.setattr(graph_mode.importlib, "import_module", modules.__getitem__)
    monkeypatch.setattr(graph_mode.torch, "compile", fake_compile)
    fn = torch.nn.Identity()
    assert graph_mode.compile_graph(fn, DeviceKind.NPU) is fn
    assert calls["backend"] is backend and calls["dynamic"] is False
    assert isinstance(calls["config"], CompilerConfig)
    assert calls["config"].mode == "reduce-overhead"  # type: ignore[attr-defined]


def test_cuda_graph_mode_replays_cuda_graphs(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: dict[str, object] = {}

    def fake_compile(fn: object, **kwargs: object) -> object:
        calls.update(kwargs)
        return fn

    monkeypatch.setattr(graph_mode.importlib.util, "find_spec", lambda name: object())
    monkeypatch.setattr(graph_mode.torch, "compile", fake_compile)
    graph_mode.compile_graph(torch.nn.Identity(), DeviceKind.CUDA)
    assert calls == {"mode": "reduce-overhead", "dynamic": False}


def test_compile_cache_dir_is_handed_to_inductor(
    monkeypatch: pytest.MonkeyPatch, tmp_path: object
) -> None:
    monkeypatch.setenv(graph_mode.CACHE_DIR_ENV, "restored after the test")
    monkeypatch.setattr(graph_mode.torch, "compile", lambda fn, **kwargs: fn)
    target = f"{tmp_path}/inductor"
    graph_mode.compile_graph(torch.nn.Identity(), DeviceKind.CPU, cache_dir=target)
    assert graph_mode.os.environ[graph_mode.CACHE_DIR_ENV] == target
    assert graph_mode.os.path.isdir(target)
