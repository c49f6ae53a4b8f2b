"""Model shape figures for memory planning when the checkpoint is not on this machine."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator


class ModelShape(BaseModel):
    """What the memory planner needs to know about a model (from its `config.json`)."""

    model_config = ConfigDict(extra="forbid")

    num_parameters: int = Field(gt=0, description="Total parameters (all experts included).")
    num_layers: int = Field(gt=0, description="Decoder layers (`num_hidden_layers`).")
    num_kv_heads: int = Field(
        gt=0,
        description="K/V heads per layer (`num_key_value_heads`); for DeepSeek MLA the query "
        "heads (`num_attention_heads`), as its attention expands the latent per head.",
    )
    k_head_dim: int = Field(
        gt=0,
        description="K head size in elements (DeepSeek MLA: qk_nope_head_dim + qk_rope_head_dim).",
    )
    v_head_dim: int = Field(gt=0, description="V head size in elements.")
    max_model_len: int = Field(gt=0, description="Context length in tokens.")
    kv_lora_rank: int | None = Field(
        default=None,
        gt=0,
        description="DeepSeek MLA only (`kv_lora_rank`, with `qk_rope_head_dim`): the KV cache "
        "holds the latent, kv_lora_rank + qk_rope_head_dim elements per token and layer, the "
        "same on every tensor-parallel rank (num_kv_heads, k_head_dim and v_head_dim then "
        "size the attention ops only).",
    )
    qk_rope_head_dim: int | None = Field(
        default=None,
        gt=0,
        description="DeepSeek MLA only (`qk_rope_head_dim`): the rotary key part cached per token "
        "and layer beside the latent; set together with kv_lora_rank.",
    )

    @model_validator(mode="after")
    def _mla_fields_together(self) -> ModelShape:
        if (self.kv_lora_rank is None) != (self.qk_rope_head_dim is None):
            raise ValueError(
                "shape: set kv_lora_rank and qk_rope_head_dim together (DeepSeek MLA, from "
                "config.json), or neither"
            )
        return self
