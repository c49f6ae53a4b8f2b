"""W8A8_DYNAMIC routed experts, in place of transformers' 3-D experts module.

ModelSlim stores each routed expert of a W8A8_DYNAMIC MoE checkpoint as separate 2-D linears
(`experts.{e}.w1|w3|w2` in DeepSeek's naming, `experts.{e}.gate_proj|up_proj|down_proj` in
Hugging Face's), each an int8 weight with per-output-channel `weight_scale` / `weight_offset`
`[out, 1]`; vllm-ascend stacks them into `w13_weight` `[E, 2I, H]` and `w2_weight` `[E, H, I]`
with scales `[E, 2I, 1]` / `[E, H, 1]` (`AscendW8A8DynamicFusedMoEMethod.get_weight` and
`get_dynamic_quant_param` in vllm_ascend/quantization/methods/w8a8_dynamic.py). This module holds
the same stacks, transposed per expert to the `[K, N]` operand of op `quant_matmul`.

The computation is `engine.fused_moe.RegistryExperts`' with each GEMM quantised: op
`moe_dispatch`, then per expert `quant_matmul(dynamic_quant(rows), gate_up)`, the gate (SiLU of
the gate half times the up half, both clamped first where the model clamps them: DeepSeek-V4's
`swiglu_limit`, transformers' `DeepseekV4Experts._apply_gate`), `quant_matmul(dynamic_quant(.),
down)`, and op `moe_combine`.

Tensor and expert parallel (`engine.parallel.sharding`) shard the module after it is built, as
the float experts: `keep_intermediate` splits each expert's intermediate size (the gate and up
columns, and `down`'s input rows, with their scales), `keep_experts` keeps a rank's experts; the
ranks' partial sums are added by `engine.parallel.layers.ReducedExperts`.
"""

from __future__ import annotations

import re

import torch
from torch import nn

from engine.quantization.tensor_files import TensorFiles, check, dynamic_scale
from npu_ops.ops import active_ops


def _frozen(t: torch.Tensor) -> nn.Parameter:
    return nn.Parameter(t, requires_grad=False)


def gated_activation(gate_up: torch.Tensor, act_fn: nn.Module, limit: float | None) -> torch.Tensor:
    """`act_fn(gate) * up` of `[T, 2I]` gate-then-up rows -> `[T, I]`, both halves clamped first
    where the model clamps them (gate `<= limit`, up in `[-limit, limit]`: DeepSeek-V4's
    `swiglu_limit`, transformers' `DeepseekV4Experts._apply_gate`)."""
    gate, up = gate_up.chunk(2, dim=-1)
    if limit is not None:
        gate = gate.clamp(max=limit)
        up = up.clamp(min=-limit, max=limit)
    return act_fn(gate) * up


class W8A8DynamicExperts(nn.Module):
    """Routed experts with int8 weights and per-token int8 activations.

    Args:
        gate_up: int8 `[E, 2I, H]`, each expert's gate rows then its up rows (the layout of
            transformers' `gate_up_proj`).
        gate_up_scale: `[E, 2I]` per-output-channel scales.
        down: int8 `[E, H, I]`.
        down_scale: `[E, H]`.
        act_fn: the activation applied to the gate half (SiLU for the families served).
        limit: clamp bound of the gate (`<= limit`) and up (`[-limit, limit]`) halves, or None.
    """

    def __init__(
        self,
        gate_up: torch.Tensor,
        gate_up_scale: torch.Tensor,
        down: torch.Tensor,
        down_scale: torch.Tensor,
        act_fn: nn.Module,
        limit: float | None,
    ) -> None:
        super().__init__()
        self.num_experts, two_i, self.hidden_dim = gate_up.shape
        self.intermediate_dim = two_i // 2
        assert tuple(down.shape) == (self.num_experts, self.hidden_dim, self.intermediate_dim)
        self.gate_up_proj = _frozen(gate_up.transpose(1, 2).contiguous())  # [E, H, 2I]
        self.gate_up_scale = _frozen(gate_up_scale.reshape(self.num_experts, -1).float())
        self.down_proj = _frozen(down.transpose(1, 2).contiguous())  # [E, I, H]
        self.down_scale = _frozen(down_scale.reshape(self.num_experts, -1).float())
        self.act_fn = act_fn
        self.limit = limit
        self._ops = active_ops()

    def _gate(self, gate_up: torch.Tensor) -> torch.Tensor:
        return gated_activation(gate_up, self.act_fn, self.limit)

    def forward(
        self, hidden_states: torch.Tensor, top_k_index: torch.Tensor, top_k_weights: torch.Tensor
    ) -> torch.Tensor:
        """`[T, H]`, expert ids `[T, k]` and weights `[T, k]` -> `[T, H]` in the input dtype.

        Ids equal to `num_experts` (none on this rank) contribute zeros, as in transformers.
        """
        ids = top_k_index.to(torch.int32)
        ops = self._ops
        rows, expanded_row_idx, counts = ops.moe_dispatch(hidden_states, ids, self.num_experts + 1)
        out = rows.new_zeros(rows.shape[0], self.hidden_dim)
        xq, x_scale = ops.dynamic_quant(rows)
        dtype = hidden_states.dtype
        start = 0
        for e, n in enumerate(counts.tolist()[: self.num_experts]):
            if n:
                end = start + n
                h = ops.quant_matmul(
                    xq[start:end], self.gate_up_proj[e], self.gate_up_scale[e], x_scale[start:end],
                    dtype,
                )  # fmt: skip
                hq, h_scale = ops.dynamic_quant(self._gate(h))
                out[start:end] = ops.quant_matmul(
                    hq, self.down_proj[e], self.down_scale[e], h_scale, dtype
                )
            start += n
        return ops.moe_combine(out, expanded_row_idx, top_k_weights, ids)

    def keep_experts(self, experts: slice) -> None:
        """Keep experts `experts` only (expert parallel): their int8 stacks and scales; ids are
        then local (`engine.parallel.layers.ReducedExperts` maps them, other ranks' to
        `num_experts`)."""
        self.gate_up_proj = _frozen(self.gate_up_proj.data[experts].contiguous())
        self.gate_up_scale = _frozen(self.gate_up_scale.data[experts].contiguous())
        self.down_proj = _frozen(self.down_proj.data[experts].contiguous())
        self.down_scale = _frozen(self.down_scale.data[experts].contiguous())
        self.num_experts = int(self.gate_up_proj.shape[0])

    def keep_intermediate(self, part: slice) -> None:
        """Keep intermediate channels `part` of every expert (tensor parallel): those columns of
        the gate half and of the up half of `gate_up_proj` with their scales, and those input
        rows of `down_proj`. `down_scale` is per output (hidden) channel and stays whole;
        `forward` then returns this shard's partial sum, the per-token scale of the down GEMM's
        input computed on the shard's slice."""
        inter = self.intermediate_dim
        cols = torch.arange(part.start, part.stop)
        cols = torch.cat([cols, cols + inter]).to(self.gate_up_proj.device)
        self.gate_up_proj = _frozen(self.gate_up_proj.data[:, :, cols].contiguous())
        self.gate_up_scale = _frozen(self.gate_up_scale.data[:, cols].contiguous())
        self.down_proj = _frozen(self.down_proj.data[:, part].contiguous())
        self.intermediate_dim = part.stop - part.start

    def extra_repr(self) -> str:
        return (
            f"num_experts={self.num_experts}, hidden={self.hidden_dim}, "
            f"intermediate={self.intermediate_dim}, W8A8_DYNAMIC"
        )


EXPERT_INDEX = re.compile(r"\.experts\.(\d+)\.")
"""The expert number in a per-expert checkpoint name (`...experts.3.w1`, `...experts.3.up_proj`)."""


def stack_experts(
    files: TensorFiles, module_name: str, module: nn.Module, parts: dict[tuple[str, int, int], str]
) -> W8A8DynamicExperts:
    """One `W8A8DynamicExperts` from the per-expert layers transformers merged into `module`.

    Args:
        files: the checkpoint's tensors.
        module_name: `module`'s name in the model (for errors).
        module: the transformers experts module: 3-D `gate_up_proj` `[E, 2I, H]` and
            `down_proj` `[E, H, I]`, `act_fn`, and `limit` where it clamps.
        parts: (parameter, part, expert) -> checkpoint layer name, e.g. `("gate_up_proj", 1,
            3)` -> `layers.0.ffn.experts.3.w3` (part: its place in the parameter's
            concatenation along the output rows, as `CheckpointNames` reports it).

    Raises:
        ValueError: (naming the file and tensor or module) an expert or part missing, a weight
            not int8 or not 2-D, a non-zero `weight_offset`, stacks whose shape differs from the
            model's, or experts without an activation module.
    """
    act_fn = getattr(module, "act_fn", None)
    if not isinstance(act_fn, nn.Module):
        raise ValueError(
            f"{files.directory}: {module_name} ({type(module).__name__}) has no activation "
            "module; int8 routed experts are run for gated (`act_fn`) experts only"
        )
    stacks: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
    for param in ("gate_up_proj", "down_proj"):
        full = getattr(module, param, None)
        if not isinstance(full, torch.Tensor) or full.dim() != 3:
            raise ValueError(f"{files.directory}: {module_name} has no 3-D {param} to quantise")
        num_experts = full.shape[0]
        num_parts = 1 + max((p for q, p, _ in parts if q == param), default=-1)
        rows, scales = [], []
        for e in range(num_experts):
            for p in range(num_parts):
                layer = parts.get((param, p, e))
                if layer is None:
                    raise ValueError(
                        f"{files.directory}: {module_name}.{param}: expert {e} (part {p}) is not "
                        "quantised while others are; ModelSlim quantises all experts of a layer"
                    )
                weight = files.get(f"{layer}.weight")
                check(weight.dtype == torch.int8, files, f"{layer}.weight", "is not int8")
                check(weight.dim() == 2, files, f"{layer}.weight", "is not 2-D")
                rows.append(weight)
                scales.append(dynamic_scale(files, layer, weight.shape[0]))
        stacked = torch.cat(rows).view(num_experts, -1, rows[0].shape[1])
        if tuple(stacked.shape) != tuple(full.shape):
            raise ValueError(
                f"{files.directory}: {module_name}.{param}: int8 experts stack to "
                f"{list(stacked.shape)}, the model has {list(full.shape)}"
            )
        stacks[param] = (stacked, torch.cat(scales).view(num_experts, -1))
    return W8A8DynamicExperts(
        *stacks["gate_up_proj"],
        *stacks["down_proj"],
        act_fn=act_fn,
        limit=getattr(module, "limit", None),
    )
