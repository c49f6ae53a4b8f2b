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
from engine.checkpoint_ref import CheckpointRef
from engine.deepseek_v4.cache import HybridKVSpec
from engine.gguf_cache import loadable
from engine.kv_layout import AnyKVSpec, allocate_kv_caches
from engine.model_loader import load_config, load_model
from engine.model_runner import ModelRunner
from engine.spec_decode.draft_kv import draft_kv_spec, fit_hybrid_kv
from engine.spec_decode.model_proposer import ModelProposer
from engine.spec_decode.mtp_model import MtpDraftModel
from engine.spec_decode.mtp_v4 import V4MtpLayer
from engine.spec_decode.mtp_v4_draft import V4MtpDraftModel
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
    spec = draft_kv_spec(config, target_config, dtype)
    if spec is None:
        return None
    if config.method == "mtp":
        if isinstance(target.mtp, V4MtpLayer):
            return Drafter(V4MtpDraftModel(target.mtp, target), spec, mtp=True)
        return Drafter(MtpDraftModel(target.mtp), spec, mtp=True)
    assert config.model is not None, "validated by SpeculativeConfig"
    ref = loadable(CheckpointRef.from_path(config.model.resolve()))
    draft_config = load_config(ref)
    if draft_config.vocab_size > target_config.vocab_size:
        raise ValueError(
            f"draft model {ref.directory}: vocabulary of {draft_config.vocab_size} tokens, more "
            f"than the target's {target_config.vocab_size}; the draft must share the target's "
            "tokenizer"
        )
    model = load_model(ref, dtype, device)
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
    the sliding-window pool (`engine.spec_decode.draft_kv.fit_hybrid_kv`); other drafters are
    returned unchanged.

    Returns:
        The widened target spec and the drafter with its spec's `sliding_blocks` set.
    """
    if not isinstance(drafter.spec, HybridKVSpec):
        return spec, drafter
    fitted, own = fit_hybrid_kv(
        spec, drafter.spec, max_num_seqs, max_num_batched_tokens, block_size
    )
    return fitted, replace(drafter, spec=own)


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
