"""Every op, its reference, and the implementations registered against it.

| op | reference | npu (torch_npu) | torch (fused torch kernels) |
|---|---|---|---|
| rms_norm | `norm.rms_norm` | `npu_rms_norm` | `F.rms_norm` (cuda, cpu) |
| add_rms_norm | `norm.add_rms_norm` | `npu_add_rms_norm` | add + `F.rms_norm` (cuda, cpu) |
| layer_norm | `norm.layer_norm` | `F.layer_norm`******* | `F.layer_norm` (cuda, cpu) |
| rotary_embedding | `activation.rotary_embedding` | `npu_rotary_mul` | — |
| swiglu | `activation.swiglu` | `npu_swiglu` | — |
| prefill_attention | `attention.prefill_attention` | `npu_fusion_attention` (TND) | SDPA (cuda) |
| paged_decode_attention | `attention.paged_decode_attention` | `npu_incre_flash_attention` | SDPA*|
| encoder_attention | `encoder_attention.<op>` | `npu_fusion_attention` (TND) | SDPA (cuda, cpu) |
| moe_grouped_topk | `moe_gating.moe_grouped_topk` | `npu_moe_gating_top_k` | — |
| moe_topk_softmax | `moe_gating.moe_topk_softmax` | `npu_moe_gating_top_k_softmax` | — |
| moe_dispatch | `moe_routing.moe_dispatch` | `npu_moe_init_routing` | — |
| moe_combine | `moe_routing.moe_combine` | `npu_moe_finalize_routing` | — |
| dynamic_quant | `quant.dynamic_quant` | `npu_dynamic_quant` | — |
| quant_matmul | `quant.quant_matmul` | `npu_quant_matmul` | — |
| fp8_block_matmul | `quant.fp8_block_matmul` | `npu_quant_matmul`***** | `scaled_mm`****** |
| mxfp4_matmul | `quant.mxfp4_matmul` | `npu_quant_matmul`***** | — |
| mxfp4_grouped_matmul | `quant.mxfp4_grouped_matmul` | `npu_grouped_matmul`***** | — |
| grouped_lora | `lora.grouped_lora` | the reference** | —******** |
| mla_prolog | `mla.mla_prolog` | `npu_mla_prolog_v2`*** | — |
| mla_decode_attention | `mla.mla_decode_attention` | `npu_fused_infer_attention_score`*** | — |
| kv_compress | `sparse_attention.kv_compress` | the reference**** | — |
| lightning_indexer | `sparse_attention.lightning_indexer` | `npu_lightning_indexer`**** | — |
| sparse_shared_kv_attention | `sparse_attention.<op>` | `npu_sparse_flash_attention`**** | — |

"—" means the reference runs on that platform. * cuda; on cpu our own kernel
(`npu_ops/cpu_kernels/paged_decode_attention.cpp`, implementation `cpu`). ** registered as `npu`
as it is: two dense GEMMs and a mask (`aclnnMatmul`, `aclnnInplaceMaskedFillScalar`,
`aclnnAddmm` through torch_npu's aten dispatch), fewer launches than `npu_grouped_matmul`'s one
shrink and one expand per slice of a merged projection. *** DeepSeek-V3-sized MLA only (the
kernels' documented shapes, `npu_ops.ops.npu.mla`); other shapes run the reference on the device.
**** DeepSeek-V4 (`npu_ops.ops.npu.sparse_attention`): the indexer at 128-wide keys and at most 64
heads over the engine's paged entries (one query per kernel batch), the attention at 512-wide
K=V with its sinks folded into the kernel's rope slices (A2/A3 take no `sinks`), other shapes on
the reference; no torch_npu op pools windows (vLLM-Ascend's fused `Compressor` is a custom op of
its own, not for Atlas A2), so `kv_compress` is registered as `npu` as it is.
***** Ascend 950 only (`npu_ops.platform.is_ascend_950`; `npu_ops.ops.npu.fp8`): FP8 x FP8 in
G-B mode for 128 x 128 weight blocks, MXFP8 x MXFP4 in MX mode (the experts' grouped matmul too),
activations quantised per call;
other shapes and other NPUs run the reference. Atlas A2/A3 (910B) have no FP8/FP4 matmul: there the
loader converts FP8/MXFP4 checkpoints to W8A8_DYNAMIC at load (`engine.quantization.fp8_loader`).
On cpu the three ops run our table-lookup dequantisation kernel (`npu_ops.ops.cpu_quant`,
implementation `cpu`, where it builds). ****** implementation `cuda` (`npu_ops.ops.cuda_fp8`):
torch's blockwise 1x128 x 128x128 `scaled_mm` on SM90+ for 128 x 128 blocks and bfloat16
activations, else the reference.
******* registered as `npu` as it is: torch_npu's own `npu_layer_norm_eval` is marked for
deprecation in favour of `torch.nn.functional.layer_norm` (Ascend Extension for PyTorch API
reference, https://hiascend.com/document/detail/zh/Pytorch/600/apiref/apilist/ptaoplist_000802.html),
which torch_npu dispatches to the device's LayerNorm kernel.
******** on cpu our own kernel (`npu_ops/cpu_kernels/grouped_lora.cpp`, implementation `cpu`,
`npu_ops.ops.cpu_lora`): SGMV order, no work on other adapters' columns or a merged projection's
zeros.

The rule: each platform runs the first implementation registered for it, else the reference. CPU
runs torch's fused kernel where torch has one that is faster than the reference (`F.rms_norm`: one
kernel instead of six ops), our own kernel where we wrote one (`paged_decode_attention`,
`grouped_lora`, `npu_ops/cpu_kernels`; registered only on hosts whose CPU and toolchain can build
it), else the reference. The references stay the oracle: every implementation is tested against
its reference (`tests/npu_ops`), and `ASCEND_ROUTER_OP_IMPL="rms_norm=reference"` serves with one.

Which ops a serving step calls, per family, is in `docs/architecture.md` ("Ops on the serving
path"); `engine.fused_layers` is where the model's modules call them.
"""

from __future__ import annotations

from npu_ops.cpu_kernels import (
    BLOCK_DEQUANTIZE,
    GROUPED_LORA,
    PAGED_DECODE_ATTENTION,
    unavailable,
)
from npu_ops.ops import (
    activation,
    attention,
    cpu_attention,
    cpu_lora,
    cpu_quant,
    cuda_fp8,
    encoder_attention,
    lora,
    mla,
    moe_gating,
    moe_routing,
    norm,
    quant,
    sparse_attention,
    torch_native,
)
from npu_ops.ops.npu import attention as npu_attention
from npu_ops.ops.npu import elementwise as npu_elementwise
from npu_ops.ops.npu import fp8 as npu_fp8
from npu_ops.ops.npu import mla as npu_mla
from npu_ops.ops.npu import moe as npu_moe
from npu_ops.ops.npu import quant as npu_quant
from npu_ops.ops.npu import sparse_attention as npu_sparse
from npu_ops.ops.registry import OpRegistry

NPU = ("npu",)
CUDA = ("cuda",)
TORCH_FUSED = ("cuda", "cpu")


def build_registry() -> OpRegistry:
    """A registry holding every op of the table above."""
    reg = OpRegistry()
    reg.define("rms_norm", norm.rms_norm, "RMSNorm over the last dimension")
    reg.define("add_rms_norm", norm.add_rms_norm, "residual add, then RMSNorm")
    reg.define("layer_norm", norm.layer_norm, "LayerNorm over the last dimension")
    reg.define("rotary_embedding", activation.rotary_embedding, "rotary position embedding")
    reg.define("swiglu", activation.swiglu, "silu(gate) * up")
    reg.define("prefill_attention", attention.prefill_attention, "varlen causal attention")
    reg.define(
        "paged_decode_attention",
        attention.paged_decode_attention,
        "decode attention over a paged KV cache",
    )
    reg.define(
        "encoder_attention",
        encoder_attention.encoder_attention,
        "bidirectional attention within segments",
    )
    reg.define("moe_grouped_topk", moe_gating.moe_grouped_topk, "DeepSeek-V3 sigmoid routing")
    reg.define("moe_topk_softmax", moe_gating.moe_topk_softmax, "softmax top-k routing")
    reg.define("moe_dispatch", moe_routing.moe_dispatch, "sort token copies by expert")
    reg.define("moe_combine", moe_routing.moe_combine, "weighted un-sort of expert outputs")
    reg.define("dynamic_quant", quant.dynamic_quant, "per-token int8 quantisation")
    reg.define("quant_matmul", quant.quant_matmul, "W8A8 matmul with dequant")
    reg.define("fp8_block_matmul", quant.fp8_block_matmul, "block-scaled FP8 weight-only matmul")
    reg.define("mxfp4_matmul", quant.mxfp4_matmul, "MXFP4 weight-only matmul")
    reg.define(
        "mxfp4_grouped_matmul", quant.mxfp4_grouped_matmul, "MXFP4 matmuls of sorted expert rows"
    )
    reg.define("grouped_lora", lora.grouped_lora, "LoRA updates of rows by their adapter")
    reg.define("mla_prolog", mla.mla_prolog, "MLA projections, absorbed query, latent cache write")
    reg.define(
        "mla_decode_attention",
        mla.mla_decode_attention,
        "MLA decode attention over the paged latent cache",
    )
    reg.define("kv_compress", sparse_attention.kv_compress, "DeepSeek-V4 window pooling")
    reg.define(
        "lightning_indexer", sparse_attention.lightning_indexer, "DeepSeek-V4 top-k entry choice"
    )
    reg.define(
        "sparse_shared_kv_attention",
        sparse_attention.sparse_shared_kv_attention,
        "attention over per-query K=V slots with sinks",
    )

    reg.register("rms_norm", "npu", npu_elementwise.rms_norm, NPU)
    reg.register("add_rms_norm", "npu", npu_elementwise.add_rms_norm, NPU)
    reg.register("layer_norm", "npu", torch_native.layer_norm, NPU)
    reg.register("rotary_embedding", "npu", npu_elementwise.rotary_embedding, NPU)
    reg.register("swiglu", "npu", npu_elementwise.swiglu, NPU)
    reg.register("prefill_attention", "npu", npu_attention.prefill_attention, NPU)
    reg.register("paged_decode_attention", "npu", npu_attention.paged_decode_attention, NPU)
    reg.register("encoder_attention", "npu", npu_attention.encoder_attention, NPU)
    reg.register("moe_grouped_topk", "npu", npu_moe.moe_grouped_topk, NPU)
    reg.register("moe_topk_softmax", "npu", npu_moe.moe_topk_softmax, NPU)
    reg.register("moe_dispatch", "npu", npu_moe.moe_dispatch, NPU)
    reg.register("moe_combine", "npu", npu_moe.moe_combine, NPU)
    reg.register("dynamic_quant", "npu", npu_quant.dynamic_quant, NPU)
    reg.register("quant_matmul", "npu", npu_quant.quant_matmul, NPU)
    reg.register("fp8_block_matmul", "npu", npu_fp8.fp8_block_matmul, NPU)
    reg.register("mxfp4_matmul", "npu", npu_fp8.mxfp4_matmul, NPU)
    reg.register("mxfp4_grouped_matmul", "npu", npu_fp8.mxfp4_grouped_matmul, NPU)
    reg.register("grouped_lora", "npu", lora.grouped_lora, NPU)
    reg.register("mla_prolog", "npu", npu_mla.mla_prolog, NPU)
    reg.register("mla_decode_attention", "npu", npu_mla.mla_decode_attention, NPU)
    reg.register("kv_compress", "npu", npu_sparse.kv_compress, NPU)
    reg.register("lightning_indexer", "npu", npu_sparse.lightning_indexer, NPU)
    reg.register("sparse_shared_kv_attention", "npu", npu_sparse.sparse_shared_kv_attention, NPU)

    reg.register("fp8_block_matmul", "cuda", cuda_fp8.fp8_block_matmul, CUDA)
    reg.register("rms_norm", "torch", torch_native.rms_norm, TORCH_FUSED, portable=True)
    reg.register("add_rms_norm", "torch", torch_native.add_rms_norm, TORCH_FUSED, portable=True)
    reg.register("layer_norm", "torch", torch_native.layer_norm, TORCH_FUSED, portable=True)
    reg.register("prefill_attention", "torch", torch_native.prefill_attention, CUDA, portable=True)
    reg.register(
        "encoder_attention", "torch", torch_native.encoder_attention, TORCH_FUSED, portable=True
    )
    reg.register(
        "paged_decode_attention",
        "torch",
        torch_native.paged_decode_attention,
        CUDA,
        portable=True,
    )
    if unavailable(BLOCK_DEQUANTIZE) is None:
        reg.register("fp8_block_matmul", "cpu", cpu_quant.fp8_block_matmul, ("cpu",))
        reg.register("mxfp4_matmul", "cpu", cpu_quant.mxfp4_matmul, ("cpu",))
        reg.register("mxfp4_grouped_matmul", "cpu", cpu_quant.mxfp4_grouped_matmul, ("cpu",))
    if unavailable(PAGED_DECODE_ATTENTION) is None:
        reg.register(
            "paged_decode_attention", "cpu", cpu_attention.paged_decode_attention, ("cpu",)
        )
    if unavailable(GROUPED_LORA) is None:
        reg.register("grouped_lora", "cpu", cpu_lora.grouped_lora, ("cpu",))
    return reg


REGISTRY = build_registry()
