"""DeepSeek-V4 attention over the hybrid paged cache, in place of transformers'
`DeepseekV4Attention` (`engine.fused_layers.use_fused_layers`).

The projections, norms, rotary modules, compressors and the indexer's projections are the
checkpoint's own transformers modules, taken over as they are; what touches KV is ours (compare
`DeepseekV4Attention.forward`, `DeepseekV4CSACompressor`, `DeepseekV4HCACompressor` and
`DeepseekV4Indexer` in transformers' `modeling_deepseek_v4.py`):

1. query: `q_b_norm(q_b_proj(q_a_norm(q_a_proj(x))))`, RoPE on its trailing rope slice; the one
   K=V vector: `kv_norm(kv_proj(x))`, RoPE; written to the sliding-window cache;
2. compressed layers: the compressor's `kv_proj`/`gate_proj` outputs are written per token to the
   compressor state; every window whose last token is in the step is pooled (op
   `kv_compress`), normed, rotated at its first token's position with the compress rotary
   (YaRN on V4-Flash) and written to the compressed cache; ratio-4 layers do the same for the
   indexer's keys;
3. keys per query: the raw window (the last `sliding_window` positions, itself included), plus
   every visible entry (ratio 128, "HCA") or the indexer's top `index_topk` visible entries
   (ratio 4, "CSA"; op `lightning_indexer`);
4. op `sparse_shared_kv_attention` with the per-head sinks, then the inverse RoPE of the output's
   rope slice at the query's position, the grouped `o_a_proj` and `o_b_proj`.
"""

from __future__ import annotations

import torch
from torch import nn
from transformers.models.deepseek_v4.modeling_deepseek_v4 import apply_rotary_pos_emb

from engine.deepseek_v4.cache import CSA, SLIDING, V4LayerCache
from engine.deepseek_v4.step_indices import HybridStep, RatioIndices
from engine.forward_context import current_forward_context
from npu_ops.ops import active_ops
from npu_ops.ops.registry import OpTable

V4_ATTENTIONS = frozenset({"DeepseekV4Attention"})
"""transformers attention classes of DeepSeek-V4."""


class V4Attention(nn.Module):
    """DeepSeek-V4 attention through ops `kv_compress`, `lightning_indexer` and
    `sparse_shared_kv_attention` over the hybrid cache (`engine.deepseek_v4.cache`).

    Args:
        attn: a transformers `DeepseekV4Attention` with loaded weights, after any
            tensor-parallel sharding (`engine.parallel.sharding`): the head count comes from its
            `q_b_proj`, the output groups from its `o_a_proj`.
    """

    def __init__(self, attn: nn.Module) -> None:
        super().__init__()
        self.layer_idx = int(attn.layer_idx)
        self.layer_type = str(attn.layer_type)
        self.rope_layer_type = str(attn.rope_layer_type)
        self.head_dim = int(attn.head_dim)
        # this rank's heads and output groups (all of them without tensor parallel)
        self.num_heads = int(attn.q_b_proj.out_features) // self.head_dim
        self.o_groups = int(attn.o_a_proj.n_groups)
        self.scaling = float(attn.scaling)
        self.sliding_window = int(attn.sliding_window)
        for name in ("q_a_proj", "q_a_norm", "q_b_proj", "q_b_norm", "kv_proj", "kv_norm"):
            setattr(self, name, getattr(attn, name))
        self.o_a_proj = attn.o_a_proj
        self.o_b_proj = attn.o_b_proj
        self.sinks = attn.sinks
        self.compressor = attn.compressor
        self.ratio = 0 if self.compressor is None else int(self.compressor.compress_rate)
        self._ops = active_ops()

    def forward(
        self,
        hidden_states: torch.Tensor,
        position_embeddings: dict[str, tuple[torch.Tensor, torch.Tensor]],
        position_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        **kwargs: object,
    ) -> tuple[torch.Tensor, None]:
        """`[1, T, hidden]` -> (`[1, T, hidden]`, None), the transformers module's contract.

        Args:
            hidden_states: the flattened step's tokens (batch dimension 1).
            position_embeddings: the model's `{"main", "compress"}` rotary outputs for the
                step's positions, each `(cos, sin)` of `[1, T, rope / 2]`.
            position_ids: `[1, T]`.
            attention_mask: ignored; keys come from the step's `HybridStep`.
        """
        ctx = current_forward_context()
        assert ctx is not None and ctx.hybrid is not None, "V4Attention outside a hybrid step"
        step = ctx.hybrid
        cache: V4LayerCache = ctx.attention.kv_caches[self.layer_idx]  # type: ignore[assignment]
        tokens = hidden_states.shape[1]
        cos, sin = position_embeddings[self.rope_layer_type]
        q_residual = self.q_a_norm(self.q_a_proj(hidden_states))
        q = self.q_b_proj(q_residual).view(1, tokens, -1, self.head_dim).transpose(1, 2)
        q = apply_rotary_pos_emb(self.q_b_norm(q), cos, sin)  # [1, H, T, D]
        kv = self.kv_norm(self.kv_proj(hidden_states)).view(1, tokens, 1, self.head_dim)
        kv = apply_rotary_pos_emb(kv.transpose(1, 2), cos, sin)[0, 0]  # [T, D]
        cache.swa[step.write_slots()] = kv.to(cache.swa.dtype)
        compressed_slots = None
        if self.layer_type != SLIDING:
            compressed_slots = self._compressed_keys(
                step, cache, hidden_states, q_residual, position_ids
            )
        out = self._ops.sparse_shared_kv_attention(
            q[0].transpose(0, 1),
            cache.swa,
            step.window(self.sliding_window),
            cache.compressed,
            compressed_slots,
            self.sinks,
            self.scaling,
        )  # [T, H, D]
        out = apply_rotary_pos_emb(out[None].transpose(1, 2), cos, -sin).transpose(1, 2)
        grouped = self.o_a_proj(out.reshape(1, tokens, self.o_groups, -1)).flatten(2)
        return self.o_b_proj(grouped), None

    def _compressed_keys(
        self,
        step: HybridStep,
        cache: V4LayerCache,
        hidden_states: torch.Tensor,
        q_residual: torch.Tensor,
        position_ids: torch.Tensor,
    ) -> torch.Tensor:
        """Write the step's compressor state and closed windows' entries; return each query's
        compressed keys `[T, K]` (slots, `-1` = none)."""
        comp = self.compressor
        csa = self.layer_type == CSA
        idx = step.ratio(self.ratio, overlap=csa)
        state = (cache.state_kv, cache.state_gate, cache.compressed)
        _compress(self._ops, comp, step, idx, hidden_states, *state, csa)
        if not csa:
            return idx.visible
        indexer = comp.indexer
        _compress(
            self._ops,
            indexer,
            step,
            idx,
            hidden_states,
            cache.indexer_state_kv,
            cache.indexer_state_gate,
            cache.indexer_keys,
            True,
        )
        tokens = hidden_states.shape[1]
        cos, sin = indexer.rotary_emb(
            hidden_states, position_ids=position_ids, layer_type=indexer.rope_layer_type
        )
        q = indexer.q_b_proj(q_residual).view(1, tokens, -1, indexer.head_dim).transpose(1, 2)
        q = apply_rotary_pos_emb(q, cos, sin)[0].transpose(0, 1)  # [T, Hi, Di]
        scorer = indexer.scorer
        weights = scorer.weights_proj(hidden_states)[0].float() * scorer.weights_scaling
        return self._ops.lightning_indexer(
            q, weights, cache.indexer_keys, idx.visible, indexer.index_topk, scorer.softmax_scale
        )


def _compress(
    ops: OpTable,
    module: nn.Module,
    step: HybridStep,
    idx: RatioIndices,
    hidden_states: torch.Tensor,
    state_kv: torch.Tensor | None,
    state_gate: torch.Tensor | None,
    entries: torch.Tensor | None,
    overlap: bool,
) -> None:
    """Write a compressor's (or the indexer's) per-token state, then pool, norm, rotate and
    write the entries of the windows closed this step."""
    assert state_kv is not None and state_gate is not None and entries is not None
    write = step.write_slots()
    state_kv[write] = module.kv_proj(hidden_states)[0].to(state_kv.dtype)
    state_gate[write] = module.gate_proj(hidden_states)[0].to(state_gate.dtype)
    if not idx.entry_slots.numel():
        return
    pooled = ops.kv_compress(state_kv, state_gate, idx.window_slots, module.position_bias, overlap)
    pooled = module.kv_norm(pooled)
    positions = idx.entry_positions[None]
    cos, sin = module.rotary_emb(pooled, position_ids=positions, layer_type=module.rope_layer_type)
    pooled = apply_rotary_pos_emb(pooled[None, None], cos, sin)[0, 0]
    entries[idx.entry_slots] = pooled.to(entries.dtype)
