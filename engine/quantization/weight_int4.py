"""Weight-only int4 linears: group-wise asymmetric 4-bit weights, activations left in float.

Layout (gpt-fast / torchao "int4 weight-only", the layout of `torch._weight_int4pack_mm`):
every run of `group_size` input weights of an output channel shares a scale `s` and a zero
`z`, and `w = (q - 8) * s + z` for a 4-bit code `q` in 0..15. Quantising a group sets
`s = (max - min) / 15` and `z = min + 8 * s`, so `min` maps to 0 and `max` to 15.

That is GGUF's `Q4_1` block (ggml `dequantize_row_q4_1`: `w = q * d + m`, 32 weights per block)
with `s = d` and `z = m + 8 * d`: llama.cpp's reference `Q4_1` quantiser also maps each block's
min to code 0 and max to 15, so re-quantising the float weights that transformers dequantises
from a `Q4_1` GGUF recovers the file's own codes. Serving the SmolLM2 GGUF this way reads the
same 4 bits per weight that llama.cpp reads, instead of 16 or 32.

On CPU, generated tokens (decode) go through `torch._weight_int4pack_mm_for_cpu` (weights
packed once by `torch._convert_weight_to_int4pack_for_cpu`). That kernel streams 4-bit weights
(SmolLM2, 30 layers, batch 1: 3.9 ms against 17.8 ms for the bfloat16 GEMM, 2 threads) but
reads them again for every row: 11.3 ms at 8 rows, 21.5 at 16 and 42.0 at 32, where the dense
GEMM costs 22.0, 25.5 and 35.0 ms. So prompt tokens (prefill) go through a dense copy of the
dequantised weights in the serving dtype and an ordinary GEMM, and so do generated tokens once a
step holds `DENSE_MIN_ROWS` of them; on CPU the layer therefore holds both, trading host memory
for speed. With `int8_activations` (the engine's `activation_quantization: int8`) every token,
prompt or generated, goes through `npu_ops.cpu_kernels.int4_int8_gemm` instead, which reads
the weights once per call: 4.3 / 7.9 / 13.3 / 22.7 ms at 1 / 8 / 16 / 32 rows on the same
weights, and 23.8 / 315 ms at 40 / 640 prompt rows where the dense GEMM takes 35.8 / 353 (the
four merged SmolLM2 linears per layer); the layer then holds no dense copy.

Every kernel gives each row the same result whatever the other rows (a single row is sent to the
GEMM as two, since torch's one-row GEMV sums in another order), so the kernel, not the batch,
decides a token's result; `int4_int8_gemm` is used at every batch size. With `dense_min_rows=None`
(the engine's `batch_invariant` setting) the split is by token kind only, read from the step's
`engine.forward_context`, and a request's output never depends on its neighbours; otherwise a
generated token's kernel also depends on how many generated tokens share its step. A call outside an
engine step, or on a subset of the step's tokens (MoE experts), uses the int4 kernel for every row.
Elsewhere than CPU the reference dequantises the codes per call, which is correct but saves no
memory traffic (Ascend's `npu_weight_quant_batchmatmul` is the kernel to wire there).
"""

from __future__ import annotations

import torch
from torch import nn

from engine.forward_context import current_forward_context
from npu_ops.cpu_kernels import int4_int8_gemm, pack_int4_codes

GROUP_SIZE = 32
"""Input weights per scale/zero pair (GGUF Q4_1's block size)."""
DENSE_MIN_ROWS = 24
"""Generated tokens per step from which the dense GEMM beats torch's int4 kernel (see above)."""
_MAX_CODE = 15
_MID_CODE = 8


def quantize_int4(
    weight: torch.Tensor, group_size: int = GROUP_SIZE
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Group-wise asymmetric int4 quantisation of a linear weight.

    Args:
        weight: `[out, in]` float; `in` must be a multiple of `group_size`.
        group_size: input weights per scale/zero pair.

    Returns:
        `(codes, scales, zeros)`: uint8 `[out, in]` in 0..15, and float32 `[in / group_size,
        out]` each, with `weight ≈ (codes - 8) * scales + zeros` group by group.

    Raises:
        ValueError: `in` is not a multiple of `group_size`.
    """
    out_features, in_features = weight.shape
    if in_features % group_size:
        raise ValueError(f"int4: in_features {in_features} is not a multiple of {group_size}")
    groups = weight.float().reshape(out_features, in_features // group_size, group_size)
    low = groups.amin(dim=-1)
    scales = (groups.amax(dim=-1) - low) / _MAX_CODE
    safe = torch.where(scales > 0, scales, torch.ones_like(scales))
    codes = torch.round((groups - low[..., None]) / safe[..., None]).clamp(0, _MAX_CODE)
    zeros = low + _MID_CODE * scales
    return (
        codes.to(torch.uint8).reshape(out_features, in_features),
        scales.t().contiguous(),
        zeros.t().contiguous(),
    )


def dequantize_int4(
    codes: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor, group_size: int = GROUP_SIZE
) -> torch.Tensor:
    """Inverse of `quantize_int4`: float `[out, in]` in the dtype of `scales`."""
    out_features, in_features = codes.shape
    q = codes.to(scales.dtype).reshape(out_features, in_features // group_size, group_size)
    w = (q - _MID_CODE) * scales.t()[..., None] + zeros.t()[..., None]
    return w.reshape(out_features, in_features)


class Int4WeightLinear(nn.Module):
    """`nn.Linear` with int4 group-wise weights (`quantize_int4`), float activations.

    Args:
        linear: the float layer to replace; its weight is quantised, its bias kept.
        group_size: input weights per scale/zero pair.
        cpu_kernel: pack for, and compute with, torch's CPU int4 kernel (the layer must then
            stay on CPU); False keeps plain codes for the dequantising reference.
        dense_min_rows: generated tokens per step from which they, too, go through the dense
            copy; None keeps them on the int4 kernel at every batch size (batch invariance).
        int8_activations: every row goes through `npu_ops.cpu_kernels.int4_int8_gemm`
            (activations quantised to int8 per 32 values, integer dot products) instead of
            torch's int4 kernel and the dense copy, which is not kept; needs
            `load(INT4_INT8_GEMM)` to have succeeded, a CPU layer, `group_size` 32 and
            `out_features` a multiple of 16.

    Raises:
        ValueError: `in_features` is not a multiple of `group_size`, or `int8_activations`
            with a layout the kernel cannot take.
    """

    def __init__(
        self,
        linear: nn.Linear,
        group_size: int = GROUP_SIZE,
        cpu_kernel: bool = True,
        dense_min_rows: int | None = None,
        int8_activations: bool = False,
    ) -> None:
        super().__init__()
        self.dense_min_rows = dense_min_rows
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.group_size = group_size
        codes, scales, zeros = quantize_int4(linear.weight.detach(), group_size)
        dtype = linear.weight.dtype
        self.cpu_kernel = cpu_kernel
        self.int8_activations = int8_activations
        if int8_activations:
            if not cpu_kernel or group_size != 32:
                raise ValueError("int8 activations need the CPU kernel and 32-weight groups")
            packed = pack_int4_codes(codes)  # raises unless out_features % 16 == 0
            # float32 [in / group, out], w = code * scale + offset; plain attributes, so that
            # casting the model to the serving dtype leaves them exact
            self.int8_scales = scales.float().contiguous()
            self.int8_offsets = (zeros - _MID_CODE * scales).float().contiguous()
        elif cpu_kernel:
            packed = torch._convert_weight_to_int4pack_for_cpu(codes.to(torch.int32), 1)
        else:
            packed = codes
        self.register_buffer("packed", packed)
        # [in / group, out, 2]: scale and zero, in the activation dtype (the kernel's contract)
        self.register_buffer("scales_and_zeros", torch.stack([scales, zeros], -1).to(dtype))
        keep_dense = cpu_kernel and not int8_activations
        dense = dequantize_int4(codes, scales, zeros, group_size).to(dtype) if keep_dense else None
        self.register_buffer("dense", dense)  # [out, in], for prompt tokens
        self.bias = linear.bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """`[..., in]` -> `[..., out]` in `x.dtype` (the dtype of `scales_and_zeros`)."""
        flat = x.reshape(-1, self.in_features)
        if self.int8_activations:
            out = self._int4(flat)
        elif self.cpu_kernel:
            out = self._by_token_kind(flat)
        else:
            out = self._reference(flat)
        if self.bias is not None:
            out = out + self.bias
        return out.reshape(*x.shape[:-1], self.out_features)

    def _by_token_kind(self, flat: torch.Tensor) -> torch.Tensor:
        ctx = current_forward_context()
        if ctx is None or flat.shape[0] != len(ctx.prompt_rows) + len(ctx.generated_rows):
            return self._int4(flat)
        generated = len(ctx.generated_rows)
        if not generated or (self.dense_min_rows is not None and generated >= self.dense_min_rows):
            return self._dense(flat)
        if not len(ctx.prompt_rows):
            return self._int4(flat)
        out = flat.new_empty(flat.shape[0], self.out_features)
        out[ctx.prompt_rows] = self._dense(flat[ctx.prompt_rows])
        out[ctx.generated_rows] = self._int4(flat[ctx.generated_rows])
        return out

    def _int4(self, flat: torch.Tensor) -> torch.Tensor:
        if self.int8_activations:
            x = flat.float().contiguous()
            return int4_int8_gemm(x, self.packed, self.int8_scales, self.int8_offsets).to(
                flat.dtype
            )
        return torch._weight_int4pack_mm_for_cpu(
            flat.contiguous(), self.packed, self.group_size, self.scales_and_zeros
        )

    def _dense(self, flat: torch.Tensor) -> torch.Tensor:
        assert self.dense is not None
        if flat.shape[0] == 1:  # keep the GEMM's summation order (see the module docstring)
            return (torch.cat([flat, flat]) @ self.dense.t())[:1]
        return flat @ self.dense.t()

    def _reference(self, flat: torch.Tensor) -> torch.Tensor:
        scales, zeros = self.scales_and_zeros.unbind(-1)
        return flat @ dequantize_int4(self.packed, scales, zeros, self.group_size).t()

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, "
            f"int4 g{self.group_size}"
        )


def quantize_linears_int4(
    model: nn.Module,
    device: torch.device,
    group_size: int = GROUP_SIZE,
    batch_invariant: bool = True,
    int8_activations: bool = False,
) -> int:
    """Replace every `nn.Linear` but the output projection with an `Int4WeightLinear`.

    Args:
        model: the loaded float32 model, still on the host.
        device: where the model will run (selects the CPU kernel's packing or the reference).
        group_size: input weights per scale/zero pair.
        batch_invariant: keep generated tokens on the int4 kernel at every batch size; False
            sends decode batches of `DENSE_MIN_ROWS` or more through the dense GEMM.
        int8_activations: every token through `int4_int8_gemm` (loaded by the caller);
            layers whose `out_features` is not a multiple of 16 keep torch's kernel and the
            dense copy.

    The output projection (often tied to the input embedding) stays in float. Call it on the
    float32 model before casting it to the serving dtype, so that codes come from exact weights.

    Returns:
        The number of layers replaced.

    Raises:
        ValueError: a layer's `in_features` is not a multiple of `group_size`.
    """
    head = model.get_output_embeddings()
    targets = [
        (name, module)
        for name, module in model.named_modules()
        if isinstance(module, nn.Linear) and module is not head
    ]
    cpu = device.type == "cpu"
    for name, module in targets:
        parent_name, _, child = name.rpartition(".")
        int8 = int8_activations and cpu and module.out_features % 16 == 0
        dense_min_rows = None if batch_invariant or int8 else DENSE_MIN_ROWS
        layer = Int4WeightLinear(module, group_size, cpu, dense_min_rows, int8)
        setattr(model.get_submodule(parent_name), child, layer)
    return len(targets)
