"""Every op reference against a plain formula written independently (float64, loops, complex)."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
import torch

from npu_ops.ops import activation, attention, lora, moe_gating, moe_routing, norm, quant

torch.manual_seed(0)


def test_rms_norm_is_x_over_rms_times_gamma() -> None:
    x, w = torch.randn(5, 32), torch.randn(32)
    want = (
        torch.stack(
            [row.double() / math.sqrt(float((row.double() ** 2).mean()) + 1e-6) for row in x]
        )
        * w.double()
    )
    torch.testing.assert_close(norm.rms_norm(x, w, 1e-6).double(), want, rtol=1e-6, atol=1e-6)


def test_add_rms_norm_returns_norm_of_sum_and_the_sum() -> None:
    x, r, w = (
        torch.randn(4, 16, dtype=torch.bfloat16),
        torch.randn(4, 16).bfloat16(),
        torch.randn(16),
    )
    normed, summed = norm.add_rms_norm(x, r, w.bfloat16(), 1e-5)
    assert torch.equal(summed, x + r)
    torch.testing.assert_close(normed, norm.rms_norm(x + r, w.bfloat16(), 1e-5))


def _angles(tokens: int, dim: int) -> torch.Tensor:
    inv = 1.0 / (10000 ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
    return torch.outer(torch.arange(tokens, dtype=torch.float64), inv)  # [T, D/2]


def test_rotary_half_is_complex_rotation_of_half_pairs() -> None:
    t, n, d = 6, 3, 8
    x = torch.randn(t, n, d, dtype=torch.float64)
    theta = _angles(t, d)
    cos, sin = torch.cat([theta.cos()] * 2, -1), torch.cat([theta.sin()] * 2, -1)
    z = torch.complex(x[..., : d // 2], x[..., d // 2 :]) * torch.polar(
        torch.ones_like(theta), theta
    ).unsqueeze(1)
    want = torch.cat([z.real, z.imag], dim=-1)
    torch.testing.assert_close(activation.rotary_embedding(x, cos, sin, "half"), want)


def test_rotary_interleave_is_complex_rotation_of_adjacent_pairs() -> None:
    t, n, d = 5, 2, 8
    x = torch.randn(t, n, d, dtype=torch.float64)
    theta = _angles(t, d)
    cos, sin = theta.cos().repeat_interleave(2, -1), theta.sin().repeat_interleave(2, -1)
    z = torch.complex(x[..., 0::2], x[..., 1::2]) * torch.polar(
        torch.ones_like(theta), theta
    ).unsqueeze(1)
    want = torch.stack([z.real, z.imag], dim=-1).flatten(-2)
    torch.testing.assert_close(activation.rotary_embedding(x, cos, sin, "interleave"), want)


def test_rotary_rejects_unknown_mode() -> None:
    with pytest.raises(ValueError, match="rotary mode"):
        activation.rotate(torch.zeros(2, 4), "neox")


def test_swiglu_is_a_sigmoid_a_times_b() -> None:
    x = torch.randn(3, 10, dtype=torch.float64)
    a, b = x[:, :5], x[:, 5:]
    torch.testing.assert_close(activation.swiglu(x), a * torch.sigmoid(a) * b)


def _plain_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    scale: float,
    allowed: Callable[[int, int], bool],
) -> torch.Tensor:
    """Loops over heads and queries: softmax(scale * q·k) over allowed keys, GQA by h // g."""
    sq, nq, _ = q.shape
    group = nq // k.shape[1]
    out = torch.zeros(sq, nq, v.shape[-1], dtype=torch.float64)
    for h in range(nq):
        for i in range(sq):
            keys = [j for j in range(k.shape[0]) if allowed(i, j)]
            s = torch.tensor([float(q[i, h].double() @ k[j, h // group].double()) for j in keys])
            p = torch.exp((s - s.max()) * scale)
            p = p / p.sum()
            out[i, h] = sum(pj * v[j, h // group].double() for pj, j in zip(p, keys))
    return out


def test_prefill_attention_is_bottom_right_causal_softmax_per_sequence() -> None:
    q_lens, kv_lens = [4, 2], [4, 5]  # the second sequence continues a 3-token prefix
    q = torch.randn(sum(q_lens), 4, 8)
    k, v = torch.randn(sum(kv_lens), 2, 8), torch.randn(sum(kv_lens), 2, 6)
    got = attention.prefill_attention(q, k, v, q_lens, kv_lens, 0.3)
    want0 = _plain_attention(q[:4], k[:4], v[:4], 0.3, lambda i, j: j <= i)
    want1 = _plain_attention(q[4:], k[4:], v[4:], 0.3, lambda i, j: j <= i + 3)
    torch.testing.assert_close(got.double(), torch.cat([want0, want1]), rtol=1e-5, atol=1e-5)


def test_prefill_chunk_equals_tail_of_full_causal_attention() -> None:
    q, k, v = torch.randn(10, 2, 8), torch.randn(10, 2, 8), torch.randn(10, 2, 8)
    full = attention.prefill_attention(q, k, v, [10], [10], 0.25)
    chunk = attention.prefill_attention(q[6:], k, v, [4], [10], 0.25)
    torch.testing.assert_close(chunk, full[6:])


def test_prefill_rejects_more_queries_than_keys() -> None:
    with pytest.raises(ValueError, match="q_len <= kv_len"):
        attention.prefill_attention(
            torch.zeros(3, 1, 4), torch.zeros(2, 1, 4), torch.zeros(2, 1, 4), [3], [2], 1.0
        )


def test_paged_decode_reads_the_cache_through_the_block_table() -> None:
    block, lens, nkv = 4, [6, 1, 9], 2
    contexts = [(torch.randn(n, nkv, 8), torch.randn(n, nkv, 8)) for n in lens]
    table = torch.tensor([[7, 2, 0], [5, 0, 0], [1, 3, 6]], dtype=torch.int32)
    k_cache, v_cache = torch.zeros(8, block, nkv, 8), torch.zeros(8, block, nkv, 8)
    for b, (kc, vc) in enumerate(contexts):
        for pos in range(lens[b]):
            blk = int(table[b, pos // block])
            k_cache[blk, pos % block], v_cache[blk, pos % block] = kc[pos], vc[pos]
    query = torch.randn(3, 4, 8)
    got = attention.paged_decode_attention(
        query, k_cache, v_cache, table, torch.tensor(lens, dtype=torch.int32), 0.5
    )
    for b, (kc, vc) in enumerate(contexts):
        want = _plain_attention(query[b : b + 1], kc, vc, 0.5, lambda i, j: True)
        torch.testing.assert_close(got[b : b + 1].double(), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    ("table", "lens", "message"),
    [
        (torch.zeros(2, 2, dtype=torch.int64), [1, 1], "int32"),
        (torch.zeros(1, 2, dtype=torch.int32), [1, 1], "batch is 2"),
        (torch.zeros(2, 1, dtype=torch.int32), [5, 1], "needs 2 blocks"),
    ],
)
def test_paged_decode_rejects_bad_tables(
    table: torch.Tensor, lens: list[int], message: str
) -> None:
    cache = torch.zeros(4, 4, 1, 8)
    with pytest.raises(ValueError, match=message):
        attention.paged_decode_attention(
            torch.zeros(2, 1, 8), cache, cache, table, torch.tensor(lens, dtype=torch.int32), 1.0
        )


def _plain_grouped_topk(
    logits: torch.Tensor, bias: torch.Tensor, k: int, groups: int, kept: int, factor: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """DeepSeek-V3 routing for one token at a time, in Python floats."""
    weights, ids = [], []
    for row, b in zip(logits.tolist(), [bias.tolist()] * len(logits)):
        score = [1 / (1 + math.exp(-v)) for v in row]
        choice = [s + bb for s, bb in zip(score, b)]
        size = len(row) // groups
        group_score = [sum(sorted(choice[g * size : (g + 1) * size])[-2:]) for g in range(groups)]
        best = sorted(range(groups), key=lambda g: -group_score[g])[:kept]
        cand = [e for e in range(len(row)) if e // size in best]
        top = sorted(cand, key=lambda e: -choice[e])[:k]
        total = sum(score[e] for e in top)
        ids.append(top)
        weights.append([score[e] / total * factor for e in top])
    return torch.tensor(weights), torch.tensor(ids)


def test_grouped_topk_matches_deepseek_v3_routing() -> None:
    logits, bias = torch.randn(6, 32), torch.randn(32) * 0.1
    w, ids = moe_gating.moe_grouped_topk(logits, bias, 4, 4, 2, 2.5)
    want_w, want_ids = _plain_grouped_topk(logits, bias, 4, 4, 2, 2.5)
    assert ids.dtype == torch.int32 and torch.equal(ids.long(), want_ids)
    torch.testing.assert_close(w, want_w.float())


@pytest.mark.parametrize(
    ("experts", "k", "groups", "kept", "message"),
    [(30, 4, 4, 2, "split into"), (32, 4, 4, 5, "topk_groups"), (32, 20, 4, 2, "top_k")],
)
def test_grouped_topk_rejects_bad_sizes(
    experts: int, k: int, groups: int, kept: int, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        moe_gating.moe_grouped_topk(torch.zeros(1, experts), None, k, groups, kept, 1.0)


@pytest.mark.parametrize("renormalize", [False, True])
def test_topk_softmax_is_top_probabilities(renormalize: bool) -> None:
    logits = torch.randn(5, 8)
    w, ids = moe_gating.moe_topk_softmax(logits, 3, renormalize)
    probs = torch.exp(logits.double()) / torch.exp(logits.double()).sum(-1, keepdim=True)
    want_ids = probs.argsort(dim=-1, descending=True)[:, :3]
    want_w = probs.gather(1, want_ids)
    if renormalize:
        want_w = want_w / want_w.sum(-1, keepdim=True)
    assert torch.equal(ids.long(), want_ids)
    torch.testing.assert_close(w.double(), want_w, rtol=1e-6, atol=1e-6)


def test_dispatch_then_experts_then_combine_equals_direct_mixture() -> None:
    t, k, experts, h = 7, 3, 5, 4
    x = torch.randn(t, h, dtype=torch.float64)
    ids = torch.stack([torch.randperm(experts)[:k] for _ in range(t)]).to(torch.int32)
    w = torch.rand(t, k, dtype=torch.float64)
    rows, row_idx, counts = moe_routing.moe_dispatch(x, ids, experts)
    assert counts.tolist() == [int((ids == e).sum()) for e in range(experts)]
    expert_of_row = torch.repeat_interleave(torch.arange(experts), counts)
    out_rows = rows * (expert_of_row + 1).unsqueeze(-1)  # expert e multiplies by e + 1
    got = moe_routing.moe_combine(out_rows, row_idx, w, ids)
    want = torch.stack(
        [sum(w[i, j] * (int(ids[i, j]) + 1) * x[i] for j in range(k)) for i in range(t)]
    )
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)  # summation order differs
    for i in range(t):  # slot-major source row j * T + i holds token i
        for j in range(k):
            assert torch.equal(rows[int(row_idx[j * t + i])], x[i])


def test_expert_parallel_splits_sum_contiguous_experts_per_rank() -> None:
    counts = torch.tensor([3, 0, 2, 5, 1, 1, 0, 4])
    assert moe_routing.expert_parallel_splits(counts, 4) == [3, 7, 2, 4]
    assert moe_routing.expert_parallel_splits(counts, 1) == [16]
    with pytest.raises(ValueError, match="split evenly"):
        moe_routing.expert_parallel_splits(counts, 3)


def test_dynamic_quant_is_symmetric_per_token_int8() -> None:
    x = torch.randn(4, 32, dtype=torch.bfloat16)
    x[2] = 0
    y, scale = quant.dynamic_quant(x)
    assert y.dtype == torch.int8 and scale.dtype == torch.float32 and scale.shape == (4,)
    rowmax = x.float().abs().amax(-1)
    torch.testing.assert_close(scale, rowmax / 127)
    assert y[[0, 1, 3]].abs().amax(-1).tolist() == [127, 127, 127] and not y[2].any()
    err = (y.float() * scale[:, None] - x.float()).abs()
    assert bool((err <= scale[:, None] / 2 + 1e-6).all())


def test_int8_matmul_is_exact_on_both_paths(monkeypatch: pytest.MonkeyPatch) -> None:
    a = torch.randint(-128, 128, (5, 40), dtype=torch.int8)
    b = torch.randint(-128, 128, (40, 3), dtype=torch.int8)
    want = torch.tensor(
        [[sum(int(a[i, p]) * int(b[p, j]) for p in range(40)) for j in range(3)] for i in range(5)],
        dtype=torch.int32,
    )
    assert torch.equal(quant.int8_matmul(a, b), want)
    monkeypatch.setattr(quant, "_int_mm_allowed", lambda a, b: False)
    assert torch.equal(quant.int8_matmul(a, b), want)


@pytest.mark.parametrize("bias_dtype", [None, torch.int32, torch.float32])
def test_quant_matmul_dequantises_per_channel_and_token(bias_dtype: torch.dtype | None) -> None:
    x = torch.randint(-128, 128, (6, 16), dtype=torch.int8)
    wt = torch.randint(-128, 128, (16, 8), dtype=torch.int8)
    ws, ps = torch.rand(8) * 1e-2, torch.rand(6) * 1e-2
    bias = None if bias_dtype is None else (torch.randn(8) * 50).to(bias_dtype)
    got = quant.quant_matmul(x, wt, ws, ps, torch.bfloat16, bias)
    acc = x.double() @ wt.double()
    if bias_dtype == torch.int32:
        acc = acc + bias.double()
    want = acc * ws.double() * ps.double()[:, None]
    if bias_dtype == torch.float32:
        want = want + bias.double()
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got.double(), want, rtol=1e-2, atol=1e-2)


def test_quant_matmul_rejects_float_inputs() -> None:
    with pytest.raises(ValueError, match="int8"):
        quant.quant_matmul(
            torch.zeros(2, 2), torch.zeros(2, 2), torch.ones(2), torch.ones(2), torch.bfloat16
        )


def test_grouped_lora_adds_each_rows_own_adapters_update() -> None:
    x, y = torch.randn(10, 12, dtype=torch.float64), torch.randn(10, 6, dtype=torch.float64)
    ranks = {4: 2, 7: 5}  # adapter id -> rank
    a = {i: torch.randn(r, 12, dtype=torch.float64) for i, r in ranks.items()}
    b = {i: torch.randn(6, r, dtype=torch.float64) for i, r in ranks.items()}
    row_ids = torch.tensor([0, 4, 4, 4, 0, 0, 7, 7, 7, 0])  # rows 0, 4, 5, 9: the base model
    col_ids = torch.tensor([i for i, r in ranks.items() for _ in range(r)])
    want = y.clone()
    for row, i in enumerate(row_ids.tolist()):
        if i:
            want[row] += b[i] @ (a[i] @ x[row])
    stacked_a, b_t = torch.cat([a[4], a[7]]), torch.cat([b[4], b[7]], dim=1).t()
    spans = torch.tensor([[0, 6]] * len(col_ids))
    got = lora.grouped_lora(y, x, stacked_a, b_t, row_ids, col_ids, spans)
    torch.testing.assert_close(got, want)
    fp32 = lora.grouped_lora(
        y.bfloat16(), x.bfloat16(), stacked_a.float(), b_t.float(), row_ids, col_ids, spans
    )
    assert fp32.dtype == torch.bfloat16  # computed in the adapters' dtype, returned in y's
    torch.testing.assert_close(fp32, want.bfloat16(), atol=0.1, rtol=0.05)
    assert not torch.equal(got, y), "y itself is left as it was"
