"""What planning needs to know about a model: parameters, KV geometry, context length.

Shapes come from, in this order:

1. the checkpoint's own config (`config.json` of a local Hugging Face directory, or a local GGUF
   file's metadata) when `source` points at one on this machine; the parameter count is read
   from the checkpoint's tensor headers (safetensors headers or GGUF tensor info, nothing is
   loaded) and falls back to `shape.num_parameters`;
2. a stored copy of the config when `source.path` names a hub checkpoint the planner knows
   (`operate.planning.hub_configs`: DeepSeek-V4-Flash W8A8); parameters and weight bytes then come
   from a meta-device model sharded as the engine shards it (`operate.planning.weights`);
3. the deployment's `shape` section.

The KV geometry is the engine's own (`engine.kv_layout.kv_spec` of the config: one
`engine.kv_cache.KVCacheSpec`, for DeepSeek MLA the latent, `kv_lora_rank + qk_rope_head_dim` per
token and layer on every rank; DeepSeek-V4's `HybridKVSpec` with its sliding-window pool sized for
the deployment's engine settings) and checkpoints resolve as the engine loads them
(`engine.model_loader`): planning asks the engine rather than restating it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import PretrainedConfig

from configs.engine_config import EngineConfig
from configs.model_config import ModelDeploymentConfig
from engine.checkpoint_ref import CheckpointRef
from engine.deepseek_v4.cache import HybridKVSpec
from engine.kv_cache import KVCacheSpec
from engine.kv_layout import AnyKVSpec
from engine.model_loader import load_config
from npu_ops.platform import platform_for
from operate.planning.hub_configs import hub_checkpoint
from operate.planning.weights import WeightBytes, fp8_checkpoint_weight_bytes, hub_weight_bytes

logger = logging.getLogger(__name__)
_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass(frozen=True)
class ModelFacts:
    """Planning facts of one model.

    Attributes:
        num_parameters: total parameters (every expert included).
        num_layers: decoder layers.
        num_kv_heads: K/V heads per layer (for DeepSeek MLA the query heads, its attention
            expanded per head: what the attention ops are sized by).
        k_head_dim: K head size in elements.
        v_head_dim: V head size in elements.
        max_model_len: context length in tokens (engine setting, else model's).
        shape_source: where the shapes came from, for the report.
        hf_config: the checkpoint's config when it was read, else None.
        kv_lora_rank: DeepSeek MLA's latent size per token and layer; None for other models.
        qk_rope_head_dim: DeepSeek MLA's cached rotary key size; None for other models.
        weights: weight bytes of the deployment (whole and per rank) when the model's own
            layers gave them (a stored hub config, `operate.planning.weights`); None: planned as
            `num_parameters` in the engine's dtype, split evenly over the ranks.
    """

    num_parameters: int
    num_layers: int
    num_kv_heads: int
    k_head_dim: int
    v_head_dim: int
    max_model_len: int
    shape_source: str
    hf_config: PretrainedConfig | None = None
    kv_lora_rank: int | None = None
    qk_rope_head_dim: int | None = None
    weights: WeightBytes | None = None

    def kv_spec(
        self,
        dtype: torch.dtype,
        tensor_parallel_size: int = 1,
        engine: EngineConfig | None = None,
    ) -> AnyKVSpec:
        """KV geometry of one rank. With a config: the engine's own (`engine.kv_layout.kv_spec`;
        DeepSeek-V4's hybrid kinds with the sliding-window pool sized for `engine`, default
        settings if None). From a `shape`: K/V heads split over ranks (at least one head per
        rank); DeepSeek MLA's latent whole on every rank.

        Raises:
            ValueError: a DeepSeek-V4 `block_size` that is not a multiple of its compress ratios.
        """
        if self.hf_config is not None:
            from engine.kv_layout import kv_spec

            return kv_spec(self.hf_config, dtype, tensor_parallel_size, engine or EngineConfig())
        if self.kv_lora_rank is not None and self.qk_rope_head_dim is not None:
            return KVCacheSpec.mla(self.num_layers, self.kv_lora_rank, self.qk_rope_head_dim, dtype)
        heads = max(1, self.num_kv_heads // tensor_parallel_size)
        return KVCacheSpec(self.num_layers, heads, self.k_head_dim, self.v_head_dim, dtype)

    def kv_specs(
        self, dtype: torch.dtype, tensor_parallel_size: int, engine: EngineConfig
    ) -> tuple[AnyKVSpec, AnyKVSpec | None]:
        """The target's KV geometry (`kv_spec`) and its speculative drafting model's, as the
        engine builds them at start-up (`engine.spec_decode.draft_kv`): a DeepSeek-V4 MTP
        layer's sliding kinds widen the target's sliding-window pool (`fit_hybrid_kv`).

        Raises:
            ValueError: as `kv_spec`, or the drafting model's geometry cannot be read
                (`draft_kv_spec`).
        """
        from engine.spec_decode.draft_kv import draft_kv_spec, fit_hybrid_kv

        spec = self.kv_spec(dtype, tensor_parallel_size, engine)
        if engine.speculative is None:
            return spec, None
        draft = draft_kv_spec(engine.speculative, self.hf_config, dtype)
        if isinstance(spec, HybridKVSpec) and isinstance(draft, HybridKVSpec):
            return fit_hybrid_kv(
                spec, draft, engine.max_num_seqs, engine.max_num_batched_tokens, engine.block_size
            )
        return spec, draft


def local_checkpoint(model: ModelDeploymentConfig) -> CheckpointRef | None:
    """The checkpoint on this machine, or None when `source` points elsewhere."""
    try:
        return CheckpointRef.from_path(model.source.resolve())
    except ValueError:
        return None


def count_parameters(ref: CheckpointRef) -> int | None:
    """Parameters from tensor headers (safetensors or GGUF), without loading any weights."""
    if ref.gguf_file is not None:
        from gguf import GGUFReader

        reader = GGUFReader(ref.directory / ref.gguf_file)
        return int(sum(int(t.n_elements) for t in reader.tensors))
    files = sorted(Path(ref.directory).glob("*.safetensors"))
    if not files:
        return None
    from safetensors import safe_open

    total = 0
    for file in files:
        with safe_open(str(file), framework="pt") as f:
            names = f.keys()
            for name in names:
                numel = 1
                for dim in f.get_slice(name).get_shape():
                    numel *= int(dim)
                total += numel
    return total


def plan_dtype(name: str, cpu: bool = False) -> torch.dtype:
    """Weights/KV dtype of an engine `dtype` setting; `auto` is bfloat16 on an NPU and, for a
    CPU replica (`cpu`), what the engine picks on this machine's CPU (`preferred_dtype`)."""
    if name == "auto" and cpu:
        return platform_for("cpu").preferred_dtype()
    return _DTYPES.get(name, torch.bfloat16)


def _from_config(
    model: ModelDeploymentConfig,
    config: PretrainedConfig,
    params: int,
    source: str,
    weights: WeightBytes | None = None,
) -> ModelFacts:
    """Facts of a model whose config was read (a local checkpoint or a stored hub config)."""
    text = config.get_text_config()  # a vision/audio model's language model holds the KV
    spec = KVCacheSpec.from_config(text, torch.float32)
    heads, k_dim, v_dim = spec.num_kv_heads, spec.k_head_dim, spec.v_head_dim
    latent: tuple[int | None, int | None] = (None, None)
    if spec.latent:  # attention ops see the expanded heads; the cache holds the latent
        heads, v_dim = text.num_attention_heads, text.v_head_dim
        k_dim = text.qk_nope_head_dim + text.qk_rope_head_dim
        latent = (spec.k_head_dim, spec.v_head_dim)
    max_len = model.engine.max_model_len or getattr(text, "max_position_embeddings", None)
    if max_len is None and model.shape is not None:
        max_len = model.shape.max_model_len
    if max_len is None:
        raise ValueError(f"{model.model_id}: set engine.max_model_len (context length)")
    return ModelFacts(
        params, spec.num_layers, heads, k_dim, v_dim, int(max_len), source, config, *latent, weights
    )


def model_facts(model: ModelDeploymentConfig) -> ModelFacts:
    """Planning facts for `model` (see the module docstring for the sources).

    Raises:
        ValueError: the checkpoint is not on this machine and the deployment has no `shape`,
            the local checkpoint's `model_type` is one the engine does not serve (the engine's
            own start-up message, `engine.architectures`: no KV figures for a cache it would
            not build), the parameter count is unknown, or a stored hub model cannot be split
            over `tensor_parallel_size` ranks.
    """
    ref = local_checkpoint(model)
    if ref is not None:
        config = load_config(ref)
        params = count_parameters(ref)
        if params is None and model.shape is not None:
            params = model.shape.num_parameters
        if params is None:
            raise ValueError(
                f"{model.model_id}: no safetensors/GGUF headers in {ref.directory} and no "
                "shape.num_parameters in the config"
            )
        if getattr(config, "quantization_config", None) is not None:  # FP8 (load_config checked)
            dtype = plan_dtype(model.engine.dtype)
            tp = model.tensor_parallel_size
            weights = fp8_checkpoint_weight_bytes(ref.directory, dtype, tp)
            source = f"checkpoint config at {ref.directory}; FP8/MXFP4 codes at their stored bytes"
            return _from_config(model, config, weights.num_parameters, source, weights)
        return _from_config(model, config, params, f"checkpoint config at {ref.directory}")
    hub = hub_checkpoint(model.source.path) if model.source.path is not None else None
    if hub is not None:
        config = hub.load_config()
        dtype = plan_dtype(model.engine.dtype)
        weights = hub_weight_bytes(hub, dtype, model.tensor_parallel_size, model.expert_parallel)
        quant = "; W8A8: decoder-layer linear weights int8" if hub.weights == "w8a8" else ""
        source = f"the stored config of {hub.repo} (hub_configs/{hub.config_path.name}){quant}"
        return _from_config(model, config, weights.num_parameters, source, weights)
    if model.shape is None:
        raise ValueError(
            f"{model.model_id}: checkpoint {model.source.path or model.source.package!r} is not "
            "on this machine and the deployment has no `shape` section to plan from"
        )
    s = model.shape
    return ModelFacts(
        s.num_parameters,
        s.num_layers,
        s.num_kv_heads,
        s.k_head_dim,
        s.v_head_dim,
        model.engine.max_model_len or s.max_model_len,
        "`shape` in the config",
        kv_lora_rank=s.kv_lora_rank,
        qk_rope_head_dim=s.qk_rope_head_dim,
    )
