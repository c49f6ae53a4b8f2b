"""CPU kernels of our own, compiled on first use with torch's C++ extension loader.

- `int4_int8_gemm.cpp` registers `torch.ops.ascend_router.int4_int8_gemm`: int4 weights times
  int8-quantised activations on AVX512-VNNI integer dot products (see the file's header).
  torch's own int4 CPU kernel (`_weight_int4pack_mm_for_cpu`) and its int8 one re-read the
  weights for every row, so their cost grows by ~1.3 ms per decode row on SmolLM2 (2 cores);
  this kernel reads them once per step.
- `int8_int8_gemm.cpp` registers `torch.ops.ascend_router.int8_int8_gemm`: the output layer's
  per-channel int8 weights times Q8_0-quantised activations on the same integer dot products
  (SmolLM2's 49,152 x 576 head at batch 1: ~0.6 ms against 3.6 ms for torch's
  `_weight_int8pack_mm`, one thread).
- `block_dequantize.cpp` registers `torch.ops.ascend_router.block_dequantize`: block-scaled FP8
  / MXFP4 codes to floats through a 256-entry table (`npu_ops.ops.cpu_quant`, the `cpu`
  implementation of `fp8_block_matmul` / `mxfp4_matmul`); plain C++, no CPU flags needed.
- `paged_decode_attention.cpp` registers `torch.ops.ascend_router.paged_decode_attention`, the
  `cpu` implementation of the registry op of that name: it reads K/V in place through the
  block table instead of gathering every sequence's context into a new tensor per layer.
- `grouped_lora.cpp` registers `torch.ops.ascend_router.grouped_lora`, the `cpu` implementation
  of the registry op of that name (`npu_ops.ops.cpu_lora`): each row's LoRA update against its
  own adapter only, each adapter's weights read once per call (SGMV order).

Compilation needs a C++ compiler and `ninja` and takes ~25 s per kernel once per host (setup.sh
does it: `python -m npu_ops.cpu_kernels`); the result is cached by torch (`TORCH_EXTENSIONS_DIR`,
default `~/.cache/torch_extensions`) and re-used by every later process, including replacement
replicas.

Each operator also gets a fake (meta) implementation (`torch.library.register_fake`) that gives
its output's shape and dtype without running it, so `torch.compile` (the engine's captured decode
graphs) keeps it in the graph as one opaque call.
"""

from __future__ import annotations

import functools
import logging
import shutil
from dataclasses import dataclass
from pathlib import Path

import torch
from torch.utils import cpp_extension

logger = logging.getLogger(__name__)

HERE = Path(__file__).parent
_BASE_FLAGS = ("avx512f", "avx512bw", "avx512vl", "avx512dq")


@dataclass(frozen=True)
class Kernel:
    """One C++ source, `<op>.cpp`, registering operator `ascend_router::<op>`, and the CPU flags
    it needs (it is compiled with the matching `-m` flags)."""

    op: str
    cpu_flags: tuple[str, ...]

    @property
    def name(self) -> str:
        """The extension's module name (torch's cache directory)."""
        return f"ascend_router_{self.op}"

    @property
    def source(self) -> str:
        """The C++ file, next to this module."""
        return f"{self.op}.cpp"

    @property
    def cflags(self) -> tuple[str, ...]:
        """`-mavx512f` ... for the CPU flags (`avx512_vnni` -> `-mavx512vnni`)."""
        return tuple("-m" + flag.replace("_", "") for flag in self.cpu_flags)


_VNNI_FLAGS = (*_BASE_FLAGS, "avx512_vnni")
INT4_INT8_GEMM = Kernel("int4_int8_gemm", _VNNI_FLAGS)
INT8_INT8_GEMM = Kernel("int8_int8_gemm", _VNNI_FLAGS)
PAGED_DECODE_ATTENTION = Kernel("paged_decode_attention", _BASE_FLAGS)
BLOCK_DEQUANTIZE = Kernel("block_dequantize", ())
GROUPED_LORA = Kernel("grouped_lora", _BASE_FLAGS)
KERNELS = (INT4_INT8_GEMM, INT8_INT8_GEMM, PAGED_DECODE_ATTENTION, BLOCK_DEQUANTIZE, GROUPED_LORA)
"""Every kernel: `python -m npu_ops.cpu_kernels` (run by setup.sh) compiles those this host can
run, so a first `serve run` does not wait for them."""


def cpu_flags() -> frozenset[str]:
    """This host's CPU flags (empty where /proc/cpuinfo is unreadable)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return frozenset()
    for line in text.splitlines():
        if line.startswith("flags"):
            return frozenset(line.split(":", 1)[1].split())
    return frozenset()


def unavailable(kernel: Kernel) -> str | None:
    """Why `kernel` cannot run here, or None when it can."""
    missing = [f for f in kernel.cpu_flags if f not in cpu_flags()]
    if missing:
        return f"the CPU lacks {', '.join(missing)}"
    if not any(shutil.which(c) for c in ("c++", "g++", "clang++")):
        return "no C++ compiler on PATH"
    if not cpp_extension.is_ninja_available():
        return "ninja is not installed"
    return None


@functools.cache
def load(kernel: Kernel) -> None:
    """Compile (or load from torch's cache) `kernel` and register its `torch.ops.ascend_router`
    operator.

    Raises:
        RuntimeError: `unavailable(kernel)` names a reason, or compilation failed.
    """
    reason = unavailable(kernel)
    if reason is not None:
        raise RuntimeError(f"{kernel.name} cannot run here: {reason}")
    logger.info("loading CPU kernel %s (compiled once per host, ~25 s)", kernel.name)
    cpp_extension.load(
        name=kernel.name,
        sources=[str(HERE / kernel.source)],
        extra_cflags=["-O3", *kernel.cflags, "-fopenmp"],
        extra_ldflags=["-fopenmp"],
        is_python_module=False,
    )
    torch.library.register_fake(f"ascend_router::{kernel.op}")(_FAKES[kernel.op])


def _packed_gemm_fake(x: torch.Tensor, codes: torch.Tensor, *scales: torch.Tensor) -> torch.Tensor:
    """Both GEMMs: `[M, K]` times codes packed in 16-channel blocks -> `[M, N]`."""
    return x.new_empty(x.shape[0], codes.shape[0] * 16)


def _paged_decode_attention_fake(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float,
) -> torch.Tensor:
    packed = 2 if v_cache.dtype in (torch.int8, torch.uint8) else 0  # a 8-bit row ends in its scale
    return q.new_empty(q.shape[0], q.shape[1], v_cache.shape[-1] - packed)


def _block_dequantize_fake(
    codes: torch.Tensor,
    lut: torch.Tensor,
    scale: torch.Tensor,
    block_n: int,
    block_k: int,
    row_start: int,
    out: torch.Tensor,
) -> None:
    return None


def _grouped_lora_fake(y: torch.Tensor, *args: torch.Tensor) -> None:
    return None  # it writes `y`


_FAKES = {
    "block_dequantize": _block_dequantize_fake,
    "grouped_lora": _grouped_lora_fake,
    "int4_int8_gemm": _packed_gemm_fake,
    "int8_int8_gemm": _packed_gemm_fake,
    "paged_decode_attention": _paged_decode_attention_fake,
}
"""Per operator, its output's shape and dtype (float32, as the C++ code returns; none where the
operator writes into an argument: `out`, or `y` for `grouped_lora`)."""


def int4_int8_gemm(
    x: torch.Tensor, codes: torch.Tensor, scales: torch.Tensor, offsets: torch.Tensor
) -> torch.Tensor:
    """`x @ w.T` with int4 `w` and `x` quantised to int8 per 32 values (ggml Q8_0).

    Args:
        x: float32 `[M, K]`, contiguous; `K` a multiple of 32.
        codes: uint8 `[N / 16, K / 32, 4, 64]` from `pack_int4_codes`.
        scales, offsets: float32 `[K / 32, N]`; `w = code * scale + offset` per group.

    Returns:
        float32 `[M, N]`.

    Raises:
        RuntimeError: the shapes disagree, or the kernel was not loaded
            (`load(INT4_INT8_GEMM)`).
    """
    return torch.ops.ascend_router.int4_int8_gemm(x, codes, scales, offsets)


def int8_int8_gemm(x: torch.Tensor, codes: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """`x @ w.T` with int8 `w = q * scales[n]` per output channel and `x` quantised to int8 per 32
    values (ggml Q8_0), as llama.cpp computes a Q8_0 output layer.

    Args:
        x: float32 `[M, K]`, contiguous; `K` a multiple of 32.
        codes: uint8 `[N / 16, K / 32, 8, 64]` from `pack_int8_codes`.
        scales: float32 `[N]`.

    Returns:
        float32 `[M, N]`.

    Raises:
        RuntimeError: the shapes disagree, or the kernel was not loaded
            (`load(INT8_INT8_GEMM)`).
    """
    return torch.ops.ascend_router.int8_int8_gemm(x, codes, scales)


def pack_int8_codes(codes: torch.Tensor) -> torch.Tensor:
    """Lay out int8 codes for `int8_int8_gemm`.

    Args:
        codes: int8 `[N, K]` in -127..127, `N` a multiple of 16 and `K` of 32.

    Returns:
        uint8 `[N / 16, K / 32, 8, 64]`: per block of 16 output channels and group of 32 inputs,
        eight 64-byte vectors; byte `4 * lane + t` of vector `j` holds `q + 128` of channel
        `lane`, input `4 * j + t` (the unsigned operand of one `vpdpbusd`).

    Raises:
        ValueError: `N` or `K` is not a whole number of blocks.
    """
    n, k = codes.shape
    if n % 16 or k % 32:
        raise ValueError(f"int8_int8_gemm needs N % 16 == 0 and K % 32 == 0, got {n} x {k}")
    shifted = (codes.to(torch.int16) + 128).to(torch.uint8)
    blocks = shifted.view(n // 16, 16, k // 32, 8, 4)  # [block, lane, group, j, t]
    return blocks.permute(0, 2, 3, 1, 4).reshape(n // 16, k // 32, 8, 64).contiguous()


def pack_int4_codes(codes: torch.Tensor) -> torch.Tensor:
    """Lay out 4-bit codes for `int4_int8_gemm`.

    Args:
        codes: uint8 `[N, K]` in 0..15, `N` a multiple of 16 and `K` of 32.

    Returns:
        uint8 `[N / 16, K / 32, 4, 64]`: per block of 16 output channels and group of 32
        inputs, four 64-byte vectors; byte `4 * lane + t` of vector `j` holds channel `lane`'s
        code of input `4 * j + t` in its low nibble and of input `4 * (j + 4) + t` in its high
        nibble (the operand of one `vpdpbusd` per nibble half).

    Raises:
        ValueError: `N` or `K` is not a whole number of blocks.
    """
    n, k = codes.shape
    if n % 16 or k % 32:
        raise ValueError(f"int4_int8_gemm needs N % 16 == 0 and K % 32 == 0, got {n} x {k}")
    c = codes.view(n // 16, 16, k // 32, 2, 4, 4)  # [block, lane, group, half, j, t]
    c = c[:, :, :, 0] | (c[:, :, :, 1] << 4)  # [block, lane, group, j, t]
    return c.permute(0, 2, 3, 1, 4).reshape(n // 16, k // 32, 4, 64).contiguous()
