"""Model shape figures for memory planning when the checkpoint is not on this machine."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class ModelShape(BaseModel):
    """What the memory planner needs to know about a model (from its `config.json`)."""

    model_config = ConfigDict(extra="forbid")

    num_parameters: int = Field(gt=0, description="Total parameters (all experts included).")
    num_layers: int = Field(gt=0, description="Decoder layers (`num_hidden_layers`).")
    num_kv_heads: int = Field(gt=0, description="K/V heads per layer (`num_key_value_heads`).")
    k_head_dim: int = Field(gt=0, description="K head size in elements.")
    v_head_dim: int = Field(gt=0, description="V head size in elements.")
    max_model_len: int = Field(gt=0, description="Context length in tokens.")
