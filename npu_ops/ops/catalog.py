"""Every op, its reference, and the implementations registered against it.

| op | reference | npu (torch_npu) | cuda (torch) |
|---|---|---|---|
| rms_norm | `norm.rms_norm` | `npu_rms_norm` | `F.rms_norm` |
| add_rms_norm | `norm.add_rms_norm` | `npu_add_rms_norm` | add + `F.rms_norm` |
| rotary_embedding | `activation.rotary_embedding` | `npu_rotary_mul` | — |
| swiglu | `activation.swiglu` | `npu_swiglu` | — |
| prefill_attention | `attention.prefill_attention` | `npu_fusion_attention` (TND) | SDPA |
| paged_decode_attention | `attention.paged_decode_attention` | `npu_incre_flash_attention` | SDPA |
| moe_grouped_topk | `moe_gating.moe_grouped_topk` | `npu_moe_gating_top_k` | — |
| moe_topk_softmax | `moe_gating.moe_topk_softmax` | `npu_moe_gating_top_k_softmax` | — |
| moe_dispatch | `moe_routing.moe_dispatch` | `npu_moe_init_routing` | — |
| moe_combine | `moe_routing.moe_combine` | `npu_moe_finalize_routing` | — |
| dynamic_quant | `quant.dynamic_quant` | `npu_dynamic_quant` | — |
| quant_matmul | `quant.quant_matmul` | `npu_quant_matmul` | — |

"—" means the reference runs on that platform. CPU always runs the references.
"""

from __future__ import annotations

from npu_ops.ops import activation, attention, moe_gating, moe_routing, norm, quant, torch_native
from npu_ops.ops.npu import attention as npu_attention
from npu_ops.ops.npu import elementwise as npu_elementwise
from npu_ops.ops.npu import moe as npu_moe
from npu_ops.ops.npu import quant as npu_quant
from npu_ops.ops.registry import OpRegistry

NPU = ("npu",)
CUDA = ("cuda",)


def build_registry() -> OpRegistry:
    """A registry holding every op of the table above."""
    reg = OpRegistry()
    reg.define("rms_norm", norm.rms_norm, "RMSNorm over the last dimension")
    reg.define("add_rms_norm", norm.add_rms_norm, "residual add, then RMSNorm")
    reg.define("rotary_embedding", activation.rotary_embedding, "rotary position embedding")
    reg.define("swiglu", activation.swiglu, "silu(gate) * up")
    reg.define("prefill_attention", attention.prefill_attention, "varlen causal attention")
    reg.define(
        "paged_decode_attention",
        attention.paged_decode_attention,
        "decode attention over a paged KV cache",
    )
    reg.define("moe_grouped_topk", moe_gating.moe_grouped_topk, "DeepSeek-V3 sigmoid routing")
    reg.define("moe_topk_softmax", moe_gating.moe_topk_softmax, "softmax top-k routing")
    reg.define("moe_dispatch", moe_routing.moe_dispatch, "sort token copies by expert")
    reg.define("moe_combine", moe_routing.moe_combine, "weighted un-sort of expert outputs")
    reg.define("dynamic_quant", quant.dynamic_quant, "per-token int8 quantisation")
    reg.define("quant_matmul", quant.quant_matmul, "W8A8 matmul with dequant")

    reg.register("rms_norm", "npu", npu_elementwise.rms_norm, NPU)
    reg.register("add_rms_norm", "npu", npu_elementwise.add_rms_norm, NPU)
    reg.register("rotary_embedding", "npu", npu_elementwise.rotary_embedding, NPU)
    reg.register("swiglu", "npu", npu_elementwise.swiglu, NPU)
    reg.register("prefill_attention", "npu", npu_attention.prefill_attention, NPU)
    reg.register("paged_decode_attention", "npu", npu_attention.paged_decode_attention, NPU)
    reg.register("moe_grouped_topk", "npu", npu_moe.moe_grouped_topk, NPU)
    reg.register("moe_topk_softmax", "npu", npu_moe.moe_topk_softmax, NPU)
    reg.register("moe_dispatch", "npu", npu_moe.moe_dispatch, NPU)
    reg.register("moe_combine", "npu", npu_moe.moe_combine, NPU)
    reg.register("dynamic_quant", "npu", npu_quant.dynamic_quant, NPU)
    reg.register("quant_matmul", "npu", npu_quant.quant_matmul, NPU)

    reg.register("rms_norm", "cuda", torch_native.rms_norm, CUDA, portable=True)
    reg.register("add_rms_norm", "cuda", torch_native.add_rms_norm, CUDA, portable=True)
    reg.register("prefill_attention", "cuda", torch_native.prefill_attention, CUDA, portable=True)
    reg.register(
        "paged_decode_attention",
        "cuda",
        torch_native.paged_decode_attention,
        CUDA,
        portable=True,
    )
    return reg


REGISTRY = build_registry()
