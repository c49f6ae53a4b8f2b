"""Builds the engine's `Speculator` for the configured method, with its drafting model if any.

Start-up is two steps, like the target's: `load_drafter` before the KV budget is computed (the
drafting model's KV bytes per token count against it: `Drafter.spec`), then
`build_speculator` once the block count is known.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import torch
from transformers import PretrainedConfig

from configs.speculative_config import SpeculativeConfig
from engine.block_manager import BlockManager
from engine.kv_cache import KVCacheSpec, allocate_kv_caches
from engine.model_loader import CheckpointRef, load_config, load_model
from engine.model_runner import ModelRunner
from engine.spec_decode.model_proposer import ModelProposer
from engine.spec_decode.mtp_model import MtpDraftModel
from engine.spec_decode.ngram import NgramProposer
from engine.spec_decode.speculator import Proposer, Speculator

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Drafter:
    """A drafting model and the geometry of its KV cache.

    Attributes:
        model: a causal LM for `ModelRunner` (the draft checkpoint, or the MTP layer).
        spec: its KV geometry (one MLA latent layer for MTP).
        mtp: whether it is the MTP layer.
    """

    model: torch.nn.Module
    spec: KVCacheSpec
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
        proposer = ModelProposer(runner, block_manager, mtp=drafter.mtp)
    return Speculator(config, max_model_len, proposer)
