"""Graph mode: run the decoder as one compiled graph instead of op by op.

The counterpart of vLLM's `enforce_eager=False`, per platform:

- CPU and CUDA: `torch.compile(fn, dynamic=True)` with inductor (C++ kernels on CPU, Triton on
  CUDA). `dynamic=True` because every step has a different token count and context length.
- NPU: `torch.compile` with torchair's backend, which turns the FX graph into an Ascend GE
  graph (`torchair.get_npu_backend(compiler_config=CompilerConfig())`, Ascend/torchair
  README.md and examples/example.py). torchair is a separate package; without it graph mode is
  refused with a message naming it.

Compilation itself happens on the first call of each new shape class (prefill, batch-1 decode,
batched decode), so the first steps after start-up are slow.
"""

from __future__ import annotations

import importlib
import importlib.util
import shutil
from collections.abc import Callable
from typing import Any

import torch

from npu_ops.platform import DeviceKind

CPP_COMPILERS = ("c++", "g++", "clang++")
"""Compilers inductor can build its CPU kernels with (any one on PATH)."""


def _torchair_backend() -> Any:
    """torchair's NPU backend for `torch.compile`.

    Raises:
        ValueError: `torchair` is not installed.
    """
    if importlib.util.find_spec("torchair") is None:
        raise ValueError(
            "enforce_eager=False on Ascend needs the `torchair` package (Ascend's graph-mode "
            "backend for torch.compile, matching your torch_npu version); install it or set "
            "enforce_eager: true"
        )
    torchair = importlib.import_module("torchair")
    config = importlib.import_module("torchair.configs.compiler_config").CompilerConfig()
    return torchair.get_npu_backend(compiler_config=config)


def compile_graph(fn: Callable[..., Any], kind: DeviceKind) -> Callable[..., Any]:
    """`fn` compiled for graph mode on `kind`.

    Args:
        fn: the module or function to compile (the HF decoder).
        kind: the platform it runs on.

    Returns:
        The compiled callable (same signature); it compiles lazily on first use.

    Raises:
        ValueError: the platform's compiler is missing: `torchair` on NPU, a C++ compiler on
            CPU, `triton` on CUDA (each message names it).
    """
    if kind is DeviceKind.NPU:
        return torch.compile(fn, backend=_torchair_backend(), dynamic=True)
    if kind is DeviceKind.CPU and not any(shutil.which(c) for c in CPP_COMPILERS):
        raise ValueError(
            "enforce_eager=False on CPU needs a C++ compiler on PATH for torch.compile "
            f"(one of {', '.join(CPP_COMPILERS)}); install one or set enforce_eager: true"
        )
    if kind is DeviceKind.CUDA and importlib.util.find_spec("triton") is None:
        raise ValueError(
            "enforce_eager=False on CUDA needs the `triton` package for torch.compile; "
            "install it or set enforce_eager: true"
        )
    return torch.compile(fn, dynamic=True)
