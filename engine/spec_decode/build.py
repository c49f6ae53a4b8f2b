"""Builds the engine's `Speculator` for the configured method, with its drafting model if any.

Start-up is two steps, like the target's: `load_drafter` before the KV budget is computed (the
drafting model's KV bytes per token count against it: `Drafter.spec`), then
`build_speculator` once the block count is known. A DeepSeek-V4 MTP layer's cache is hybrid: its
sliding kinds live in the target's sliding-window blocks, so `fit_hybrid_drafter` widens the
target's hybrid spec for it before the target's cache is allocated.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace

import torch
from transformers import PretrainedConfig

from configs.speculative_config import SpeculativeConfig
from engine.block_manager import BlockManager
from engine.deepseek_v4.cache import HybridKVSpec
from engine.kv_cache import AnyKVSpec, KVCacheSpec, allocate_kv_caches
from engine.model_loader import CheckpointRef, load_config, load_model
from engine.model_runner import ModelRunner
from engine.spec_decode.model_proposer import ModelProposer
from engine.spec_decode.mtp_model import MtpDraftModel
from engine.spec_decode.mtp_v4 import V4MtpDraftModel, V4MtpLayer, mtp_kv_spec
from engine.spec_decode.ngram import NgramProposer
from engine.spec_decode.speculator import Proposer, Speculator

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Drafter:
    """A drafting model and the geometry of its KV cache.

    Attributes:
        model: a causal LM for `ModelRunner` (the draft checkpoint, or the MTP layer).
        spec: its KV geometry (DeepSeek-V3's MTP: one MLA latent layer; DeepSeek-V4's: a
            one-layer `HybridKVSpec` on the target's sliding-window blocks).
        mtp: whether it is the MTP layer.
    """

    model: torch.nn.Module
    spec: AnyKVSpec
    mtp: bool


def load_drafter(
    config: SpeculativeConfig,
    target: torch.nn.Module,
    target_config: PretrainedConfig,
    dtype: torch.dtype,
    device: torch.device,
) -> Drafter | None:
    """The drafting model of `draft` or `mtp` (None for `ngram`).

    Args:
        target: the loaded target model; for `mtp` it carries the MTP layer as `target.mtp`
            (`engine.model_loader.load_model(..., mtp=True)`).

    Raises:
        ValueError: the draft checkpoint cannot be loaded or its vocabulary is larger than the
            target's.
    """
    if config.method == "ngram":
        return None
    if config.method == "mtp":
        if isinstance(target.mtp, V4MtpLayer):
            v4 = mtp_kv_spec(target.mtp, dtype)
            return Drafter(V4MtpDraftModel(target.mtp, target), v4, mtp=True)
        spec = KVCacheSpec.mla(1, target_config.kv_lora_rank, target_config.qk_rope_head_dim, dtype)
        return Drafter(MtpDraftModel(target.mtp), spec, mtp=True)
    assert config.model is not None, "validated by SpeculativeConfig"
    ref = CheckpointRef.from_path(config.model.resolve())
    draft_config = load_config(ref)
    if draft_config.vocab_size > target_config.vocab_size:
        raise ValueError(
            f"draft model {ref.directory}: vocabulary of {draft_config.vocab_size} tokens, more "
            f"than the target's {target_config.vocab_size}; the draft must share the target's "
            "tokenizer"
        )
    model = load_model(ref, dtype, device)
    spec = KVCacheSpec.from_config(draft_config, dtype)
    logger.info("draft model %s: KV %s", ref.directory, spec.describe())
    return Drafter(model, spec, mtp=False)


def fit_hybrid_drafter(
    spec: HybridKVSpec,
    drafter: Drafter,
    max_num_seqs: int,
    max_num_batched_tokens: int,
    block_size: int,
) -> tuple[HybridKVSpec, Drafter]:
    """The target's hybrid spec and a hybrid drafter (DeepSeek-V4's MTP layer) made to share
    the sliding-window pool; other drafters are returned unchanged.

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
        The widened target spec and the drafter with its spec's `sliding_blocks` set.
    """
    if not drafter.spec.hybrid:
        return spec, drafter
    own = drafter.spec
    assert isinstance(own, HybridKVSpec)
    extra = tuple(replace(k, name=f"mtp_{k.name}") for k in own.kinds if k.sliding)
    fitted = replace(spec, kinds=spec.kinds + extra, span=max(spec.span, own.span + 1))
    sliding = fitted.sliding_blocks_for(max_num_seqs, max_num_batched_tokens, block_size)
    fitted = replace(fitted, sliding_blocks=sliding)
    return fitted, replace(drafter, spec=replace(own, sliding_blocks=sliding))


def build_speculator(
    config: SpeculativeConfig,
    max_model_len: int,
    block_manager: BlockManager,
    drafter: Drafter | None,
    device: torch.device,
) -> Speculator:
    """The speculator; a drafting model gets its KV cache here (the target's block count and
    block size)."""
    proposer: Proposer
    if drafter is None:
        proposer = NgramProposer(config.prompt_lookup_min, config.prompt_lookup_max)
    else:
        bs = block_manager.block_size
        caches = allocate_kv_caches(drafter.spec, block_manager.num_blocks, bs, device)
        runner = ModelRunner(drafter.model, caches, bs, device)
        proposer = ModelProposer(runner, block_manager, mtp=drafter.mtp, hybrid=drafter.spec.hybrid)
    return Speculator(config, max_model_len, proposer)
