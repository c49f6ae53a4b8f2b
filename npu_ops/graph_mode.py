"""Graph mode: decode steps run as graphs captured once per batch-size bucket.

The counterpart of vLLM's `enforce_eager=False` (CUDA graphs) and vLLM-Ascend's ACL graphs. The
engine pads every decode step up to a fixed batch size (`engine.decode_graphs`) and compiles
the decoder once per size with static shapes (`dynamic=False`), so a replay runs no Python per
module and no graph ever recompiles while serving. Per platform:

- CPU: `torch.compile` with inductor: C++ kernels for the fused element-wise work, the GEMMs and
  our own kernels (`npu_ops.cpu_kernels`) called as opaque ops.
- CUDA: `torch.compile(mode="reduce-overhead")`: inductor with CUDA graphs (torch docs,
  "torch.compile" modes), which replays the whole step as one graph launch.
- NPU: `torch.compile` with torchair's backend (`torchair.get_npu_backend`, Ascend/torchair
  README.md and examples/example.py) in its `reduce-overhead` mode, which captures ACL graphs
  (aclgraph). torchair is a separate package; without it graph mode is refused with a message
  naming it.

Compilation happens on the first call of each size; the engine makes that call itself, for every
size, on a background thread while it serves eagerly (`engine.graph_capture`). Inductor keeps
compiled graphs in its on-disk FX-graph and AOTAutograd caches (`TORCHINDUCTOR_CACHE_DIR`, default
`/tmp/torchinductor_<user>`), so a restarted or replacement replica on the same host re-traces but
does not recompile.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import shutil
from collections.abc import Callable
from typing import Any

import torch

from npu_ops.platform import DeviceKind

CPP_COMPILERS = ("c++", "g++", "clang++")
"""Compilers inductor can build its CPU kernels with (any one on PATH)."""
CACHE_DIR_ENV = "TORCHINDUCTOR_CACHE_DIR"
"""Where inductor keeps compiled graphs across processes (read when a graph is compiled)."""


def _torchair_backend() -> Any:
    """torchair's NPU backend for `torch.compile`, in ACL-graph (`reduce-overhead`) mode.

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
    config.mode = "reduce-overhead"
    return torchair.get_npu_backend(compiler_config=config)


def compile_graph(
    fn: Callable[..., Any], kind: DeviceKind, cache_dir: str | None = None
) -> Callable[..., Any]:
    """`fn` compiled for graph mode on `kind`, one static-shape graph per input shape.

    Args:
        fn: the module or function to compile (the HF decoder).
        kind: the platform it runs on.
        cache_dir: inductor's on-disk cache directory (`~` expanded; sets
            `TORCHINDUCTOR_CACHE_DIR` for this process); None keeps inductor's default.

    Returns:
        The compiled callable (same signature); it compiles on the first call of each shape.

    Raises:
        ValueError: the platform's compiler is missing: `torchair` on NPU, a C++ compiler on
            CPU, `triton` on CUDA (each message names it).
    """
    if cache_dir is not None:
        cache_dir = os.path.expanduser(cache_dir)
        os.makedirs(cache_dir, exist_ok=True)
        os.environ[CACHE_DIR_ENV] = cache_dir
    if kind is DeviceKind.NPU:
        return torch.compile(fn, backend=_torchair_backend(), dynamic=False)
    if kind is DeviceKind.CPU and not any(shutil.which(c) for c in CPP_COMPILERS):
        raise ValueError(
            "enforce_eager=False on CPU needs a C++ compiler on PATH for torch.compile "
            f"(one of {', '.join(CPP_COMPILERS)}); install one or set enforce_eager: true"
        )
    if kind is DeviceKind.CUDA:
        if importlib.util.find_spec("triton") is None:
            raise ValueError(
                "enforce_eager=False on CUDA needs the `triton` package for torch.compile; "
                "install it or set enforce_eager: true"
            )
        return torch.compile(fn, mode="reduce-overhead", dynamic=False)
    return torch.compile(fn, dynamic=False)
