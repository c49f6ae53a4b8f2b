"""W8A8 linear layers that replace `nn.Linear` in a ModelSlim-quantised model.

Both compute through the op registry (`npu_ops.ops.active_ops()`): `quant_matmul` is
`torch_npu.npu_quant_matmul` on Ascend and the exact int8 reference (`torch._int_mm`) on CPU;
`W8A8DynamicLinear` quantises activations with `dynamic_quant` (`npu_dynamic_quant` on Ascend).
The int8 weight is kept transposed, `[in, out]`, the `x2` layout of `npu_quant_matmul`, as
vllm-ascend does in `process_weights_after_loading` (vllm_ascend/quantization/w8a8.py and
methods/w8a8_dynamic.py). Every tensor is a frozen `nn.Parameter`, so weight-size accounting
and `.to(device)` see them.

Tensor parallel (`engine.parallel.sharding`) shards a layer after it is built, through
`keep_outputs` (column parallel: the output channels' weight columns, per-channel scales and
biases) and `keep_inputs` (row parallel: the input rows of the weight; per-channel scales and
static W8A8's per-tensor input scale/offset stay whole, the bias stays on one rank), as
vllm-ascend's `AscendW8A8LinearMethod` / `AscendW8A8DynamicLinearMethod` hold their shards
(`quant_bias` and the float bias applied on TP rank 0 only, vllm's `RowParallelLinear.forward`).
"""

from __future__ import annotations

import torch
from torch import nn

from engine.quantization.int8 import quantize_per_tensor
from npu_ops.ops import active_ops


def _frozen(t: torch.Tensor) -> nn.Parameter:
    return nn.Parameter(t, requires_grad=False)


class W8A8DynamicLinear(nn.Module):
    """`W8A8_DYNAMIC`: per-channel int8 weights, per-token int8 activations.

    `y = (dynamic_quant(x) @ weight) * weight_scale * token_scale + bias`
    (vllm-ascend `AscendW8A8DynamicLinearMethod.apply`).

    Args:
        weight: int8 `[out, in]` as stored in the checkpoint.
        weight_scale: `[out]` (or `[out, 1]`) per-output-channel scale.
        bias: float `[out]` or None, added after the dequantisation.
    """

    def __init__(
        self, weight: torch.Tensor, weight_scale: torch.Tensor, bias: torch.Tensor | None
    ) -> None:
        super().__init__()
        self.out_features, self.in_features = weight.shape
        self.weight = _frozen(weight.t().contiguous())
        self.weight_scale = _frozen(weight_scale.reshape(-1).float())
        self.bias = None if bias is None else _frozen(bias)
        self._ops = active_ops()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """`[..., in]` float -> `[..., out]` in `x.dtype`."""
        flat = x.reshape(-1, self.in_features)
        xq, token_scale = self._ops.dynamic_quant(flat)
        out = self._ops.quant_matmul(
            xq, self.weight, self.weight_scale, token_scale, x.dtype, self.bias
        )
        return out.reshape(*x.shape[:-1], self.out_features)

    def keep_outputs(self, rows: torch.Tensor) -> None:
        """Keep output channels `rows` (int64 `[n]`, column parallel): the weight's columns,
        `weight_scale` and the bias follow them."""
        self.weight = _frozen(self.weight.data[:, rows].contiguous())
        self.weight_scale = _frozen(self.weight_scale.data[rows].contiguous())
        if self.bias is not None:
            self.bias = _frozen(self.bias.data[rows].contiguous())
        self.out_features = len(rows)

    def keep_inputs(self, cols: slice, keep_bias: bool) -> None:
        """Keep input features `cols` (row parallel): `forward` then takes `[..., cols]` and
        returns this shard's partial sum `[..., out]` (per-token activation scales computed on
        the shard's slice; `weight_scale` is per output channel, so it stays whole). The bias is
        kept where `keep_bias` (one rank), so the ranks' sum adds it once."""
        self.weight = _frozen(self.weight.data[cols].contiguous())
        self.in_features = int(self.weight.shape[0])
        if not keep_bias:
            self.bias = None

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, W8A8_DYNAMIC"


class W8A8StaticLinear(nn.Module):
    """`W8A8`: per-channel int8 weights, per-tensor static int8 activations.

    `y = (quantize(x, input_scale, input_offset) @ weight + quant_bias) * deq_scale`; the float
    bias is folded into `quant_bias` (vllm-ascend `AscendW8A8LinearMethod.apply` passes only
    `quant_bias` to `npu_quant_matmul`).

    Args:
        weight: int8 `[out, in]` as stored in the checkpoint.
        input_scale: scalar activation scale.
        input_offset: scalar activation zero point (an integer value).
        deq_scale: float32 `[out]`, `input_scale * weight_scale`.
        quant_bias: int32 `[out]`.
    """

    def __init__(
        self,
        weight: torch.Tensor,
        input_scale: torch.Tensor,
        input_offset: torch.Tensor,
        deq_scale: torch.Tensor,
        quant_bias: torch.Tensor,
    ) -> None:
        super().__init__()
        self.out_features, self.in_features = weight.shape
        self.weight = _frozen(weight.t().contiguous())
        self.input_scale = _frozen(input_scale.reshape(()).float())
        self.input_offset = _frozen(input_offset.reshape(()).float())
        self.deq_scale = _frozen(deq_scale.reshape(-1).float())
        self.quant_bias = _frozen(quant_bias.reshape(-1).to(torch.int32))
        self._ops = active_ops()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """`[..., in]` float -> `[..., out]` in `x.dtype`."""
        flat = x.reshape(-1, self.in_features)
        xq = quantize_per_tensor(flat, self.input_scale, self.input_offset)
        # npu_quant_matmul takes a float32 `scale` with float16 output only next to a
        # pertoken_scale (op-plugin dtype table), so the per-token factor is an explicit 1.
        ones = torch.ones(flat.shape[0], dtype=torch.float32, device=flat.device)
        out = self._ops.quant_matmul(
            xq, self.weight, self.deq_scale, ones, x.dtype, self.quant_bias
        )
        return out.reshape(*x.shape[:-1], self.out_features)

    def keep_outputs(self, rows: torch.Tensor) -> None:
        """Keep output channels `rows` (int64 `[n]`, column parallel): the weight's columns,
        `deq_scale` and `quant_bias` follow them; the per-tensor input scale/offset stay."""
        self.weight = _frozen(self.weight.data[:, rows].contiguous())
        self.deq_scale = _frozen(self.deq_scale.data[rows].contiguous())
        self.quant_bias = _frozen(self.quant_bias.data[rows].contiguous())
        self.out_features = len(rows)

    def keep_inputs(self, cols: slice, keep_bias: bool) -> None:
        """Keep input features `cols` (row parallel): `forward` then takes `[..., cols]` and
        returns this shard's partial sum `[..., out]`. The per-tensor activation quantisation is
        element-wise, so the shards' int32 products sum to the whole layer's; `deq_scale` is per
        output channel and stays whole. `quant_bias` (the folded float bias and zero-point
        correction) is kept where `keep_bias` (one rank) and zero elsewhere, so it is added
        once."""
        self.weight = _frozen(self.weight.data[cols].contiguous())
        self.in_features = int(self.weight.shape[0])
        if not keep_bias:
            self.quant_bias = _frozen(torch.zeros_like(self.quant_bias.data))

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, W8A8"
