"""Our decoder modules in place of the HF ones, so the serving path runs through the op registry.

As vLLM's Transformers back-end does, the HF model class defines the architecture and loads the
checkpoint in its own layout; `use_fused_layers` then swaps, module by module:

- every RMSNorm (`input_layernorm`, `post_attention_layernorm`, the final `norm`, Qwen3's
  per-head `q_norm`/`k_norm`, Qwen2.5-VL's vision blocks and patch merger) for
  `RegistryRMSNorm` → op `rms_norm` (`npu_rms_norm` on Ascend, `F.rms_norm` on CPU and CUDA);
- every `nn.LayerNorm` (only vision/audio encoders have them: Qwen2-Audio's tower) for
  `RegistryLayerNorm` → op `layer_norm` (`F.layer_norm`, native on Ascend too);
- every SiLU-gated MLP (dense layers, DeepSeek's shared experts) for `RegistrySwiGLUMLP`: gate
  and up projections merged into one `gate_up_proj` GEMM, then op `swiglu` (`npu_swiglu`);
- the attention modules of the families with separate or fused q/k/v projections and
  "rotate half" rotary (Llama, Qwen2, Qwen3, Qwen3-MoE, Phi-3) for `RegistryAttention`: q, k and
  v merged into one `qkv_proj` GEMM, op `rotary_embedding` (`npu_rotary_mul`), then the engine's
  paged attention (`engine.attention`);
- MoE routers and routed experts (Qwen3-MoE, DeepSeek-V2/V3) for those of `engine.fused_moe`:
  ops `moe_topk_softmax` / `moe_grouped_topk`, `moe_dispatch`, `swiglu`, `moe_combine`;
- DeepSeek-V2/V3's multi-head latent attention for `engine.mla_attention.MLAAttention`: ops
  `mla_prolog` and `mla_decode_attention` over the latent KV cache. Not optional: the engine
  sizes and allocates these models' cache as the latent (`engine.kv_cache`), which transformers'
  expanded attention cannot read.
- DeepSeek-V4's attention for `engine.deepseek_v4.attention.V4Attention`: ops `kv_compress`,
  `lightning_indexer` and `sparse_shared_kv_attention` over the hybrid cache. Not optional
  either, for the same reason.

Merging needs plain `nn.Linear` parts (float checkpoints, before int4 quantisation); W8A8 linears
or tensor-parallel shards that are not plain stay separate and their outputs are concatenated.
The rest (DeepSeek-V2's group-limited routing) stays HF code.
Per family, the ops of one step are listed in `docs/architecture.md`.

Every replacement computes what the HF module computes, up to floating-point summation order:
`tests/engine/test_families.py` checks greedy output against unmodified `transformers` in
float32 for every family (`tests/engine/test_fused_layers.py`: which modules each one gets).
"""

from __future__ import annotations

import logging
from collections import Counter

import torch
from torch import nn

from engine.attention import paged_attention
from engine.deepseek_v4.attention import V4_ATTENTIONS, V4Attention
from engine.fused_moe import EXPERTS, RegistryExperts, registry_router
from engine.mla_attention import MLA_ATTENTIONS, MLAAttention
from npu_ops.ops import active_ops

logger = logging.getLogger(__name__)

_FAMILIES = ("Llama", "Qwen2", "Qwen3", "Qwen3Moe", "Phi3", "DeepseekV2", "DeepseekV3")
"""transformers class-name prefixes of the families served."""
NORMS = frozenset(f"{family}RMSNorm" for family in (*_FAMILIES, "Qwen2_5_VL"))
"""RMSNorm classes computing `weight * (x * rsqrt(mean(x²) + eps))` (transformers' LlamaRMSNorm;
Qwen2.5-VL's, in its vision tower and language model, is the same code)."""
MLPS = frozenset(f"{family}MLP" for family in _FAMILIES)
"""MLP classes computing `down(act(gate(x)) * up(x))` (Phi-3: gate and up fused already)."""
ATTENTIONS = frozenset(
    f"{family}Attention" for family in ("Llama", "Qwen2", "Qwen3", "Qwen3Moe", "Phi3")
)
"""Attention classes with q/k/v (or Phi-3's fused qkv) projections and rotate-half rotary."""


class RegistryRMSNorm(nn.Module):
    """RMSNorm through op `rms_norm`.

    Args:
        norm: the HF RMSNorm (its `weight` `[H]` is shared, `variance_epsilon` copied).
    """

    def __init__(self, norm: nn.Module) -> None:
        super().__init__()
        self.weight = norm.weight
        self.eps = float(norm.variance_epsilon)
        self._ops = active_ops()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """`[..., H]` -> `[..., H]` in `x.dtype`."""
        return self._ops.rms_norm(x, self.weight, self.eps)


class RegistryLayerNorm(nn.Module):
    """`nn.LayerNorm` (an encoder's: Qwen2-Audio's Whisper-style tower) through op `layer_norm`.

    Args:
        norm: the `nn.LayerNorm` over the last dimension (its `weight`, `bias` `[H]` are
            shared, `eps` copied).
    """

    def __init__(self, norm: nn.LayerNorm) -> None:
        super().__init__()
        self.weight = norm.weight
        self.bias = norm.bias
        self.eps = float(norm.eps)
        self._ops = active_ops()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """`[..., H]` -> `[..., H]` in `x.dtype`."""
        return self._ops.layer_norm(x, self.weight, self.bias, self.eps)


class MergedProjection(nn.Module):
    """Several projections of one input, as one GEMM when they can be merged.

    Args:
        parts: the projections, each with `in_features`/`out_features`; plain `nn.Linear`
            parts are merged into `merged` (weights concatenated along the output dimension,
            a missing bias as zeros), any other kind are called one by one.
        sizes: how the output splits into its parts (default: each part's `out_features`;
            Phi-3's one `qkv_proj` splits into q, k and v).
        names: the HF module names (last component) of `parts`, e.g. `q_proj`; LoRA adapters
            address the parts by them (`engine.lora.model`).

    The output is always the concatenation `[..., sum(sizes)]`.
    """

    def __init__(
        self, parts: list[nn.Module], sizes: list[int] | None = None, names: tuple[str, ...] = ()
    ) -> None:
        super().__init__()
        self.sizes = sizes or [int(p.out_features) for p in parts]
        self.names = names
        if len(parts) > 1 and all(type(p) is nn.Linear for p in parts):
            weight = torch.cat([p.weight.detach() for p in parts])
            has_bias = any(p.bias is not None for p in parts)
            merged = nn.Linear(weight.shape[1], weight.shape[0], bias=has_bias)
            merged.to(weight.dtype)
            merged.weight = nn.Parameter(weight, requires_grad=False)
            if has_bias:
                bias = [
                    p.bias.detach() if p.bias is not None else weight.new_zeros(p.out_features)
                    for p in parts
                ]
                merged.bias = nn.Parameter(torch.cat(bias), requires_grad=False)
            self.merged: nn.Module | None = merged
            self.parts = nn.ModuleList()
        else:
            self.merged = None
            self.parts = nn.ModuleList(parts)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """`[..., in]` -> `[..., sum(sizes)]`."""
        if self.merged is not None:
            return self.merged(x)
        if len(self.parts) == 1:
            return self.parts[0](x)
        return torch.cat([p(x) for p in self.parts], dim=-1)


class RegistrySwiGLUMLP(nn.Module):
    """`down(swiglu(gate_up(x)))` through op `swiglu`.

    Args:
        mlp: an HF MLP of `MLPS` with a SiLU activation.
    """

    def __init__(self, mlp: nn.Module) -> None:
        super().__init__()
        if hasattr(mlp, "gate_up_proj"):  # Phi-3: [gate | up] already one layer
            self.gate_up_proj = MergedProjection([mlp.gate_up_proj], names=("gate_up_proj",))
        else:
            self.gate_up_proj = MergedProjection(
                [mlp.gate_proj, mlp.up_proj], names=("gate_proj", "up_proj")
            )
        self.down_proj = mlp.down_proj
        self._ops = active_ops()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """`[..., H]` -> `[..., H]`."""
        return self.down_proj(self._ops.swiglu(self.gate_up_proj(x)))


class RegistryAttention(nn.Module):
    """q/k/v projection, optional per-head q/k norm, op `rotary_embedding`, paged attention.

    Args:
        attn: an HF attention module of `ATTENTIONS` (after any tensor-parallel sharding: the
            head counts come from its projections or its per-rank config).
    """

    def __init__(self, attn: nn.Module) -> None:
        super().__init__()
        self.layer_idx = attn.layer_idx
        self.head_dim = int(attn.head_dim)
        self.scaling = float(attn.scaling)
        if hasattr(attn, "qkv_proj"):  # Phi-3: [q | k | v] already one layer
            q = attn.config.num_attention_heads * self.head_dim
            kv = attn.config.num_key_value_heads * self.head_dim
            self.qkv_proj = MergedProjection([attn.qkv_proj], [q, kv, kv], ("qkv_proj",))
        else:
            self.qkv_proj = MergedProjection(
                [attn.q_proj, attn.k_proj, attn.v_proj], names=("q_proj", "k_proj", "v_proj")
            )
        self.o_proj = attn.o_proj
        self.q_norm = _registry_norm(getattr(attn, "q_norm", None))
        self.k_norm = _registry_norm(getattr(attn, "k_norm", None))
        self._ops = active_ops()

    def forward(
        self,
        hidden_states: torch.Tensor,
        position_embeddings: tuple[torch.Tensor, torch.Tensor],
        attention_mask: torch.Tensor | None = None,
        **kwargs: object,
    ) -> tuple[torch.Tensor, None]:
        """`[1, T, H]` -> (`[1, T, H]`, None), the HF attention module's contract.

        Args:
            hidden_states: the flattened step's tokens (batch dimension 1).
            position_embeddings: `(cos, sin)`, each `[1, T, rotary_dim]` (the model's rotary
                module, computed once per forward pass).
            attention_mask: ignored; paged attention reads its masks from the step's context.
        """
        tokens = hidden_states.shape[1]
        q, k, v = self.qkv_proj(hidden_states[0]).split(self.qkv_proj.sizes, dim=-1)
        q = q.view(tokens, -1, self.head_dim)
        k = k.view(tokens, -1, self.head_dim)
        v = v.view(tokens, -1, self.head_dim)
        if self.q_norm is not None and self.k_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        cos, sin = position_embeddings[0][0], position_embeddings[1][0]
        q, k = self._rotary(q, cos, sin), self._rotary(k, cos, sin)
        out, _ = paged_attention(
            self,
            q.transpose(0, 1).unsqueeze(0),
            k.transpose(0, 1).unsqueeze(0),
            v.transpose(0, 1).unsqueeze(0),
            None,
            scaling=self.scaling,
        )  # [1, T, heads, head_dim]
        return self.o_proj(out.reshape(1, tokens, -1)), None

    def _rotary(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        """Rotate the first `rotary_dim` channels of `[T, N, D]` (all of them but for Phi-3's
        partial rotary), as transformers' `apply_rotary_pos_emb`."""
        dim = cos.shape[-1]
        if dim == x.shape[-1]:
            return self._ops.rotary_embedding(x, cos, sin)
        rotated = self._ops.rotary_embedding(x[..., :dim].contiguous(), cos, sin)
        return torch.cat([rotated, x[..., dim:]], dim=-1)


def _registry_norm(norm: nn.Module | None) -> RegistryRMSNorm | None:
    return None if norm is None else RegistryRMSNorm(norm)


def _silu(mlp: nn.Module) -> bool:
    act = getattr(mlp, "act_fn", None) or getattr(mlp, "activation_fn", None)
    return isinstance(act, nn.SiLU) or type(act).__name__ == "SiLUActivation"


def use_fused_layers(model: nn.Module) -> Counter[str]:
    """Swap the HF modules listed in the module docstring for ours, in place.

    Call it after weights are loaded (and after any tensor-parallel sharding), before int4
    quantisation (so merged projections are quantised as one layer).

    Returns:
        How many modules of each replacement class were installed.
    """
    installed: Counter[str] = Counter()
    replaced: tuple[str, ...] = ()
    for name, module in list(model.named_modules()):
        if name.startswith(replaced):
            continue  # a part of a module replaced already (its replacement took over its parts)
        kind = type(module).__name__
        replacement: nn.Module | None = None
        if kind in ATTENTIONS:
            replacement = RegistryAttention(module)
        elif kind in MLA_ATTENTIONS:
            replacement = MLAAttention(module)
        elif kind in V4_ATTENTIONS:
            replacement = V4Attention(module)
        elif kind in EXPERTS:
            replacement = RegistryExperts(module)
        elif kind.endswith("TopkRouter") or kind.endswith("TopKRouter"):
            replacement = registry_router(module)
        elif kind in MLPS and _silu(module):
            replacement = RegistrySwiGLUMLP(module)
        elif kind in NORMS and not name.endswith(("q_norm", "k_norm")):
            replacement = RegistryRMSNorm(module)
        elif type(module) is nn.LayerNorm and len(module.normalized_shape) == 1:
            replacement = RegistryLayerNorm(module)
        if replacement is None:
            continue
        parent, _, child = name.rpartition(".")
        setattr(model.get_submodule(parent), child, replacement)
        installed[type(replacement).__name__] += 1
        replaced += (f"{name}.",)
    logger.info("fused layers: %s", dict(installed) or "none for this architecture")
    return installed
