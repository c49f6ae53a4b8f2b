"""What planning needs to know about a model: parameters, KV geometry, context length.

Shapes come from the checkpoint's own config (`config.json` of a local Hugging Face directory,
or a local GGUF file's metadata) when `source` points at one on this machine; otherwise from the
deployment's `shape` section. The parameter count is read from the checkpoint's tensor headers
(safetensors headers or GGUF tensor info, nothing is loaded) and falls back to
`shape.num_parameters`.

The KV geometry is the engine's own (`engine.kv_cache.KVCacheSpec`: for DeepSeek MLA the
latent, `kv_lora_rank + qk_rope_head_dim` per token and layer on every rank) and checkpoints
resolve as the engine loads them (`engine.model_loader`), which is why planning lives in
`engine/`, beside the runtime KV budget (`engine.kv_budget`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import PretrainedConfig

from configs.model_config import ModelDeploymentConfig
from engine.kv_cache import KVCacheSpec
from engine.model_loader import CheckpointRef, load_config

logger = logging.getLogger(__name__)


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

    def kv_spec(self, dtype: torch.dtype, tensor_parallel_size: int = 1) -> KVCacheSpec:
        """KV geometry of one rank: K/V heads split over ranks (at least one head per rank);
        DeepSeek MLA's latent whole on every rank."""
        if self.kv_lora_rank is not None and self.qk_rope_head_dim is not None:
            return KVCacheSpec.mla(self.num_layers, self.kv_lora_rank, self.qk_rope_head_dim, dtype)
        heads = max(1, self.num_kv_heads // tensor_parallel_size)
        return KVCacheSpec(self.num_layers, heads, self.k_head_dim, self.v_head_dim, dtype)


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


def model_facts(model: ModelDeploymentConfig) -> ModelFacts:
    """Planning facts for `model` (see the module docstring for the sources).

    Raises:
        ValueError: the checkpoint is not on this machine and the deployment has no `shape`,
            the local checkpoint's `model_type` is one the engine does not serve (the engine's
            own start-up message, `engine.architectures`: no KV figures for a cache it would
            not build), or the parameter count is unknown.
    """
    ref = local_checkpoint(model)
    if ref is not None:
        config = load_config(ref)
        spec = KVCacheSpec.from_config(config, torch.float32)
        heads, k_dim, v_dim = spec.num_kv_heads, spec.k_head_dim, spec.v_head_dim
        latent: tuple[int | None, int | None] = (None, None)
        if spec.latent:  # attention ops see the expanded heads; the cache holds the latent
            heads, v_dim = config.num_attention_heads, config.v_head_dim
            k_dim = config.qk_nope_head_dim + config.qk_rope_head_dim
            latent = (spec.k_head_dim, spec.v_head_dim)
        params = count_parameters(ref)
        if params is None and model.shape is not None:
            params = model.shape.num_parameters
        if params is None:
            raise ValueError(
                f"{model.model_id}: no safetensors/GGUF headers in {ref.directory} and no "
                "shape.num_parameters in the config"
            )
        max_len = model.engine.max_model_len or getattr(config, "max_position_embeddings", None)
        if max_len is None and model.shape is not None:
            max_len = model.shape.max_model_len
        if max_len is None:
            raise ValueError(f"{model.model_id}: set engine.max_model_len (context length)")
        return ModelFacts(
            params,
            spec.num_layers,
            heads,
            k_dim,
            v_dim,
            int(max_len),
            f"checkpoint config at {ref.directory}",
            config,
            *latent,
        )
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
