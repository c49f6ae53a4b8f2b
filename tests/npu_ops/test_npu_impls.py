"""Every `npu` implementation against the recording torch_npu stand-in.

The stand-in has the documented signatures and asserts the documented dtypes, shapes and
layouts, so a wrong call fails here; its answers come from the references or the docs' own
formulas, so a wrong layout conversion shows up as a wrong result.
"""

from __future__ import annotations

import types
from collections.abc import Callable

import fake_torch_npu
import fake_torch_npu_util
import pytest
import torch
from fake_torch_npu_util import calls_to
from op_helpers import small_shapes

from npu_ops.ops import REGISTRY
from npu_ops.ops.npu import attention as npu_attention
from npu_ops.ops.npu import elementwise as npu_elementwise
from operate.ops_check.preflight import compare, run_preflight
from operate.ops_check.samples import build_case

# torch_npu call each op must make (the MLA decode fallback is tested separately; None: the
# reference's aten ops, no torch_npu call). The MLA ops' kernels take DeepSeek-V3's sizes only,
# and DeepSeek-V4's indexer and attention kernels V4-Flash's, so at `small_shapes` they run the
# reference; test_mla_ops.py and test_sparse_attention_ops.py check their kernel calls.
KERNEL: dict[str, str | None] = {
    "rms_norm": "npu_rms_norm",
    "add_rms_norm": "npu_add_rms_norm",
    "layer_norm": None,  # F.layer_norm: torch_npu's own LayerNorm through aten
    "rotary_embedding": "npu_rotary_mul",
    "swiglu": "npu_swiglu",
    "prefill_attention": "npu_fusion_attention",
    "paged_decode_attention": "npu_incre_flash_attention",
    "encoder_attention": "npu_fusion_attention",
    "moe_grouped_topk": "npu_moe_gating_top_k",
    "moe_topk_softmax": "npu_moe_gating_top_k_softmax",
    "moe_dispatch": "npu_moe_init_routing",
    "moe_combine": "npu_moe_finalize_routing",
    "dynamic_quant": "npu_dynamic_quant",
    "quant_matmul": "npu_quant_matmul",
    "fp8_block_matmul": None,
    "mxfp4_matmul": None,
    "mxfp4_grouped_matmul": None,
    "grouped_lora": None,
    "mla_prolog": None,
    "mla_decode_attention": None,
    "kv_compress": None,
    "lightning_indexer": None,
    "sparse_shared_kv_attention": None,
}


def test_every_op_has_an_npu_implementation() -> None:
    assert sorted(KERNEL) == sorted(REGISTRY.names())
    for op in REGISTRY:
        assert op.implementation("npu").platforms == frozenset({"npu"})


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("op", sorted(KERNEL))
def test_npu_impl_matches_reference(
    fake_torch_npu_module: types.ModuleType, op: str, dtype: torch.dtype
) -> None:
    opdef = REGISTRY.get(op)
    case = build_case(op, small_shapes(dtype))
    got = opdef.implementation("npu").fn(*case.args)
    ok, err, reason = compare(op, got, opdef.reference.fn(*case.args))
    assert ok, f"{op}: {reason} (max abs err {err})"
    kernel = KERNEL[op]
    if kernel is None:
        assert fake_torch_npu_util.CALLS == []
    else:
        assert len(calls_to(kernel)) == 1


def test_preflight_passes_on_a_stand_in_npu(fake_torch_npu_module: types.ModuleType) -> None:
    targets = [(op, [op.implementation("npu")]) for op in REGISTRY]
    results = run_preflight(targets, small_shapes(torch.bfloat16), torch.device("cpu"))
    assert [r.op for r in results if not r.ok] == []


def test_prefill_uses_tnd_layout_cumulative_lengths_and_compressed_causal_mask(
    fake_torch_npu_module: types.ModuleType,
) -> None:
    case = build_case("prefill_attention", small_shapes(torch.bfloat16))
    npu_attention.prefill_attention(*case.args)
    (call,) = calls_to("npu_fusion_attention")
    assert call["input_layout"] == "TND" and call["sparse_mode"] == 3
    assert call["actual_seq_qlen"] == [7, 10] and call["actual_seq_kvlen"] == [7, 16]
    assert call["head_num"] == 4 and call["atten_mask"] == ((2048, 2048), torch.bool)


def test_prefill_pads_a_smaller_value_head_for_mla(fake_torch_npu_module: types.ModuleType) -> None:
    shapes = small_shapes(torch.bfloat16, num_heads=2, num_kv_heads=2, k_head_dim=24, v_head_dim=16)
    case = build_case("prefill_attention", shapes)
    out = npu_attention.prefill_attention(*case.args)
    assert out.shape == (10, 2, 16)
    (call,) = calls_to("npu_fusion_attention")
    assert call["value"][0] == call["key"][0]  # padded to the key's shape, as the kernel needs
    ok, _, reason = compare(
        "prefill_attention", out, REGISTRY.get("prefill_attention").reference.fn(*case.args)
    )
    assert ok, reason


def test_decode_passes_page_attention_arguments(fake_torch_npu_module: types.ModuleType) -> None:
    case = build_case("paged_decode_attention", small_shapes(torch.bfloat16))
    npu_attention.paged_decode_attention(*case.args)
    (call,) = calls_to("npu_incre_flash_attention")
    assert call["input_layout"] == "BSH" and call["block_size"] == 16
    assert call["query"][0] == (3, 1, 4 * 16)
    assert call["key"][0][1:] == (16, 2 * 16)  # (blocknum, blocksize, H = Nkv * D)
    assert call["block_table"][1] == torch.int32 and call["actual_seq_lengths"] == [5, 17, 33]
    assert call["num_heads"] == 4 and call["num_key_value_heads"] == 2


def test_decode_with_differing_head_sizes_falls_back_to_the_reference(
    fake_torch_npu_module: types.ModuleType,
) -> None:
    shapes = small_shapes(torch.bfloat16, num_heads=2, num_kv_heads=2, k_head_dim=24, v_head_dim=16)
    case = build_case("paged_decode_attention", shapes)
    out = npu_attention.paged_decode_attention(*case.args)
    assert out.shape == (3, 2, 16) and calls_to("npu_incre_flash_attention") == []


def test_rotary_views_tokens_as_bsnd_with_1s1d_tables(
    fake_torch_npu_module: types.ModuleType,
) -> None:
    case = build_case("rotary_embedding", small_shapes(torch.bfloat16))
    npu_elementwise.rotary_embedding(*case.args)
    (call,) = calls_to("npu_rotary_mul")
    assert call["input"][0] == (1, 12, 4, 16) and call["r1"][0] == (1, 12, 1, 16)
    assert call["rotary_mode"] == "half"


def test_gating_asks_for_deepseek_v3_routing(fake_torch_npu_module: types.ModuleType) -> None:
    case = build_case("moe_grouped_topk", small_shapes())
    REGISTRY.get("moe_grouped_topk").implementation("npu").fn(*case.args)
    (call,) = calls_to("npu_moe_gating_top_k")
    assert (call["norm_type"], call["group_select_mode"], call["renorm"]) == (1, 1, 0)
    assert (call["k"], call["group_count"], call["k_group"]) == (4, 4, 2)
    assert call["routed_scaling_factor"] == 2.5


@pytest.mark.parametrize(
    "bad_call",
    [
        lambda m: m.npu_rms_norm(torch.zeros(2, 4), torch.ones(4), eps=1e-6),
        lambda m: m.npu_rms_norm(torch.zeros(2, 4), torch.ones(4).half()),
        lambda m: m.npu_moe_gating_top_k(torch.zeros(2, 32), 4, torch.zeros(32)),
        lambda m: m.npu_swiglu(torch.zeros(2, 5)),
        lambda m: m.npu_incre_flash_attention(
            torch.zeros(1, 1, 16),
            torch.zeros(2, 16, 16),
            torch.zeros(2, 16, 16),
            num_heads=1,
            block_table=torch.zeros(1, 1, dtype=torch.int32),
            actual_seq_lengths=[3],
            block_size=16,
        ),
        lambda m: m.npu_quant_matmul(
            torch.zeros(2, 4, dtype=torch.int8),
            torch.zeros(4, 3, dtype=torch.int8),
            torch.ones(3),
            pertoken_scale=torch.ones(2),
            output_dtype=torch.float16,
            bias=torch.ones(3, dtype=torch.int64),
        ),
    ],
    ids=[
        "wrong-kwarg-name",
        "gamma-dtype",
        "bias-positional",
        "odd-split-dim",
        "float32-query",
        "int64-bias",
    ],
)
def test_the_stand_in_rejects_undocumented_calls(
    bad_call: Callable[[types.ModuleType], object],
) -> None:
    with pytest.raises((TypeError, AssertionError)):
        bad_call(fake_torch_npu.make_module())


def test_npu_impls_need_torch_npu_on_a_plain_host() -> None:
    case = build_case("swiglu", small_shapes())
    with pytest.raises(ModuleNotFoundError, match="torch_npu"):
        npu_elementwise.swiglu(*case.args)
