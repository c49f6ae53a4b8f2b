"""MLA ops: the references against expanded attention and transformers' rotary, and the `npu`
implementations against the recording torch_npu stand-in at the kernels' (DeepSeek-V3) sizes."""

from __future__ import annotations

import types
from dataclasses import replace

import pytest
import torch
from fake_torch_npu_util import calls_to
from transformers.models.deepseek_v2.modeling_deepseek_v2 import apply_rotary_emb
from transformers.models.deepseek_v3.modeling_deepseek_v3 import (
    apply_rotary_pos_emb,
    apply_rotary_pos_emb_interleave,
)

from npu_ops.ops import REGISTRY, mla
from npu_ops.ops.npu import mla as npu_mla
from operate.ops_check.preflight import compare, run_preflight
from operate.ops_check.samples import build_case
from operate.ops_check.shapes import OpShapes

# DeepSeek-V3's MLA at one head (the prolog kernel takes 1..128 heads) and 32 heads for decode
V3_PROLOG = OpShapes(
    dtype=torch.bfloat16, num_tokens=5, block_size=16, mla_heads=1, decode_lens=(5, 17, 33)
)
V3_DECODE = replace(V3_PROLOG, mla_heads=32)


def _angles(tokens: int, dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    inv = 1.0 / (10000 ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
    freqs = torch.outer(torch.arange(tokens, dtype=torch.float64) + 3, inv)
    return torch.cat([freqs.cos()] * 2, -1), torch.cat([freqs.sin()] * 2, -1)


def test_rope_is_transformers_deepseek_v3_rotary_in_both_layouts() -> None:
    x = torch.randn(6, 3, 8, dtype=torch.float64)
    cos, sin = _angles(6, 8)
    want, _ = apply_rotary_pos_emb_interleave(x, x, cos, sin, unsqueeze_dim=1)
    # the op rotates in float32: float32's tolerances (torch.testing's defaults for it)
    f32 = {"rtol": 1.3e-6, "atol": 1e-5}
    torch.testing.assert_close(mla.mla_rope(x, cos, sin, interleaved=True).double(), want, **f32)
    want, _ = apply_rotary_pos_emb(x, x, cos, sin, unsqueeze_dim=1)
    torch.testing.assert_close(mla.mla_rope(x, cos, sin, interleaved=False).double(), want, **f32)


def test_rope_is_deepseek_v2_complex_rotary_with_pairs_de_interleaved() -> None:
    x = torch.randn(1, 3, 6, 8)  # transformers' [batch, heads, seq, dim]
    cos, sin = _angles(6, 8)
    freqs_cis = torch.polar(torch.ones(6, 4), torch.atan2(sin[:, :4], cos[:, :4]).float())
    want, _ = apply_rotary_emb(x, x, freqs_cis[None])
    ours = mla.mla_rope(x[0].transpose(0, 1), cos.float(), sin.float()).transpose(0, 1)
    de_interleaved = torch.cat((want[0, ..., 0::2], want[0, ..., 1::2]), dim=-1)
    torch.testing.assert_close(ours, de_interleaved, rtol=1e-6, atol=1e-6)


def _expanded_attention(case: tuple, context_len: int) -> torch.Tensor:
    """The last token of a sequence attending to all of it, MLA as transformers computes it:
    K and V expanded per head from the latent (float64, no absorption)."""
    x, w_dq, w_uq_qr, w_uk, w_dkv_kr, g_cq, g_ckv, sin, cos = (
        a.double() if isinstance(a, torch.Tensor) else a for a in case[:9]
    )
    eps = case[12]
    n, d, hckv = w_uk.shape
    dr = cos.shape[-1]

    def rms(v: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
        return v / torch.sqrt((v**2).mean(-1, keepdim=True) + eps) * g

    def rope(v: torch.Tensor) -> torch.Tensor:  # interleaved pairs rotated as complex numbers
        z = torch.complex(v[..., 0::2], v[..., 1::2])
        z = z * torch.complex(cos[:, : dr // 2], sin[:, : dr // 2])[:, None]
        return torch.stack((z.real, z.imag), dim=-1).flatten(-2)

    q = (rms(x @ w_dq, g_cq) @ w_uq_qr).view(-1, n, d + dr)
    kv = x @ w_dkv_kr
    c_kv = rms(kv[:, :hckv], g_ckv)
    k_nope = torch.einsum("tl,ndl->tnd", c_kv, w_uk)
    k_pe = rope(kv[:, None, hckv:]).expand(-1, n, -1)
    q_pe = rope(q[..., d:])
    keys = torch.cat((k_nope, k_pe), dim=-1)[:context_len]
    query = torch.cat((q[..., :d], q_pe), dim=-1)[context_len - 1]
    scores = torch.einsum("nd,tnd->nt", query, keys) * (d + dr) ** -0.5
    return torch.einsum("nt,tl->nl", scores.softmax(-1), c_kv[:context_len])  # [N, Hckv]


def test_prolog_and_decode_in_the_latent_space_equal_expanded_attention() -> None:
    shapes = OpShapes(
        dtype=torch.float32,
        num_tokens=11,
        block_size=4,
        mla_hidden_size=32,
        mla_heads=3,
        q_lora_rank=24,
        kv_lora_rank=16,
        qk_nope_head_dim=8,
        qk_rope_head_dim=8,
    )
    case = build_case("mla_prolog", shapes).args
    query, query_rope, kv_cache, kr_cache = mla.mla_prolog(*case)
    assert query.shape == (11, 3, 16) and query_rope.shape == (11, 3, 8)
    # the 11 tokens as one sequence in blocks 0-2 of a fresh cache (the case's slots are
    # scattered), so the context of token i is tokens 0..i
    slots = case[9]
    kv_seq, kr_seq = torch.zeros(12, 1, 1, 16), torch.zeros(12, 1, 1, 8)
    kv_seq.view(-1, 16)[:11] = kv_cache.view(-1, 16)[slots]
    kr_seq.view(-1, 8)[:11] = kr_cache.view(-1, 8)[slots]
    table = torch.arange(3, dtype=torch.int32)[None]
    for length in (1, 6, 11):
        got = mla.mla_decode_attention(
            query[length - 1 : length],
            query_rope[length - 1 : length],
            kv_seq.view(3, 4, 1, 16),
            kr_seq.view(3, 4, 1, 8),
            table,
            torch.tensor([length], dtype=torch.int32),
            (8 + 8) ** -0.5,
        )[0]
        want = _expanded_attention(case, length)
        torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5)


def test_prolog_writes_each_tokens_latent_at_its_slot() -> None:
    shapes = replace(V3_PROLOG, dtype=torch.float32, mla_hidden_size=32, q_lora_rank=None)
    shapes = replace(shapes, kv_lora_rank=16, qk_nope_head_dim=8, qk_rope_head_dim=8)
    case = build_case("mla_prolog", shapes).args
    before = case[10].clone()
    _, _, kv_cache, _ = mla.mla_prolog(*case)
    written = torch.zeros(kv_cache.view(-1, 16).shape[0], dtype=torch.bool)
    written[case[9]] = True
    assert torch.equal(kv_cache.view(-1, 16)[~written], before.view(-1, 16)[~written])
    assert not torch.equal(kv_cache.view(-1, 16)[written], before.view(-1, 16)[written])


def test_prolog_rejects_a_mismatched_query_projection() -> None:
    case = list(build_case("mla_prolog", replace(V3_PROLOG, dtype=torch.float32)).args)
    case[2] = case[2][:, :-1]
    with pytest.raises(ValueError, match=r"N \* \(D \+ Dr\)"):
        mla.mla_prolog(*case)


def _fresh(case: tuple) -> tuple:
    """The case with its caches copied (each implementation writes its own)."""
    return tuple(a.clone() if i in (10, 11) else a for i, a in enumerate(case))


def test_npu_prolog_calls_the_kernel_with_nz_weights_once_cast(
    fake_torch_npu_module: types.ModuleType,
) -> None:
    case = build_case("mla_prolog", V3_PROLOG).args
    want = mla.mla_prolog(*_fresh(case))
    got = npu_mla.mla_prolog(*_fresh(case))
    ok, err, reason = compare("mla_prolog", got, want)
    assert ok, f"{reason} (max abs err {err})"
    npu_mla.mla_prolog(*_fresh(case))  # the weights are NZ already: no second cast
    assert [c["acl_format"] for c in calls_to("npu_format_cast_")] == [29, 29, 29]
    first, second = calls_to("npu_mla_prolog_v2")
    assert first["weight_formats"] == (29, 29, 29) and first["cache_mode"] == "PA_BSND"
    assert first["token_x"] == ((5, 7168), torch.bfloat16)
    assert first["weight_uk"][0] == (1, 128, 512) and first["kv_cache"][0][2:] == (1, 512)
    assert first["rope_cos"][0] == (5, 64) and first["cache_index"][1] == torch.int64


@pytest.mark.parametrize(
    "change",
    [
        {"q_lora_rank": None},  # DeepSeek-V2-Lite: no query LoRA
        {"dtype": torch.float16},
        {"mla_hidden_size": 2048},
        {"mla_heads": 3},
    ],
    ids=["no-q-lora", "float16", "hidden-2048", "3-heads"],
)
def test_npu_prolog_outside_the_kernels_shapes_runs_the_reference(
    fake_torch_npu_module: types.ModuleType, change: dict
) -> None:
    case = build_case("mla_prolog", replace(V3_PROLOG, **change)).args
    got = npu_mla.mla_prolog(*_fresh(case))
    ok, _, reason = compare("mla_prolog", got, mla.mla_prolog(*_fresh(case)))
    assert ok, reason
    assert calls_to("npu_mla_prolog_v2") == [] and calls_to("npu_format_cast_") == []


def test_npu_prolog_without_interleaved_pairs_runs_the_reference(
    fake_torch_npu_module: types.ModuleType,
) -> None:
    case = build_case("mla_prolog", V3_PROLOG).args[:-1] + (False,)
    got = npu_mla.mla_prolog(*_fresh(case))
    assert compare("mla_prolog", got, mla.mla_prolog(*_fresh(case)))[0]
    assert calls_to("npu_mla_prolog_v2") == []


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_npu_decode_calls_fused_infer_attention_in_mla_mode(
    fake_torch_npu_module: types.ModuleType, dtype: torch.dtype
) -> None:
    case = build_case("mla_decode_attention", replace(V3_DECODE, dtype=dtype)).args
    got = npu_mla.mla_decode_attention(*case)
    ok, err, reason = compare("mla_decode_attention", got, mla.mla_decode_attention(*case))
    assert ok, f"{reason} (max abs err {err})"
    (call,) = calls_to("npu_fused_infer_attention_score")
    assert call["input_layout"] == "BSND" and call["sparse_mode"] == 0
    assert call["query"][0] == (3, 1, 32, 512) and call["query_rope"][0] == (3, 1, 32, 64)
    assert call["key"][0][1:] == (16, 512) and call["key_rope"][0][1:] == (16, 64)
    assert call["same_key_value"] and call["num_key_value_heads"] == 1
    assert call["actual_seq_lengths_kv"] == [5, 17, 33] and call["block_size"] == 16


def test_npu_decode_with_16_heads_runs_the_reference(
    fake_torch_npu_module: types.ModuleType,
) -> None:
    case = build_case("mla_decode_attention", replace(V3_DECODE, mla_heads=16)).args
    got = npu_mla.mla_decode_attention(*case)
    assert compare("mla_decode_attention", got, mla.mla_decode_attention(*case))[0]
    assert calls_to("npu_fused_infer_attention_score") == []


def test_preflight_at_deepseek_v3_sizes_passes_on_a_stand_in_npu(
    fake_torch_npu_module: types.ModuleType,
) -> None:
    targets = [(REGISTRY.get(op), [REGISTRY.get(op).implementation("npu")]) for op in mla_ops()]
    results = run_preflight(targets, V3_DECODE, torch.device("cpu"))
    assert [(r.op, r.ok) for r in results] == [(op, True) for op in mla_ops()]
    assert len(calls_to("npu_mla_prolog_v2")) == 1
    assert len(calls_to("npu_fused_infer_attention_score")) == 1


def mla_ops() -> list[str]:
    return ["mla_prolog", "mla_decode_attention"]
