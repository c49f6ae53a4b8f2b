"""Fused ops: one pure-torch reference per op, device implementations chosen once at start-up.

`active_ops()` is the table the engine calls through (`ops = active_ops(); ops.rms_norm(...)`).
On the serving path the model's norm, rotary, SwiGLU and MoE routing modules call it
(`engine.fused_layers`, `engine.fused_moe`; per family: docs/architecture.md, "Ops on the
serving path"), W8A8 linears call `dynamic_quant`/`quant_matmul`, and `engine.attention` calls
`paged_decode_attention` for decode tokens (prefill attention is still its own SDPA), DeepSeek's
MLA calls `mla_prolog` and `mla_decode_attention` (`engine.mla_attention`), DeepSeek-V4's
attention `kv_compress`, `lightning_indexer` and `sparse_shared_kv_attention`
(`engine.deepseek_v4.attention`), LoRA linears call `grouped_lora` on steps with LoRA
requests (`engine.lora.layer`), and the vision and audio encoders' attention modules call
`encoder_attention` (`engine.multimodal.encoder_attention`).
The op list and its implementations are in `npu_ops.ops.catalog`; selection rules in
`npu_ops.ops.registry`. Override one op for debugging with
`ASCEND_ROUTER_OP_IMPL="rms_norm=reference,swiglu=npu"`.
"""

from __future__ import annotations

import functools

from configs import envs
from npu_ops.ops.catalog import REGISTRY
from npu_ops.ops.registry import OpTable
from npu_ops.platform import current_platform

__all__ = ["REGISTRY", "OpTable", "active_ops"]


@functools.cache
def active_ops() -> OpTable:
    """The implementation of every op for this process's platform, chosen (and logged) once.

    Raises:
        ValueError: `ASCEND_ROUTER_OP_IMPL` is malformed or names an unknown op/implementation.
    """
    return REGISTRY.select(current_platform().kind.value, envs.op_impl_overrides())
