"""Building what an `LLMEngine` runs on, from a checkpoint and its `EngineConfig`.

In order: the model config and dtype, the KV geometry, the executor (the model loaded here, or
on tensor-parallel rank actors) and the speculative drafting model, the LoRA manager, the KV
block count (measured memory, `engine.kv_budget`), the KV cache, the decode graphs, then the
block manager, scheduler and speculator over those blocks.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import torch
from transformers import PretrainedConfig

from configs.engine_config import EngineConfig
from engine.block_manager import BlockManager
from engine.checkpoint_ref import CheckpointRef
from engine.cpu_threads import CpuThreads
from engine.decode_graphs import DecodeGraphSpec
from engine.deepseek_v4.cache import HybridKVSpec
from engine.executor import Executor, LocalExecutor
from engine.gguf_cache import loadable
from engine.graph_capture import capture_decode_graphs
from engine.kv_budget import MemoryProfile, num_kv_blocks, pipeline_kv_blocks
from engine.kv_cache import KVCacheSpec
from engine.kv_layout import AnyKVSpec, block_manager_for, kv_spec
from engine.lora.manager import LoraManager
from engine.model_loader import eos_token_ids, load_config, load_model, weight_bytes
from engine.multimodal.encoder_cache import EncoderCache
from engine.multimodal.families import FAMILIES
from engine.parallel.stage_layers import stage_layer_ranges
from engine.scheduler import Scheduler
from engine.spec_decode.build import Drafter, build_speculator, fit_hybrid_drafter, load_drafter
from engine.spec_decode.speculator import Speculator
from npu_ops.platform import DeviceKind, Platform, current_platform

if TYPE_CHECKING:
    from engine.parallel.ray_executor import RayExecutor

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class EngineParts:
    """Everything an engine runs on (see `LLMEngine`'s attributes of the same names).

    Attributes:
        hf_config: the checkpoint's model config (a multimodal checkpoint's whole config: its
            language model's is `hf_config.get_text_config()`).
        dtype: the weights' and activations' dtype.
        device: where the model (rank 0's, under tensor parallel) lives.
        eos_token_ids: tokens that end a request.
        max_model_len: context length in tokens.
        threads: the CPU intra-op threads per step.
        executor: runs the steps, its KV cache allocated (and decode graphs captured).
        lora: the adapters (None: LoRA off).
        block_manager: the KV blocks of every sequence.
        scheduler: picks each step's batch.
        speculator: speculative decoding (None: off).
        kv_bytes_per_token: KV-cache bytes one token takes on a rank, all layers, as stored
            (an 8-bit `kv_cache_dtype` counts its codes and scales; `KVCacheSpec.bytes_per_token`).
    """

    hf_config: PretrainedConfig
    dtype: torch.dtype
    device: torch.device
    eos_token_ids: tuple[int, ...]
    max_model_len: int
    threads: CpuThreads
    executor: Executor
    lora: LoraManager | None
    block_manager: BlockManager
    scheduler: Scheduler
    speculator: Speculator | None
    kv_bytes_per_token: float


def resolve_dtype(name: str, platform: Platform) -> torch.dtype:
    """Map a config dtype name to torch; `auto` is the platform's preferred dtype."""
    if name == "auto":
        return platform.preferred_dtype()
    return getattr(torch, name)


def build_engine(
    checkpoint: str,
    config: EngineConfig,
    tensor_parallel_size: int = 1,
    expert_parallel: bool = False,
) -> EngineParts:
    """Load the model and build the engine's parts (arguments and errors: see `LLMEngine`).

    Raises:
        ValueError: see `LLMEngine`.
        RuntimeError: the ranks' devices could not be had in time.
    """
    platform = current_platform()
    threads = CpuThreads(config, platform)
    ref = loadable(CheckpointRef.from_path(checkpoint))
    hf_config = load_config(ref)
    eos = eos_token_ids(ref, hf_config)
    dtype = resolve_dtype(config.dtype, platform)
    device = platform.device()
    text_config = hf_config.get_text_config()
    max_model_len = config.max_model_len or int(
        getattr(text_config, "max_position_embeddings", 2048)
    )
    spec = kv_spec(text_config, dtype, tensor_parallel_size, config)
    graphs = _graph_spec(config, spec.hybrid, max_model_len)
    _check_parallel(config, tensor_parallel_size, spec)
    _check_multimodal(config, hf_config, tensor_parallel_size)
    drafter = None
    executor: Executor
    stage_layers: list[int] | None = None  # decoder layers per pipeline stage
    if config.pipeline_parallel_size > 1:  # a bad partition fails before any rank starts
        ranges = stage_layer_ranges(
            int(text_config.num_hidden_layers),
            config.pipeline_parallel_size,
            config.pipeline_layer_partition,
        )
        stage_layers = [len(r) for r in ranges]
    ranks = None
    if tensor_parallel_size * config.pipeline_parallel_size == 1:
        executor, spec, drafter = _local_executor(ref, config, hf_config, spec, dtype, graphs)
    else:
        from engine.parallel.ray_executor import RayExecutor  # needs Ray only when used

        executor = ranks = RayExecutor(
            checkpoint,
            tensor_parallel_size,
            expert_parallel,
            spec,
            config.block_size,
            dtype,
            config.rank_num_cpus,
            config.placement_timeout_s,
            graphs,
            lora=config.lora is not None,
            strategy=config.tensor_parallel_placement,
            pipeline_stages=config.pipeline_parallel_size,
            layer_partition=config.pipeline_layer_partition,
        )
    try:
        lora = LoraManager(config.lora, executor, dtype) if config.lora is not None else None
        if ranks is not None and stage_layers is not None:
            num_blocks = _stage_blocks(ranks, config, spec, stage_layers, max_model_len)
        else:
            num_blocks = _num_blocks(executor, config, spec, max_model_len, drafter, platform)
        executor.allocate_kv(num_blocks)
        if graphs is not None:
            capture_decode_graphs(executor, graphs, threads.for_step)
    except Exception:
        executor.shutdown()
        raise
    block_manager = block_manager_for(spec, num_blocks, config)
    scheduler = Scheduler(
        block_manager,
        config.max_num_seqs,
        config.max_num_batched_tokens,
        config.lora.max_loras if config.lora is not None else None,
    )
    speculator = None
    if config.speculative is not None:
        speculator = build_speculator(
            config.speculative, max_model_len, block_manager, drafter, device
        )
    return EngineParts(
        hf_config=hf_config,
        dtype=dtype,
        device=device,
        eos_token_ids=eos,
        max_model_len=max_model_len,
        threads=threads,
        executor=executor,
        lora=lora,
        block_manager=block_manager,
        scheduler=scheduler,
        speculator=speculator,
        kv_bytes_per_token=spec.bytes_per_token(),
    )


def _graph_spec(config: EngineConfig, hybrid: bool, max_model_len: int) -> DecodeGraphSpec | None:
    """The decode graphs to capture (None: every step eager)."""
    if config.enforce_eager:
        return None
    if hybrid:
        logger.info("DeepSeek-V4's hybrid cache runs eager: no decode graphs")
        return None
    return DecodeGraphSpec(
        tuple(config.graph_batch_sizes),
        -(-max_model_len // config.block_size),
        config.compile_cache_dir,
    )


def _check_parallel(config: EngineConfig, tensor_parallel_size: int, spec: AnyKVSpec) -> None:
    """Refuse what runs on one rank only, and what pipeline parallel does not run.

    Raises:
        ValueError: a drafting model (`draft`, `mtp`), or weight or output quantisation, asked
            for with tensor or pipeline parallel; DeepSeek-V4's hybrid cache with pipeline
            parallel.
    """
    if config.pipeline_parallel_size > 1 and isinstance(spec, HybridKVSpec):
        raise ValueError(
            "pipeline_parallel_size > 1 does not run DeepSeek-V4 (its hybrid KV cache and "
            "hyper-connections are not split by stage); use tensor_parallel_size instead"
        )
    if tensor_parallel_size * config.pipeline_parallel_size == 1:
        return
    method = config.speculative.method if config.speculative is not None else None
    if method in ("draft", "mtp"):
        raise ValueError(
            f"speculative method {method!r} runs with tensor_parallel_size 1 only "
            "(its drafting model runs in the engine's process); use method: ngram"
        )
    if config.weight_quantization != "none" or config.output_quantization != "none":
        raise ValueError(
            "weight_quantization and output_quantization run with tensor_parallel_size 1 and "
            "pipeline_parallel_size 1 only"
        )


def _check_multimodal(
    config: EngineConfig, hf_config: PretrainedConfig, tensor_parallel_size: int
) -> None:
    """Refuse, for an image or audio model (`engine.multimodal.families`), what its steps do
    not run: its encoder and its embeddings-with-media inputs run in one process, eager, on the
    base model, and M-RoPE positions are not given to drafting models.

    Raises:
        ValueError: naming the setting: tensor or pipeline parallel, speculative decoding,
            LoRA, or decode graphs (`enforce_eager: false`).
    """
    model_type = str(getattr(hf_config, "model_type", ""))
    if model_type not in FAMILIES:
        return
    refused = {
        "tensor_parallel_size > 1 (use 1)": tensor_parallel_size > 1,
        "pipeline_parallel_size > 1 (use 1)": config.pipeline_parallel_size > 1,
        "speculative (remove it)": config.speculative is not None,
        "lora (remove it)": config.lora is not None,
        "enforce_eager: false (use true)": not config.enforce_eager,
    }
    named = [name for name, on in refused.items() if on]
    if named:
        raise ValueError(
            f"{model_type} (an image or audio model) runs on one rank, eager, without "
            f"speculative decoding or LoRA; its engine config sets {', '.join(named)}"
        )


def _local_executor(
    ref: CheckpointRef,
    config: EngineConfig,
    hf_config: PretrainedConfig,
    spec: AnyKVSpec,
    dtype: torch.dtype,
    graphs: DecodeGraphSpec | None,
) -> tuple[LocalExecutor, AnyKVSpec, Drafter | None]:
    """The model in this process, and its drafting model if speculation has one (a DeepSeek-V4
    MTP layer widens the target's hybrid spec: it shares its sliding-window pool).

    Returns:
        The executor, the target's KV spec and the drafter (None: none).
    """
    device = current_platform().device()
    method = config.speculative.method if config.speculative is not None else None
    model = load_model(
        ref,
        dtype,
        device,
        config.weight_quantization,
        config.output_quantization,
        config.batch_invariant,
        activation_quantization=config.activation_quantization,
        mtp=method == "mtp",
    )
    drafter = None
    if config.speculative is not None:
        drafter = load_drafter(config.speculative, model, hf_config, dtype, device)
        if drafter is not None and isinstance(spec, HybridKVSpec):
            spec, drafter = fit_hybrid_drafter(
                spec, drafter, config.max_num_seqs, config.max_num_batched_tokens, config.block_size
            )
    lora = config.lora is not None
    encoder_cache = None
    if hf_config.model_type in FAMILIES:
        encoder_cache = EncoderCache(config.encoder_cache_items, config.max_num_seqs)
    executor = LocalExecutor(
        model,
        spec,
        config.block_size,
        device,
        graphs,
        lora=lora,
        encoder_cache=encoder_cache,
        lora_batch_invariant=config.batch_invariant,
    )
    return executor, spec, drafter


def _stage_blocks(
    executor: RayExecutor,
    config: EngineConfig,
    spec: AnyKVSpec,
    stage_layers: list[int],
    max_model_len: int,
) -> int:
    """The KV blocks of every pipeline stage: the fewest that any stage holds, each stage sized
    for its own layers (`engine.kv_budget.pipeline_kv_blocks`), from a profiled forward pass on
    an accelerator unless `num_kv_blocks` is set."""
    assert isinstance(spec, KVCacheSpec), "pipeline stages hold one KV kind"
    profiles: list[MemoryProfile | None] = [None] * len(stage_layers)
    if current_platform().kind is not DeviceKind.CPU and config.num_kv_blocks is None:
        profiles = list(executor.stage_profiles(config.max_num_batched_tokens))
    return pipeline_kv_blocks(config, spec, stage_layers, max_model_len, profiles)


def _num_blocks(
    executor: Executor,
    config: EngineConfig,
    spec: AnyKVSpec,
    max_model_len: int,
    drafter: Drafter | None,
    platform: Platform,
) -> int:
    """The KV blocks per rank: measured from a profiled forward pass on an accelerator, unless
    `num_kv_blocks` is set (`engine.kv_budget.num_kv_blocks`)."""
    profile = None
    if platform.kind is not DeviceKind.CPU and config.num_kv_blocks is None:
        profile = executor.profile(config.max_num_batched_tokens)
    if profile is not None and drafter is not None:
        extra = weight_bytes(drafter.model) if not drafter.mtp else 0  # MTP: in the model
        profile = replace(profile, weights=profile.weights + extra)
    return num_kv_blocks(config, spec, max_model_len, profile, drafter.spec if drafter else None)
