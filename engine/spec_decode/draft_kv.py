"""The KV geometry of a speculative drafting model, from configs alone (no weights loaded).

The engine (`engine.spec_decode.build.load_drafter`, `fit_hybrid_drafter`) and
`ascend-router plan` (`operate.planning`) both take it from here, so the bytes per block that
`engine.kv_budget` charges for the drafting model are the same in both:

- `draft`: the draft checkpoint's own cache (`KVCacheSpec.from_config` of its `config.json`);
- `mtp` on DeepSeek-V3: one MLA latent layer of the target's `kv_lora_rank + qk_rope_head_dim`;
- `mtp` on DeepSeek-V4: a one-layer `HybridKVSpec` of the MTP block, a sliding-window layer
  (the only kind the engine runs, `engine.spec_decode.mtp_v4`), whose sliding kinds share the
  target's sliding-window pool (`fit_hybrid_kv`);
- `ngram`: no model, no cache.
"""

from __future__ import annotations

from dataclasses import replace

import torch
from transformers import PretrainedConfig

from configs.speculative_config import SpeculativeConfig
from engine.checkpoint_ref import CheckpointRef
from engine.deepseek_v4.cache import SLIDING, HybridKVSpec
from engine.gguf_cache import loadable
from engine.kv_cache import KVCacheSpec
from engine.kv_layout import AnyKVSpec
from engine.model_loader import load_config
from engine.spec_decode.mtp_v4 import block_config


def draft_kv_spec(
    config: SpeculativeConfig, target_config: PretrainedConfig | None, dtype: torch.dtype
) -> AnyKVSpec | None:
    """The drafting model's KV geometry (see the module docstring); None for `ngram`.

    Args:
        config: the `speculative` settings.
        target_config: the target checkpoint's config (`mtp` reads its MTP layer from it);
            None where only a `shape` section describes the target (`ascend-router plan`).
        dtype: the KV cache dtype (the target's).

    Raises:
        ValueError: the draft checkpoint is not on this machine or its config cannot be read
            (`engine.model_loader.load_config`), or `mtp` without the target's config.
    """
    if config.method == "ngram":
        return None
    if config.method == "mtp":
        if target_config is None:
            raise ValueError(
                "speculative method 'mtp': the MTP layer's KV geometry comes from the target "
                "checkpoint's config.json, and a `shape` section does not give it; plan where "
                "the checkpoint is"
            )
        if target_config.model_type == "deepseek_v4":
            return HybridKVSpec.from_config(block_config(target_config, SLIDING), dtype)
        return KVCacheSpec.mla(1, target_config.kv_lora_rank, target_config.qk_rope_head_dim, dtype)
    assert config.model is not None, "validated by SpeculativeConfig"
    draft_config = load_config(loadable(CheckpointRef.from_path(config.model.resolve())))
    return KVCacheSpec.from_config(draft_config, dtype)


def fit_hybrid_kv(
    spec: HybridKVSpec,
    draft: HybridKVSpec,
    max_num_seqs: int,
    max_num_batched_tokens: int,
    block_size: int,
) -> tuple[HybridKVSpec, HybridKVSpec]:
    """The target's hybrid spec and a hybrid drafting model's (DeepSeek-V4's MTP layer) made to
    share the sliding-window pool.

    The drafter's sliding kinds are addressed through the target's sliding tables, so:
    - the target keeps sliding blocks for the drafter's span too: the MTP layer's newest row
      is at the position before the target's next one and reads `sliding_window` positions
      back from it, one more than the target's `sliding_window - 1`. The span becomes
      `max(target span, drafter span + 1)` and the pool is re-sized for it
      (`HybridKVSpec.sliding_blocks_for`: unchanged at V4-Flash's shape, whose span 127 and 128
      both take two 128-token blocks);
    - the drafter's kinds join the target's as `mtp_<kind>` so the budget takes their share of
      the sliding pool off first (`engine.kv_budget`); the target allocates only its own
      layers' kinds, the drafter its own with the target's `sliding_blocks`.

    Returns:
        The widened target spec and the drafter's spec with its `sliding_blocks` set.
    """
    extra = tuple(replace(k, name=f"mtp_{k.name}") for k in draft.kinds if k.sliding)
    fitted = replace(spec, kinds=spec.kinds + extra, span=max(spec.span, draft.span + 1))
    sliding = fitted.sliding_blocks_for(max_num_seqs, max_num_batched_tokens, block_size)
    return replace(fitted, sliding_blocks=sliding), replace(draft, sliding_blocks=sliding)
