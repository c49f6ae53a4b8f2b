"""The output projection (`lm_head`) with an int8 copy for small decode batches.

The output layer is the largest single matmul of a small model's decode step: SmolLM2's
`[49152, 576]` head is 56 MB in bfloat16, 3.0 ms of a batch-1 step on two threads and 6.0 ms on
one. `torch._weight_int8pack_mm` (per-output-channel int8 weights, activations in the serving
dtype) reads a quarter of those bytes: 1.7 ms on two threads, 3.4 ms on one. Its cost grows with
every row, though (two threads: 2.8 ms at 4 rows against 3.6 ms dense, 5.4 against 4.0 at 8),
so steps whose head input has at most `INT8_MAX_ROWS` rows use the int8 copy and larger ones
the float weight. Measured with `load_tests.step_profile` on a 2-core AMD EPYC (AVX512-BF16).

The int8 codes are symmetric per output channel, `w ≈ q * s` with `s = max|w_row| / 127`
(torch's `_weight_int8pack_mm` contract: int8 `[N, K]`, scales `[N]`). For the SmolLM2 GGUF,
whose embedding is `Q8_0` (int8 codes, one scale per 32 weights), this is as fine a grid as the
file's own within a factor of the row's spread of block maxima; llama.cpp reads the `Q8_0`
codes for its output layer.

With `int8_activations` (the engine's `activation_quantization: int8`, on a CPU with
AVX512-VNNI) the head's input is quantised to int8 per 32 values too (ggml Q8_0, as llama.cpp
does for its output layer) and the copy runs on `npu_ops.cpu_kernels.int8_int8_gemm`, integer
dot products that read the weights once per call: 0.6 ms at batch 1 on one thread against
3.6 ms for `_weight_int8pack_mm`, which is compute-bound at this size. It beats the bfloat16
head at every size measured (one thread: 1.0 / 2.5 / 6.5 / 14.9 ms at 1 / 4 / 16 / 32 rows
against 9.6 / 10.6 / 19.4 / 21.5, on a loaded host), so the loader uses it for every step.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from npu_ops.cpu_kernels import int8_int8_gemm, pack_int8_codes

INT8_MAX_ROWS = 4
"""Rows from which the float head is faster than the int8 copy (see above)."""


class Int8CopyOutputHead(nn.Module):
    """`nn.Linear` output projection that keeps an int8 copy for steps of few rows.

    Args:
        head: the float output projection (its weight may be tied to the input embedding; it is
            shared, not copied).
        max_rows: inputs of at most this many rows use the int8 copy; None: every input
            (batch invariance, `EngineConfig.batch_invariant`).
        int8_activations: the copy runs on `int8_int8_gemm` (inputs quantised to int8 per
            32 values); needs `load(INT8_INT8_GEMM)` to have succeeded, a CPU head and
            `out_features` a multiple of 16, `in_features` of 32.

    Raises:
        ValueError: `int8_activations` with a shape the kernel cannot take.
    """

    def __init__(
        self,
        head: nn.Linear,
        max_rows: int | None = INT8_MAX_ROWS,
        int8_activations: bool = False,
    ) -> None:
        super().__init__()
        self.in_features, self.out_features = head.in_features, head.out_features
        self.weight = head.weight
        self.bias = head.bias
        self.max_rows = max_rows
        w = head.weight.detach().float()
        scales = w.abs().amax(dim=1).clamp(min=torch.finfo(torch.float32).tiny) / 127
        codes = torch.round(w / scales[:, None]).clamp(-127, 127).to(torch.int8)
        self.int8_activations = int8_activations
        if int8_activations:
            self.register_buffer("codes", pack_int8_codes(codes))  # raises on odd shapes
            # a plain attribute, so that casting the model to the serving dtype leaves it exact
            self.int8_scales = scales.contiguous()
        else:
            self.register_buffer("codes", codes)  # [out, in]
            self.register_buffer("scales", scales)  # [out]; cast with the model

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """`[..., in]` -> `[..., out]` logits in `x.dtype`."""
        flat = x.reshape(-1, self.in_features)
        if self.max_rows is None or flat.shape[0] <= self.max_rows:
            if self.int8_activations:
                x = flat.float().contiguous()
                out = int8_int8_gemm(x, self.codes, self.int8_scales).to(flat.dtype)
            else:
                out = torch._weight_int8pack_mm(flat.contiguous(), self.codes, self.scales)
            if self.bias is not None:
                out = out + self.bias
        else:
            out = F.linear(flat, self.weight, self.bias)
        return out.reshape(*x.shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, "
            f"int8 copy for {'every step' if self.max_rows is None else f'<= {self.max_rows} rows'}"
        )
