"""DeepSeek-V4's multi-token-prediction (MTP) layer, the draft model of `method: mtp` for
`deepseek_v4` checkpoints: the module and its checkpoint names. Its weights are read by
`engine.spec_decode.mtp_v4_weights`; `engine.spec_decode.mtp_v4_draft` runs it as a drafter.

transformers 5.24 does not build it (`DeepseekV4PreTrainedModel._keys_to_ignore_on_load_unexpected
= [r"(^|\\.)mtp\\..*"]`), so it is assembled here from the checkpoint's `mtp.0.*` tensors and
transformers' own V4 modules. Layout and math follow DeepSeek's reference `inference/model.py`
(`MTPBlock(Block)`, as quoted by ports of it) and vLLM's port
(`vllm/models/deepseek_v4/nvidia/mtp.py`, `DeepSeekV4MultiTokenPredictorLayer` and its
`load_weights`). With `D` = `hidden_size`, `n` = `hc_mult`, the layer's tensors are:

| tensor | shape | here |
|---|---|---|
| `mtp.0.e_proj.weight`, `mtp.0.h_proj.weight` | `[D, D]` | `e_proj`, `h_proj` |
| `mtp.0.enorm.weight`, `mtp.0.hnorm.weight`, `mtp.0.norm.weight` | `[D]` | RMSNorms |
| `mtp.0.hc_head_{fn,base,scale}` | `[n, n * D]`, `[n]`, `[1]` | `hc_head` (HyperHead) |
| every other `mtp.0.<name>` | as `layers.{i}.<name>` | `block`, a `DeepseekV4DecoderLayer` |

The block's names are those of a decoder layer in DeepSeek's layout (`attn_norm`, `ffn_norm`,
`hc_attn_*`, `hc_ffn_*`, `attn.{wq_a,q_norm,wq_b,wkv,kv_norm,wo_a,wo_b,attn_sink}`,
`ffn.gate.{weight,bias}`, `ffn.experts.{e}.w{1,2,3}.weight`, `ffn.shared_experts.w{1,2,3}.weight`),
mapped onto transformers' modules as its `conversion_mapping.py` maps `deepseek_v4`'s. The
block's attention type is the checkpoint's `compress_ratios[num_hidden_layers]` (the entry after
the decoder layers; 0, sliding-window only, in V4-Flash's and V4-Pro's published
`config.json`); its MoE routes by learned top-k (hash routing covers layers below
`num_hash_layers` only, and the MTP layer's index is `num_hidden_layers`).

At position `p` the layer takes the token `t_{p+1}` and the target's hidden *streams* at `p`
(`[n, D]`: the last decoder layer's output, before the model's `hc_head` collapses them):

    e = enorm(embed(t_{p+1}))                       [D]
    x = h_proj(hnorm(h_p)) + e_proj(e)              [n, D]  (hnorm per stream, e on every stream)
    x = block(x)                                    [n, D]  (own attention and KV, MoE, mHC)
    logits_{p+2} = head(norm(hc_head(x)))           (its own hc_head; the target's embed and head)

and `x`, its output streams, is what a further draft step takes in place of `h` (vLLM feeds it
back alike). vLLM also zeroes the embedding at position 0; the reference does not, nor does this.

The block's KV lives in a `HybridKVSpec` of one layer (`engine.spec_decode.draft_kv`) whose
sliding kinds are addressed through the target's sliding-window table
(`engine.spec_decode.model_proposer`).
Only a sliding-window MTP layer is taken: the drafter follows a step after the target's
`HybridBlockManager.commit` has released the sliding blocks behind the target's span, and a
compressed layer would pool its entries from compressor state in those blocks.
"""

from __future__ import annotations

import copy
import logging
import re
from typing import Any

import torch
from torch import nn
from transformers import PretrainedConfig
from transformers.models.deepseek_v4.modeling_deepseek_v4 import (
    DeepseekV4DecoderLayer,
    DeepseekV4HyperHead,
    DeepseekV4RMSNorm,
)

from engine.deepseek_v4.cache import SLIDING

logger = logging.getLogger(__name__)

PREFIX = "mtp.0."
"""The checkpoint's first MTP layer (the one drafted with; later ones are not loaded)."""

_EXTRAS = {
    "e_proj.weight": "e_proj.weight",
    "h_proj.weight": "h_proj.weight",
    "enorm.weight": "enorm.weight",
    "hnorm.weight": "hnorm.weight",
    "norm.weight": "norm.weight",
    "hc_head_fn": "hc_head.hc_fn",
    "hc_head_base": "hc_head.hc_base",
    "hc_head_scale": "hc_head.hc_scale",
}
"""The MTP layer's own tensors (after `PREFIX`) -> parameters of `V4MtpLayer`."""

_BLOCK = {
    "attn_norm.weight": "input_layernorm.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "hc_attn_fn": "attn_hc.fn",
    "hc_attn_base": "attn_hc.base",
    "hc_attn_scale": "attn_hc.scale",
    "hc_ffn_fn": "ffn_hc.fn",
    "hc_ffn_base": "ffn_hc.base",
    "hc_ffn_scale": "ffn_hc.scale",
    "attn.attn_sink": "self_attn.sinks",
    "attn.wq_a.weight": "self_attn.q_a_proj.weight",
    "attn.q_norm.weight": "self_attn.q_a_norm.weight",
    "attn.wq_b.weight": "self_attn.q_b_proj.weight",
    "attn.wkv.weight": "self_attn.kv_proj.weight",
    "attn.kv_norm.weight": "self_attn.kv_norm.weight",
    "attn.wo_a.weight": "self_attn.o_a_proj.weight",
    "attn.wo_b.weight": "self_attn.o_b_proj.weight",
    "ffn.gate.weight": "mlp.gate.weight",
    "ffn.gate.bias": "mlp.gate.e_score_correction_bias",
    "ffn.shared_experts.w1.weight": "mlp.shared_experts.gate_proj.weight",
    "ffn.shared_experts.w2.weight": "mlp.shared_experts.down_proj.weight",
    "ffn.shared_experts.w3.weight": "mlp.shared_experts.up_proj.weight",
}
"""A sliding-window decoder block's tensors in DeepSeek's layout -> `DeepseekV4DecoderLayer`'s
parameters (transformers' `conversion_mapping.py`, `"deepseek_v4"`); routed experts are merged
separately (`EXPERT_WEIGHT`)."""

EXPERT_WEIGHT = re.compile(r"ffn\.experts\.(\d+)\.(w[123])\.weight")

_EXPERT_TARGETS = {
    "w1": ("block.mlp.experts.gate_up_proj", 0),
    "w3": ("block.mlp.experts.gate_up_proj", 1),
    "w2": ("block.mlp.experts.down_proj", 0),
}
"""A routed expert's weight -> the merged parameter of `V4MtpLayer` it is part of, and which
part (`gate_up_proj[e] = [w1; w3]`, `down_proj[e] = w2`, as transformers merges them)."""


def mtp_layer_type(raw: dict[str, Any], config: PretrainedConfig) -> str:
    """The attention type of the first MTP layer, from the checkpoint's raw `config.json`.

    transformers truncates `compress_ratios` / `layer_types` to the decoder layers, so the raw
    file is read: `compress_ratios[num_hidden_layers]` (0: `sliding_attention`; else the
    layer type of that ratio in `config.compress_rates`), else `layer_types[num_hidden_layers]`,
    else `sliding_attention` (V4-Flash's and V4-Pro's), logged.

    Raises:
        ValueError: the ratio is not one of the config's compress rates.
    """
    n = int(config.num_hidden_layers)
    ratios, types = raw.get("compress_ratios"), raw.get("layer_types")
    if isinstance(ratios, list) and len(ratios) > n:
        ratio = int(ratios[n])
        if ratio == 0:
            return SLIDING
        by_rate = {int(r): kind for kind, r in dict(config.compress_rates).items()}
        if ratio not in by_rate:
            raise ValueError(
                f"compress_ratios[{n}] (the MTP layer's) is {ratio}, none of the compress rates "
                f"{dict(config.compress_rates)}"
            )
        return by_rate[ratio]
    if isinstance(types, list) and len(types) > n:
        return str(types[n])
    logger.info("config.json gives the MTP layer no attention type; taking sliding_attention")
    return SLIDING


def block_config(config: PretrainedConfig, layer_type: str) -> PretrainedConfig:
    """A copy of the target's config describing the MTP block alone: one layer of
    `layer_type` with learned top-k MoE routing."""
    block = copy.deepcopy(config)
    block.num_hidden_layers = 1
    block.layer_types = [layer_type]
    block.mlp_layer_types = ["moe"]
    return block


class V4MtpLayer(nn.Module):
    """The MTP layer (module docstring); embedding and rotary embedding are the target's.

    Args:
        config: `block_config`'s one-layer config.
        embed_tokens: the target's token embedding.
        rotary_emb: the target's `DeepseekV4RotaryEmbedding` (`main` and `compress` tables).

    Attributes:
        checkpoint_prefix: `PREFIX`; with `checkpoint_target` the layer is
            `engine.quantization.checkpoint_names.CheckpointMapped`, so the W8A8 loader finds
            where each `mtp.0.*` tensor went.
    """

    checkpoint_prefix = PREFIX

    def __init__(self, config: PretrainedConfig, embed_tokens: nn.Module, rotary_emb: nn.Module):
        super().__init__()
        d, eps = int(config.hidden_size), float(config.rms_norm_eps)
        self.config = config
        self.hc_mult = int(config.hc_mult)
        self.e_proj = nn.Linear(d, d, bias=False)
        self.h_proj = nn.Linear(d, d, bias=False)
        self.enorm = DeepseekV4RMSNorm(d, eps)
        self.hnorm = DeepseekV4RMSNorm(d, eps)
        self.norm = DeepseekV4RMSNorm(d, eps)
        self.hc_head = DeepseekV4HyperHead(config)
        self.block = DeepseekV4DecoderLayer(config, 0)
        self.embed_tokens = embed_tokens
        self.rotary_emb = rotary_emb

    def checkpoint_target(self, name: str) -> tuple[str, int | None] | None:
        """Where checkpoint tensor `mtp.0.<name>` (DeepSeek's layout) went: this layer's
        parameter name and, for a routed expert's weight, its part of the merged parameter
        (`w1` part 0 and `w3` part 1 of `block.mlp.experts.gate_up_proj`, `w2` part 0 of
        `block.mlp.experts.down_proj`); None for any other name (quantisation companions
        included)."""
        if name in _EXTRAS:
            return _EXTRAS[name], None
        if name in _BLOCK:
            return f"block.{_BLOCK[name]}", None
        if match := EXPERT_WEIGHT.fullmatch(name):
            return _EXPERT_TARGETS[match.group(2)]
        return None

    def forward(
        self,
        input_ids: torch.Tensor,
        previous: torch.Tensor,
        position_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """`[1, T]` next tokens and `[T, n * D]` hidden streams -> `[1, T, n * D]` output streams.

        Args:
            input_ids: row j's token `t_{p+1}` (position `p` = `position_ids[0, j]`).
            previous: row j's streams `h_p` (the target's, or this layer's own output).
            position_ids: `[1, T]`.
            attention_mask: for transformers' attention (references); the engine's
                `V4Attention` reads the step's `HybridStep` and ignores it.
        """
        tokens = input_ids.shape[1]
        e = self.enorm(self.embed_tokens(input_ids))  # [1, T, D]
        h = self.hnorm(previous.reshape(1, tokens, self.hc_mult, -1).to(e.dtype))
        x = self.h_proj(h) + self.e_proj(e).unsqueeze(-2)  # [1, T, n, D]
        rope = {
            kind: self.rotary_emb(e, position_ids=position_ids, layer_type=kind)
            for kind in ("main", "compress")
        }
        x = self.block(
            x,
            input_ids=input_ids,
            position_embeddings=rope,
            position_ids=position_ids,
            attention_mask=attention_mask,
        )
        return x.flatten(2)

    def final_hidden(self, streams: torch.Tensor) -> torch.Tensor:
        """`[..., n * D]` output streams -> `[..., D]`: `norm(hc_head(streams))`, the input of
        the LM head."""
        lead, width = streams.shape[:-1], streams.shape[-1] // self.hc_mult
        x = streams.reshape(1, -1, self.hc_mult, width)
        return self.norm(self.hc_head(x)).reshape(*lead, width)
