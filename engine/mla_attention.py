"""DeepSeek-V2/V3 multi-head latent attention over the paged latent cache, in absorbed form.

`MLAAttention` replaces transformers' `DeepseekV2Attention` / `DeepseekV3Attention`
(`engine.fused_layers.use_fused_layers`). transformers expands the latent into per-head K and V
before attention; we cache the latent itself (`engine.kv_cache`: `c_kv` and `k_pe` per token
and layer) and never expand it (DeepSeek-V2 paper, arXiv 2405.04434, section 2.1.2; vLLM's MLA
back-end, `vllm/v1/attention/backends/mla/common.py`, for the split into weights):

1. op `mla_prolog` projects every token of the step: the absorbed query `q_nope W_UK`
   (`[T, N, kv_lora_rank]`, `W_UK` = the `k_nope` rows of each head's `kv_b_proj`), the
   rotated `q_pe`, and writes `c_kv` (after `kv_a_layernorm`) and the rotated `k_pe` at the
   tokens' cache slots;
2. decode tokens: op `mla_decode_attention` over each sequence's cached latent, scores
   `(q_latent . c_kv + q_pe . k_pe) * softmax_scale`; prefill chunks: the same attention as one
   padded SDPA batch over their gathered latent context (one 576-wide K head, `c_kv` as V,
   causal masks from `engine.attention_metadata.AttentionMetadata`), cached prefix blocks included;
3. the latent outputs go through each head's `W_UV` (the `v` rows of `kv_b_proj`), then
   `o_proj`.

`softmax_scale` is the HF module's `scaling`: `(qk_nope_head_dim + qk_rope_head_dim) ** -0.5`,
times yarn's `mscale ** 2` where the rotary type is yarn with `mscale_all_dim` (DeepSeek-V2-Lite,
V3). RoPE uses the model's own rotary module's cos/sin (yarn's attention factor included) on
DeepSeek's interleaved pairs (`npu_ops.ops.mla.mla_rope`). Prefill attends in the latent space
too, rather than expanding K and V through `kv_b_proj` as vLLM does: the fused prolog returns
the absorbed query only, so one prolog serves a mixed step's decode and prefill rows and a
cached prefix is never re-expanded; it costs `(2 * kv_lora_rank + rope) / (nope + rope + v)`
(3.4x on DeepSeek-V2-Lite) the attention FLOPs of the expanded form.

Tensor parallel: `kv_b_proj` and the query projections are split by heads before this module is
built (`engine.parallel.sharding`), so each rank absorbs its heads' `W_UK`/`W_UV` slices; the
latent projection is replicated and every rank writes the whole latent cache of its layers.
The projections are taken over as parameters in `x @ W` layout (the kernel's), so int4
quantisation and LoRA adapters apply to `o_proj` only here.

With `engine.kv_cache_dtype` int8 / fp8_e4m3 the latent cache is 8-bit (`c_kv` and `k_pe` each
with one float16 scale per token, `npu_ops.ops.kv_quant`): the prolog quantises what it writes,
decode and prefill dequantise what they read.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from engine.attention import gather_context
from engine.attention_metadata import AttentionMetadata
from engine.forward_context import current_forward_context
from npu_ops.ops import active_ops

MLA_ATTENTIONS = frozenset({"DeepseekV2Attention", "DeepseekV3Attention"})
"""transformers attention classes of DeepSeek MLA."""


def _weight(layer: nn.Module, name: str) -> torch.Tensor:
    """The `[out, in]` weight of a plain linear layer.

    Raises:
        ValueError: the layer is not a bias-free float `nn.Linear` (e.g. a W8A8 layer).
    """
    if type(layer) is not nn.Linear or layer.bias is not None:
        raise ValueError(
            f"DeepSeek MLA takes float, bias-free projections; {name} is a "
            f"{type(layer).__name__}{' with a bias' if type(layer) is nn.Linear else ''} "
            "(W8A8 DeepSeek checkpoints and attention biases are not supported)"
        )
    return layer.weight.detach()


def _x_at_w(layer: nn.Module, name: str) -> nn.Parameter:
    """`layer`'s weight transposed to `[in, out]` (contiguous), the kernel's layout."""
    return nn.Parameter(_weight(layer, name).t().contiguous(), requires_grad=False)


def _eps(norm: nn.Module) -> float:
    return float(getattr(norm, "variance_epsilon", getattr(norm, "eps", 1e-6)))


class MLAAttention(nn.Module):
    """MLA through ops `mla_prolog` and `mla_decode_attention` over the latent cache.

    Args:
        attn: an HF attention module of `MLA_ATTENTIONS` with loaded weights (after any
            tensor-parallel sharding: the head count comes from its `kv_b_proj`).

    Raises:
        ValueError: a projection is not a bias-free float `nn.Linear`.
    """

    def __init__(self, attn: nn.Module) -> None:
        super().__init__()
        self.layer_idx = int(attn.layer_idx)
        self.scaling = float(attn.scaling)
        self.nope = int(attn.qk_nope_head_dim)
        self.rope = int(attn.qk_rope_head_dim)
        self.latent = int(attn.kv_lora_rank)
        v_head_dim = int(attn.v_head_dim)
        self.heads = int(attn.kv_b_proj.out_features) // (self.nope + v_head_dim)
        self.w_dq: nn.Parameter | None = None  # no query LoRA (DeepSeek-V2-Lite)
        self.gamma_cq: nn.Parameter | None = None
        self.eps_cq = 1e-6
        if attn.q_a_proj is not None:
            self.w_dq = _x_at_w(attn.q_a_proj, "q_a_proj")
            self.gamma_cq = attn.q_a_layernorm.weight
            self.eps_cq = _eps(attn.q_a_layernorm)
        q_up = attn.q_proj if attn.q_a_proj is None else attn.q_b_proj
        self.w_uq_qr = _x_at_w(q_up, "the query projection")
        self.w_dkv_kr = _x_at_w(attn.kv_a_proj_with_mqa, "kv_a_proj_with_mqa")
        self.gamma_ckv = attn.kv_a_layernorm.weight
        self.eps_ckv = _eps(attn.kv_a_layernorm)
        # kv_b_proj rows, per head: nope rows of W_UK, then v_head_dim rows of W_UV
        kv_b = _weight(attn.kv_b_proj, "kv_b_proj")
        per_head = kv_b.view(self.heads, self.nope + v_head_dim, self.latent)
        self.w_uk = nn.Parameter(per_head[:, : self.nope].contiguous(), requires_grad=False)
        self.w_uv = nn.Parameter(per_head[:, self.nope :].contiguous(), requires_grad=False)
        self.o_proj = attn.o_proj
        # DeepSeek-V2 rotates complex pairs, V3 the same pairs unless rope_interleave is off
        self.rope_interleaved = bool(getattr(attn.config, "rope_interleave", True))
        self._ops = active_ops()

    def forward(
        self,
        hidden_states: torch.Tensor,
        position_embeddings: torch.Tensor | tuple[torch.Tensor, torch.Tensor],
        attention_mask: torch.Tensor | None = None,
        **kwargs: object,
    ) -> tuple[torch.Tensor, None]:
        """`[1, T, H]` -> (`[1, T, H]`, None), the HF attention module's contract.

        Args:
            hidden_states: the flattened step's tokens (batch dimension 1).
            position_embeddings: the model's rotary output for the step's positions:
                DeepSeek-V2's complex `freqs_cis` `[1, T, rope / 2]`, or DeepSeek-V3's
                `(cos, sin)`, each `[1, T, rope]`.
            attention_mask: ignored; masks come from the step's `AttentionMetadata`.
        """
        ctx = current_forward_context()
        assert ctx is not None, "MLAAttention called outside forward_context"
        meta = ctx.attention
        tokens = hidden_states.shape[1]
        c_cache, pe_cache = meta.kv_caches[self.layer_idx]  # [slots, 1, latent], [slots, 1, rope]
        blocks = c_cache.shape[0] // meta.block_size
        # rows are `latent` / `rope` wide, 2 bytes more in an 8-bit cache (`kv_quant`)
        kv_cache = c_cache.view(blocks, meta.block_size, 1, c_cache.shape[-1])
        kr_cache = pe_cache.view(blocks, meta.block_size, 1, pe_cache.shape[-1])
        cos, sin = _cos_sin(position_embeddings)
        q, q_pe, _, _ = self._ops.mla_prolog(
            hidden_states[0],
            self.w_dq,
            self.w_uq_qr,
            self.w_uk,
            self.w_dkv_kr,
            self.gamma_cq,
            self.gamma_ckv,
            sin.to(hidden_states.dtype),
            cos.to(hidden_states.dtype),
            meta.slot_mapping,
            kv_cache,
            kr_cache,
            self.eps_cq,
            self.eps_ckv,
            self.rope_interleaved,
        )  # [T, N, latent], [T, N, rope]
        out = q.new_empty(tokens, self.heads, self.latent)
        if meta.decode_rows.numel():
            rows = meta.decode_rows
            out[rows] = self._ops.mla_decode_attention(
                q[rows],
                q_pe[rows],
                kv_cache,
                kr_cache,
                meta.decode_block_tables,
                meta.decode_seq_lens,
                self.scaling,
            )
        if meta.prefill_rows.numel():
            rows = meta.prefill_rows
            out[rows] = self._prefill(q[rows], q_pe[rows], c_cache, pe_cache, meta)
        values = torch.bmm(out.transpose(0, 1), self.w_uv.transpose(1, 2))  # [N, T, v_head_dim]
        return self.o_proj(values.transpose(0, 1).reshape(1, tokens, -1)), None

    def _prefill(
        self,
        q: torch.Tensor,
        q_pe: torch.Tensor,
        c_cache: torch.Tensor,
        pe_cache: torch.Tensor,
        meta: AttentionMetadata,
    ) -> torch.Tensor:
        """Prefill chunks, each causal over its own paged latent context, as one SDPA batch.

        Args:
            q: `[P, N, latent]` absorbed queries of the prefill tokens.
            q_pe: `[P, N, rope]`.
            c_cache: `[slots, 1, latent]`; `pe_cache`: `[slots, 1, rope]` (2 more bytes a
                row when 8-bit, dequantised by `gather_context`).

        Returns:
            `[P, N, latent]`, the attention-weighted `c_kv` per head.
        """
        seqs, _, q_max, width = meta.prefill_mask.shape
        query = torch.cat((q, q_pe), dim=-1)
        padded = query.new_zeros(seqs * q_max, self.heads, query.shape[-1])
        padded[meta.prefill_pad_index] = query
        padded = padded.view(seqs, q_max, self.heads, -1).transpose(1, 2)  # [S, N, Q, L + R]
        c_kv = gather_context(c_cache, meta.prefill_block_tables, width, q.dtype)  # [S, 1, W, L]
        k_pe = gather_context(pe_cache, meta.prefill_block_tables, width, q.dtype)
        o = F.scaled_dot_product_attention(
            padded,
            torch.cat((c_kv, k_pe), dim=-1),
            c_kv,
            attn_mask=meta.prefill_mask,
            scale=self.scaling,
            enable_gqa=True,
        )  # [S, N, Q, latent]
        return o.transpose(1, 2).reshape(seqs * q_max, self.heads, -1)[meta.prefill_pad_index]


def _cos_sin(
    position_embeddings: torch.Tensor | tuple[torch.Tensor, torch.Tensor],
) -> tuple[torch.Tensor, torch.Tensor]:
    """`(cos, sin)`, each `[T, rope]` laid out `cat(freqs, freqs)`, from either family's rotary
    output (DeepSeek-V2's `freqs_cis` holds `scaling * exp(i * freqs)` per pair)."""
    if isinstance(position_embeddings, torch.Tensor):
        freqs = position_embeddings[0]  # [T, rope / 2] complex
        return torch.cat([freqs.real] * 2, dim=-1), torch.cat([freqs.imag] * 2, dim=-1)
    cos, sin = position_embeddings
    return cos[0], sin[0]
