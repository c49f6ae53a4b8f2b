"""DeepSeek-V4's attention ops: the references against plain loops (float64), and the `npu`
implementations against the recording torch_npu stand-in at the kernels' (V4-Flash) sizes."""

from __future__ import annotations

import math
import types
from dataclasses import replace

import pytest
import torch
from fake_torch_npu_util import calls_to
from op_helpers import small_shapes

from npu_ops.ops import REGISTRY, sparse_attention
from npu_ops.ops.npu import sparse_attention as npu_sparse
from operate.ops_check.preflight import compare, run_preflight
from operate.ops_check.samples import build_case
from operate.ops_check.shapes import OpShapes

# V4-Flash's attention and indexer (64 heads of 512, indexer 64 x 128) at block size 128, with
# contexts long enough that the indexer must choose 64 of up to 250 entries
V4_FLASH = OpShapes(
    dtype=torch.bfloat16, block_size=128, decode_lens=(5, 300, 17, 1000), v4_index_topk=64
)
V4_OPS = ("kv_compress", "lightning_indexer", "sparse_shared_kv_attention")

torch.manual_seed(0)


# -- references ---------------------------------------------------------------------------------


def _plain_pool(kv: list[torch.Tensor], gate: list[torch.Tensor]) -> torch.Tensor:
    """sum_j softmax_j(gate_j) * kv_j per channel, over the present tokens only."""
    g, v = torch.stack(gate).double(), torch.stack(kv).double()
    w = torch.exp(g - g.max(dim=0).values)
    return (w * v).sum(dim=0) / w.sum(dim=0)


@pytest.mark.parametrize("overlap", [False, True])
def test_kv_compress_is_a_gated_softmax_pool_of_each_windows_tokens(overlap: bool) -> None:
    ratio, d = 4, 6
    c = 2 * d if overlap else d
    state_kv, state_gate = torch.randn(40, c), torch.randn(40, c)
    bias = torch.randn(ratio, c)
    width = 2 * ratio if overlap else ratio
    windows = torch.randint(0, 40, (5, width))
    windows[0, :3] = -1  # the first window of a sequence: its tokens before 0 are absent
    got = sparse_attention.kv_compress(state_kv, state_gate, windows, bias, overlap)
    assert got.shape == (5, d)
    for e in range(5):
        kv, gate = [], []
        for i, slot in enumerate(windows[e].tolist()):
            if slot < 0:
                continue
            if not overlap:
                kv.append(state_kv[slot])
                gate.append(state_gate[slot] + bias[i])
            elif i < ratio:  # the previous window's tokens: first half (Ca) of the channels
                kv.append(state_kv[slot, :d])
                gate.append(state_gate[slot, :d] + bias[i, :d])
            else:  # this window's tokens: second half (Cb)
                kv.append(state_kv[slot, d:])
                gate.append(state_gate[slot, d:] + bias[i - ratio, d:])
        # overlapping: channel c pools Ca_c of the previous window's tokens with Cb_c of this one's
        torch.testing.assert_close(got[e].double(), _plain_pool(kv, gate))


def test_lightning_indexer_keeps_the_best_weighted_relu_scores() -> None:
    g = torch.Generator().manual_seed(1)
    t, h, d, n = 4, 3, 8, 9
    query, weights = torch.randn(t, h, d, generator=g), torch.randn(t, h, generator=g)
    cache = torch.randn(40, d, generator=g)
    slots = torch.randperm(40, generator=g)[: t * n].view(t, n)
    slots[1, 5:] = -1  # five visible entries
    slots[2, 2:] = -1  # fewer visible than kept
    got = sparse_attention.lightning_indexer(query, weights, cache, slots, 4, d**-0.5)
    assert got.shape == (4, 4)
    for i in range(t):
        score = {
            slot: d**-0.5
            * sum(
                float(weights[i, k]) * max(float(query[i, k].double() @ cache[slot].double()), 0)
                for k in range(h)
            )
            for slot in slots[i].tolist()
            if slot >= 0
        }
        best = sorted(score.values(), reverse=True)[:4]  # scores, as entries may tie (at 0)
        kept = [slot for slot in got[i].tolist() if slot >= 0]
        assert got[i].tolist() == kept + [-1] * (4 - len(best)) and len(set(kept)) == len(kept)
        assert [score[slot] for slot in kept] == pytest.approx(best, rel=1e-5, abs=1e-6)


def _plain_sink_attention(
    q: torch.Tensor, keys: list[torch.Tensor], sink: float, scale: float
) -> torch.Tensor:
    """One query head: softmax over `[q.k * scale for k] + [sink]`, the sink's share dropped."""
    logits = [float(q.double() @ k.double()) * scale for k in keys] + [sink]
    top = max(logits)
    w = [math.exp(v - top) for v in logits]
    out = torch.zeros(q.shape[0], dtype=torch.float64)
    for wi, k in zip(w, keys):
        out += wi * k.double()
    return out / sum(w)


@pytest.mark.parametrize("compressed", [True, False])
def test_sparse_shared_kv_attention_is_softmax_with_sinks_over_each_querys_keys(
    compressed: bool,
) -> None:
    t, h, d = 5, 3, 8
    query = torch.randn(t, h, d)
    window_cache, comp_cache = torch.randn(20, d), torch.randn(12, d)
    window = torch.randint(0, 20, (t, 4))
    window[0, :3] = -1  # the first token: one key of its own
    comp = torch.randint(0, 12, (t, 3))
    comp[1] = -1  # no compressed keys
    sinks = torch.randn(h) * 2
    got = sparse_attention.sparse_shared_kv_attention(
        query,
        window_cache,
        window,
        comp_cache if compressed else None,
        comp if compressed else None,
        sinks,
        0.4,
    )
    for i in range(t):
        keys = [window_cache[s] for s in window[i].tolist() if s >= 0]
        if compressed:
            keys += [comp_cache[s] for s in comp[i].tolist() if s >= 0]
        for k in range(h):
            want = _plain_sink_attention(query[i, k], keys, float(sinks[k]), 0.4)
            torch.testing.assert_close(got[i, k].double(), want, rtol=1e-5, atol=1e-5)


def test_a_query_without_keys_gets_zero() -> None:
    out = sparse_attention.sparse_shared_kv_attention(
        torch.randn(2, 2, 4),
        torch.randn(6, 4),
        torch.full((2, 3), -1),
        None,
        None,
        torch.zeros(2),
        0.5,
    )
    assert torch.equal(out, torch.zeros(2, 2, 4))


# -- npu: the kernels at V4-Flash's sizes ------------------------------------------------------


def test_npu_indexer_calls_the_kernel_per_query_over_the_paged_entries(
    fake_torch_npu_module: types.ModuleType,
) -> None:
    case = build_case("lightning_indexer", V4_FLASH).args
    got = npu_sparse.lightning_indexer(*case)
    want = sparse_attention.lightning_indexer(*case)
    ok, _, reason = compare("lightning_indexer", got, want)
    assert ok, reason
    assert torch.equal(got, want)  # the kernel's order (best first) is the reference's here
    (call,) = calls_to("npu_lightning_indexer")
    assert call["layout_query"] == "BSND" and call["layout_key"] == "PA_BSND"
    assert call["sparse_mode"] == 0 and call["sparse_count"] == 64
    tokens = case[3].shape[0]
    assert call["query"] == ((tokens, 1, 64, 128), torch.bfloat16)
    assert call["weights"] == ((tokens, 1, 64), torch.float32)
    # block size 128 holds 32 ratio-4 entries: the indexer cache read as pages of 32
    assert call["key"][0] == (case[2].shape[0] // 32, 32, 1, 128)
    assert call["block_table"] == ((tokens, 8), torch.int32)  # 250 entries: 8 pages
    assert call["actual_seq_lengths_key"] == ((tokens,), torch.int32)


def test_npu_indexer_returns_minus_one_past_the_visible_entries(
    fake_torch_npu_module: types.ModuleType,
) -> None:
    case = build_case("lightning_indexer", replace(V4_FLASH, v4_index_topk=2048)).args
    got = npu_sparse.lightning_indexer(*case)
    assert got.shape == case[3].shape  # keep = min(top_k, visible width)
    assert torch.equal(got.sort(dim=1).values, case[3].sort(dim=1).values)  # all of them
    assert len(calls_to("npu_lightning_indexer")) == 1


@pytest.mark.parametrize(
    "change",
    [
        {"v4_index_heads": 128},
        {"v4_index_head_dim": 64},
        {"dtype": torch.float32},
        {"v4_index_topk": 4096},
        {"block_size": 32},  # 8 entries a block: no page of 16 or more
    ],
    ids=["128-heads", "head-dim-64", "float32", "top-4096", "8-entries-a-block"],
)
def test_npu_indexer_outside_the_kernels_constraints_runs_the_reference(
    fake_torch_npu_module: types.ModuleType, change: dict
) -> None:
    shapes = replace(V4_FLASH, **change)
    if "v4_index_topk" in change:
        shapes = replace(shapes, decode_lens=(5, 17, 20000))
    case = build_case("lightning_indexer", shapes).args
    got = npu_sparse.lightning_indexer(*case)
    assert torch.equal(got, sparse_attention.lightning_indexer(*case))
    assert calls_to("npu_lightning_indexer") == []


def test_npu_indexer_with_slots_that_are_not_pages_runs_the_reference(
    fake_torch_npu_module: types.ModuleType,
) -> None:
    query, weights, cache, slots, top_k, scale = build_case("lightning_indexer", V4_FLASH).args
    shuffled = slots.gather(1, torch.randperm(slots.shape[1]).expand_as(slots))
    got = npu_sparse.lightning_indexer(query, weights, cache, shuffled, top_k, scale)
    want = sparse_attention.lightning_indexer(query, weights, cache, shuffled, top_k, scale)
    assert torch.equal(got, want) and calls_to("npu_lightning_indexer") == []


def test_page_size_is_the_largest_aligned_page_of_every_row() -> None:
    # entries j of a row at block * 32 + j % 32 (blocks 1 and 5): pages of 32 (and 16), not 64
    rows = torch.tensor([[32 + j for j in range(32)] + [32 * 5 + j for j in range(8)]])
    assert npu_sparse.page_size(rows, 32 * 8) == 32
    assert npu_sparse.page_size(rows[:, :16], 32 * 8) == 32
    assert npu_sparse.page_size(rows[:, :16] + 32, 32 * 8) == 64  # a page read in part
    assert npu_sparse.page_size(rows + 16, 32 * 8) == 16  # blocks not 32-aligned
    padded = torch.cat((rows, torch.full((1, 3), -1)), dim=1)
    assert npu_sparse.page_size(padded, 32 * 8) == 32
    gap = padded.clone()
    gap[0, 3] = -1  # a hole before the last visible entry: not a prefix
    assert npu_sparse.page_size(gap, 32 * 8) is None
    assert npu_sparse.page_size(rows, 32 * 8 + 8) is None  # no page size divides the cache


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_npu_attention_calls_the_kernel_with_sinks_in_the_rope_slices(
    fake_torch_npu_module: types.ModuleType, dtype: torch.dtype
) -> None:
    case = build_case("sparse_shared_kv_attention", replace(V4_FLASH, dtype=dtype)).args
    got = npu_sparse.sparse_shared_kv_attention(*case)
    ok, err, reason = compare(
        "sparse_shared_kv_attention", got, sparse_attention.sparse_shared_kv_attention(*case)
    )
    assert ok, f"{reason} (max abs err {err})"
    (call,) = calls_to("npu_sparse_flash_attention")
    tokens, window, chosen = case[0].shape[0], case[2].shape[1], case[4].shape[1]
    keys = window + chosen + 1  # the window, the chosen entries and the sink
    assert call["query"] == ((tokens, 1, 64, 512), dtype)
    assert call["key"][0] == (tokens, keys, 1, 512) and call["same_key_value"]
    assert call["query_rope"][0] == (tokens, 1, 64, 64)
    assert call["key_rope"][0] == (tokens, keys, 1, 64)
    assert call["sparse_indices"] == ((tokens, 1, 1, keys), torch.int32)
    assert call["layout_query"] == call["layout_kv"] == "BSND"
    assert (call["attention_mode"], call["sparse_mode"], call["sparse_block_size"]) == (2, 0, 1)
    assert call["scale_value"] == case[6] and call["block_table"] is None


def test_npu_attention_sinks_match_the_reference_when_they_dominate(
    fake_torch_npu_module: types.ModuleType,
) -> None:
    args = list(build_case("sparse_shared_kv_attention", V4_FLASH).args)
    args[5] = torch.linspace(-8.0, 8.0, 64)  # from no effect to nearly all the mass
    args[2] = args[2].clone()
    args[2][0] = -1  # the first query: no window keys either
    args[4] = args[4].clone()
    args[4][0] = -1
    got = npu_sparse.sparse_shared_kv_attention(*args)
    want = sparse_attention.sparse_shared_kv_attention(*args)
    ok, err, reason = compare("sparse_shared_kv_attention", got, want)
    assert ok, f"{reason} (max abs err {err})"
    assert torch.equal(got[0], torch.zeros_like(got[0]))  # only the sink: no value
    assert got[1:, -1].abs().max() < got[1:, 0].abs().max()  # sink 8 takes most of the mass


def test_npu_attention_of_a_sliding_layer_has_no_compressed_keys(
    fake_torch_npu_module: types.ModuleType,
) -> None:
    query, window_cache, window, _, _, sinks, scale = build_case(
        "sparse_shared_kv_attention", V4_FLASH
    ).args
    got = npu_sparse.sparse_shared_kv_attention(
        query, window_cache, window, None, None, sinks, scale
    )
    want = sparse_attention.sparse_shared_kv_attention(
        query, window_cache, window, None, None, sinks, scale
    )
    assert compare("sparse_shared_kv_attention", got, want)[0]
    (call,) = calls_to("npu_sparse_flash_attention")
    assert call["key"][0][1] == window.shape[1] + 1


def test_npu_attention_chunks_long_steps(
    fake_torch_npu_module: types.ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sparse_attention, "QUERY_CHUNK", 5)
    case = build_case("sparse_shared_kv_attention", V4_FLASH).args  # 12 queries
    got = npu_sparse.sparse_shared_kv_attention(*case)
    assert compare(
        "sparse_shared_kv_attention", got, sparse_attention.sparse_shared_kv_attention(*case)
    )[0]
    assert [c["query"][0][0] for c in calls_to("npu_sparse_flash_attention")] == [5, 5, 2]


@pytest.mark.parametrize(
    "change",
    [{"v4_head_dim": 256}, {"v4_heads": 48}, {"dtype": torch.float32}],
    ids=["head-dim-256", "48-heads", "float32"],
)
def test_npu_attention_outside_the_kernels_constraints_runs_the_reference(
    fake_torch_npu_module: types.ModuleType, change: dict
) -> None:
    case = build_case("sparse_shared_kv_attention", replace(V4_FLASH, **change)).args
    got = npu_sparse.sparse_shared_kv_attention(*case)
    assert torch.equal(got, sparse_attention.sparse_shared_kv_attention(*case))
    assert calls_to("npu_sparse_flash_attention") == []


def test_npu_compressor_is_the_reference_without_a_kernel(
    fake_torch_npu_module: types.ModuleType,
) -> None:
    case = build_case("kv_compress", V4_FLASH).args
    got = npu_sparse.kv_compress(*case)
    assert torch.equal(got, sparse_attention.kv_compress(*case))
    assert calls_to("npu_lightning_indexer") == calls_to("npu_sparse_flash_attention") == []


def test_preflight_at_v4_flash_sizes_passes_on_a_stand_in_npu(
    fake_torch_npu_module: types.ModuleType,
) -> None:
    targets = [(REGISTRY.get(op), [REGISTRY.get(op).implementation("npu")]) for op in V4_OPS]
    results = run_preflight(targets, V4_FLASH, torch.device("cpu"))
    assert [(r.op, r.ok) for r in results] == [(op, True) for op in V4_OPS]
    assert len(calls_to("npu_lightning_indexer")) == 1
    assert len(calls_to("npu_sparse_flash_attention")) == 1


def test_small_shapes_cover_windows_before_the_sequence_and_a_choosing_indexer() -> None:
    s = small_shapes(torch.float32)
    _, _, windows, _, _ = build_case("kv_compress", s).args
    assert bool((windows < 0).any()) and bool((windows >= 0).any())
    _, _, _, visible, top_k, _ = build_case("lightning_indexer", s).args
    assert visible.shape[1] > top_k and bool((visible < 0).any())
    _, _, window, _, chosen, _, _ = build_case("sparse_shared_kv_attention", s).args
    assert bool((window < 0).any()) and chosen.shape[1] == top_k


def test_shapes_follow_a_deepseek_v4_config() -> None:
    from fixtures.tiny_checkpoints import tiny_config

    config = tiny_config("deepseek_v4")
    s = OpShapes.for_model(
        torch.bfloat16,
        num_kv_heads=1,
        k_head_dim=16,
        v_head_dim=16,
        block_size=16,
        hf_config=config,
    )
    assert (s.v4_heads, s.v4_head_dim, s.v4_sliding_window) == (4, 16, 8)
    assert (s.v4_index_heads, s.v4_index_head_dim, s.v4_index_topk) == (8, 16, 2)
    assert s.v4_compress_ratio == 4  # the ratio-4 layers: overlapping windows and the indexer
    query, *_ = build_case("sparse_shared_kv_attention", s).args
    assert query.shape[1:] == (4, 16)
