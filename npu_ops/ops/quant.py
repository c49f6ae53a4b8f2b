"""W8A8 building blocks: per-token dynamic int8 quantisation and the int8 matmul with dequant.

- `dynamic_quant` follows `torch_npu.npu_dynamic_quant` (Ascend op-plugin
  docs/context/torch_npu-npu_dynamic_quant.md; aclnnDynamicQuant formula):
  `scale = rowmax(|x|) / 127`, `y = round(x / scale)` as int8, symmetric, one scale per token.
- `quant_matmul` follows `torch_npu.npu_quant_matmul` (docs/context/
  torch_npu-npu_quant_matmul.md): `out = (x1 @ x2) * scale * pertoken_scale (+ bias)`, with
  an int32 bias added before the dequantisation and a float bias after. The int8 product is
  exact: `torch._int_mm` where the device and shapes allow it, else an exact float emulation.
  The reference also dequantises to float32 (the CPU engine's default dtype); `npu_quant_matmul`
  does not.
- `fp8_block_matmul` / `mxfp4_matmul`: weight-only linears over the codes of block-scaled FP8
  (DeepSeek-V3/V4: e4m3 codes, one `weight_scale_inv` per `[block_n, block_k]` tile, float32 or
  UE8M0) and MXFP4 (DeepSeek-V4's routed experts: e2m1 codes two per byte, low nibble first, one
  UE8M0 scale per 32 values along K) checkpoints. The references dequantise the tile grid in
  float32 (`dequantize_fp8_block`, `dequantize_mxfp4`) into the activations' dtype and run one
  GEMM, as transformers' `Fp8Dequantize._dequantize_one` / `_unpack_fp4` and
  `_dequantize_fp8_weight` (integrations/finegrained_fp8.py, transformers 5.25) define the
  formats; tiles at the edge of a dimension that is not a multiple of the block are partial
  (`weight_scale_inv` has `ceil(N / block_n)` rows), as transformers' `FP8Linear` allocates them.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

INT8_MAX = 127
QUANT_OUTPUT_DTYPES = (torch.float16, torch.bfloat16)
"""Float output dtypes of `torch_npu.npu_quant_matmul`."""
REFERENCE_OUTPUT_DTYPES = (*QUANT_OUTPUT_DTYPES, torch.float32)
"""Output dtypes of the reference `quant_matmul`."""


def dynamic_quant(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric per-token int8 quantisation.

    Args:
        x: `[..., H]` float16/bfloat16 activations (at least 2-D).

    Returns:
        `(y, scale)`: int8 `[..., H]` and float32 `[...]` with `x ≈ y * scale[..., None]`.
        An all-zero row gets scale 0 and zeros.
    """
    xf = x.float()
    scale = xf.abs().amax(dim=-1) / INT8_MAX
    safe = torch.where(scale > 0, scale, torch.ones_like(scale)).unsqueeze(-1)
    y = torch.round(xf / safe).clamp(-INT8_MAX - 1, INT8_MAX).to(torch.int8)
    return y, scale


def _int_mm_allowed(a: torch.Tensor, b: torch.Tensor) -> bool:
    """`torch._int_mm` runs on CPU for any 2-D shape; on CUDA it needs M > 16, K, N % 8 == 0."""
    if a.device.type == "cpu":
        return True
    if a.device.type == "cuda":
        return a.shape[0] > 16 and a.shape[1] % 8 == 0 and b.shape[1] % 8 == 0
    return False


def int8_matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Exact int8 × int8 → int32 product of `[M, K]` and `[K, N]`.

    The emulation uses float64, which holds every partial sum exactly (|a·b| ≤ K * 2^14 < 2^53);
    devices without float64 compute it on the host.
    """
    if _int_mm_allowed(a, b):
        return torch._int_mm(a, b)
    host = a.device.type not in ("cpu", "cuda")
    a64 = (a.cpu() if host else a).double()
    b64 = (b.cpu() if host else b).double()
    return (a64 @ b64).to(torch.int32).to(a.device)


def quant_matmul(
    x: torch.Tensor,
    weight: torch.Tensor,
    weight_scale: torch.Tensor,
    pertoken_scale: torch.Tensor,
    output_dtype: torch.dtype,
    bias: torch.Tensor | None = None,
) -> torch.Tensor:
    """W8A8 linear layer: int8 activations × int8 weights, dequantised per channel and token.

    Args:
        x: int8 `[M, K]` quantised activations (from `dynamic_quant`).
        weight: int8 `[K, N]` quantised weights (`x2` layout of `npu_quant_matmul`).
        weight_scale: float32 `[N]` (or `[1]`) per-output-channel weight scale.
        pertoken_scale: float32 `[M]` activation scale from `dynamic_quant`.
        output_dtype: float16 or bfloat16 (float32 too in this reference).
        bias: `[N]`; int32 is added to the int32 product, float16/bfloat16/float32 to the
            dequantised result.

    Returns:
        `[M, N]` in `output_dtype`.

    Raises:
        ValueError: wrong dtypes or an unsupported output dtype.
    """
    if x.dtype != torch.int8 or weight.dtype != torch.int8:
        raise ValueError(f"x and weight must be int8, got {x.dtype} and {weight.dtype}")
    if output_dtype not in REFERENCE_OUTPUT_DTYPES:
        raise ValueError(
            f"output_dtype must be one of {REFERENCE_OUTPUT_DTYPES}, got {output_dtype}"
        )
    acc = int8_matmul(x, weight)
    if bias is not None and bias.dtype == torch.int32:
        acc = acc + bias
    out = acc.float() * weight_scale.float() * pertoken_scale.float().unsqueeze(-1)
    if bias is not None and bias.dtype != torch.int32:
        out = out + bias.float()
    return out.to(output_dtype)


FP8_CODE_DTYPE = torch.float8_e4m3fn
"""Codes of block-scaled FP8 weights."""
FP8_SCALE_DTYPES = (torch.float32, torch.float8_e8m0fnu)
"""`weight_scale_inv` dtypes: float32 (`scale_fmt: float`, V3) or UE8M0 (`scale_fmt: ue8m0`, V4)."""
FP4_CODE_DTYPES = (torch.float4_e2m1fn_x2, torch.int8, torch.uint8)
"""Containers of packed e2m1 codes (two per byte), as transformers' `_unpack_fp4` accepts them."""
MXFP4_BLOCK = 32
"""MXFP4 values per UE8M0 scale, along K (OCP MX spec; DeepSeek-V4's routed experts)."""
FP4_E2M1_VALUES = (
    *(0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0),
    *(-0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0),
)
"""e2m1 code (4 bits: sign, 2 exponent, 1 mantissa) -> value."""


FP8_E4M3_MAX = float(torch.finfo(FP8_CODE_DTYPE).max)


def quantize_fp8_groups(x: torch.Tensor, group: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Dynamic FP8 activations for the W8A8 FP8 kernels (Ascend 950 G-B mode, CUDA blockwise
    `scaled_mm`): per token and `group` columns, `scale = amax / 448` and `codes = x / scale` in
    e4m3, as DeepSeek-V3's `act_quant` (inference/kernel.py, block size 128).

    Args:
        x: `[M, K]` float.
        group: columns per scale (the last group may be shorter).

    Returns:
        float8_e4m3fn `[M, K]` and float32 `[M, ceil(K / group)]` with `x ≈ codes * scale`
        (scale 1 for an all-zero group).
    """
    m, k = x.shape
    groups = -(-k // group)
    padded = torch.nn.functional.pad(x.float(), (0, groups * group - k)).view(m, groups, group)
    scale = padded.abs().amax(dim=-1) / FP8_E4M3_MAX
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))
    codes = (padded / scale[..., None]).clamp(-FP8_E4M3_MAX, FP8_E4M3_MAX)
    return codes.view(m, -1)[:, :k].to(FP8_CODE_DTYPE), scale


def _expand_tiles(
    scale: torch.Tensor, rows: int, cols: int, block: tuple[int, int]
) -> torch.Tensor:
    """float32 `[ceil(rows / bn), ceil(cols / bk)]` tile scales -> `[rows, cols]`."""
    s = scale.float()
    return s.repeat_interleave(block[0], 0)[:rows].repeat_interleave(block[1], 1)[:, :cols]


def check_fp8_block(
    weight: torch.Tensor, weight_scale_inv: torch.Tensor, block_size: tuple[int, int]
) -> None:
    """Check block-scaled FP8 operands (shapes as `dequantize_fp8_block`).

    Raises:
        ValueError: wrong dtypes, or a scale grid that does not tile `weight` by `block_size`.
    """
    if weight.dtype != FP8_CODE_DTYPE or weight_scale_inv.dtype not in FP8_SCALE_DTYPES:
        raise ValueError(
            f"FP8 weight must be {FP8_CODE_DTYPE} with scales in {FP8_SCALE_DTYPES}, got "
            f"{weight.dtype} and {weight_scale_inv.dtype}"
        )
    n, k = weight.shape
    grid = (-(-n // block_size[0]), -(-k // block_size[1]))
    if tuple(weight_scale_inv.shape) != grid:
        raise ValueError(
            f"FP8 weight {list(weight.shape)} in blocks {list(block_size)} needs scales "
            f"{list(grid)}, got {list(weight_scale_inv.shape)}"
        )


def check_mxfp4(weight: torch.Tensor, weight_scale: torch.Tensor) -> None:
    """Check MXFP4 operands (shapes as `dequantize_mxfp4`).

    Raises:
        ValueError: wrong dtypes or a scale grid that does not match.
    """
    if weight.dtype not in FP4_CODE_DTYPES or weight_scale.dtype != torch.float8_e8m0fnu:
        raise ValueError(
            f"MXFP4 weight must be one of {FP4_CODE_DTYPES} with float8_e8m0fnu scales, got "
            f"{weight.dtype} and {weight_scale.dtype}"
        )
    n, k = weight.shape[0], 2 * weight.shape[-1]
    if weight.dim() != 2 or tuple(weight_scale.shape) != (n, -(-k // MXFP4_BLOCK)):
        raise ValueError(
            f"MXFP4 weight of {n}x{k} values needs scales [{n}, {-(-k // MXFP4_BLOCK)}], got "
            f"{list(weight_scale.shape)}"
        )


def dequantize_fp8_block(
    weight: torch.Tensor, weight_scale_inv: torch.Tensor, block_size: tuple[int, int]
) -> torch.Tensor:
    """Block-scaled FP8 codes -> float32: `weight[i, j] * weight_scale_inv[i // bn, j // bk]`.

    Args:
        weight: float8_e4m3fn `[N, K]`.
        weight_scale_inv: float32 or float8_e8m0fnu `[ceil(N / bn), ceil(K / bk)]`.
        block_size: `(bn, bk)`, the config's `weight_block_size`.

    Returns:
        float32 `[N, K]`.

    Raises:
        ValueError: wrong dtypes, or a scale grid that does not tile `weight` by `block_size`.
    """
    check_fp8_block(weight, weight_scale_inv, block_size)
    n, k = weight.shape
    grid = (-(-n // block_size[0]), -(-k // block_size[1]))
    bn, bk = block_size
    if n % bn == 0 and k % bk == 0:  # whole tiles: broadcast the scales, no expanded copy
        tiles = weight.float().view(grid[0], bn, grid[1], bk)
        return (tiles * weight_scale_inv.float()[:, None, :, None]).view(n, k)
    return weight.float() * _expand_tiles(weight_scale_inv, n, k, block_size)


def fp4_byte_table(device: torch.device | str = "cpu") -> torch.Tensor:
    """float32 `[256, 2]`: the two e2m1 values a byte packs (low nibble = even index)."""
    values = torch.tensor(FP4_E2M1_VALUES, dtype=torch.float32, device=device)
    byte = torch.arange(256, device=device)
    return torch.stack([values[byte & 0xF], values[byte >> 4]], dim=-1)


def unpack_fp4(packed: torch.Tensor) -> torch.Tensor:
    """Packed e2m1 codes `[..., K / 2]` (low nibble = even index) -> float32 `[..., K]`."""
    u8 = packed.contiguous().view(torch.uint8)
    pairs = fp4_byte_table(packed.device)
    return pairs[u8.int()].reshape(*packed.shape[:-1], 2 * packed.shape[-1])


def dequantize_mxfp4(weight: torch.Tensor, weight_scale: torch.Tensor) -> torch.Tensor:
    """MXFP4 codes -> float32 values: `e2m1[i, j] * weight_scale[i, j // 32]`.

    Args:
        weight: packed e2m1 `[N, K / 2]` (float4_e2m1fn_x2, int8 or uint8).
        weight_scale: float8_e8m0fnu `[N, ceil(K / 32)]`.

    Returns:
        float32 `[N, K]`.

    Raises:
        ValueError: wrong dtypes or a scale grid that does not match.
    """
    check_mxfp4(weight, weight_scale)
    values = unpack_fp4(weight)
    n, k = values.shape
    if k % MXFP4_BLOCK == 0:
        blocks = values.view(n, k // MXFP4_BLOCK, MXFP4_BLOCK)
        return (blocks * weight_scale.float()[:, :, None]).view(n, k)
    return values * _expand_tiles(weight_scale, n, k, (1, MXFP4_BLOCK))


def fp8_block_matmul(
    x: torch.Tensor,
    weight: torch.Tensor,
    weight_scale_inv: torch.Tensor,
    block_size: tuple[int, int],
    bias: torch.Tensor | None = None,
) -> torch.Tensor:
    """Weight-only block-scaled FP8 linear: `x @ dequantize_fp8_block(weight).T (+ bias)`.

    Args:
        x: `[M, K]` float activations.
        weight: float8_e4m3fn `[N, K]` (the checkpoint's layout).
        weight_scale_inv: `[ceil(N / bn), ceil(K / bk)]` float32 or float8_e8m0fnu.
        block_size: `(bn, bk)`.
        bias: `[N]` or None.

    Returns:
        `[M, N]` in `x.dtype` (the weight is dequantised in float32, then cast to `x.dtype`).

    Raises:
        ValueError: as `dequantize_fp8_block`.
    """
    w = dequantize_fp8_block(weight, weight_scale_inv, block_size).to(x.dtype)
    return torch.nn.functional.linear(x, w, None if bias is None else bias.to(x.dtype))


def mxfp4_matmul(
    x: torch.Tensor,
    weight: torch.Tensor,
    weight_scale: torch.Tensor,
    bias: torch.Tensor | None = None,
) -> torch.Tensor:
    """Weight-only MXFP4 linear: `x @ dequantize_mxfp4(weight, weight_scale).T (+ bias)`.

    Args:
        x: `[M, K]` float activations.
        weight: packed e2m1 `[N, K / 2]`.
        weight_scale: float8_e8m0fnu `[N, ceil(K / 32)]`.
        bias: `[N]` or None.

    Returns:
        `[M, N]` in `x.dtype`.

    Raises:
        ValueError: as `dequantize_mxfp4`.
    """
    w = dequantize_mxfp4(weight, weight_scale).to(x.dtype)
    return torch.nn.functional.linear(x, w, None if bias is None else bias.to(x.dtype))


def per_expert_rows(
    matmul: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor],
    x: torch.Tensor,
    weight: torch.Tensor,
    weight_scale: torch.Tensor,
    group_sizes: torch.Tensor,
) -> torch.Tensor:
    """`matmul(rows, weight[e], weight_scale[e])` over each expert's rows (`mxfp4_grouped_matmul`).

    Raises:
        ValueError: `group_sizes` of the wrong length or sum.
    """
    sizes = [int(n) for n in group_sizes.tolist()]
    if len(sizes) != weight.shape[0] or sum(sizes) != x.shape[0]:
        raise ValueError(
            f"group_sizes must give {weight.shape[0]} experts' rows summing to {x.shape[0]}, "
            f"got {sizes}"
        )
    out = x.new_empty(x.shape[0], weight.shape[1])
    start = 0
    for e, n in enumerate(sizes):
        if n:
            out[start : start + n] = matmul(x[start : start + n], weight[e], weight_scale[e])
        start += n
    return out


def mxfp4_grouped_matmul(
    x: torch.Tensor,
    weight: torch.Tensor,
    weight_scale: torch.Tensor,
    group_sizes: torch.Tensor,
) -> torch.Tensor:
    """Routed experts' MXFP4 linears over rows sorted by expert: rows
    `[offset_e, offset_e + group_sizes[e])` times expert `e`'s weight (`mxfp4_matmul`).

    Args:
        x: `[T, K]` float activations, grouped by expert (`moe_dispatch`'s order).
        weight: packed e2m1 `[E, N, K / 2]`.
        weight_scale: float8_e8m0fnu `[E, N, ceil(K / 32)]`.
        group_sizes: int64 `[E]`, rows per expert, summing to `T`.

    Returns:
        `[T, N]` in `x.dtype`.

    Raises:
        ValueError: `group_sizes` of the wrong length or sum, or an expert as `check_mxfp4`.
    """
    return per_expert_rows(mxfp4_matmul, x, weight, weight_scale, group_sizes)
