"""Speculative decoding settings (the `speculative` section of a model's `engine` settings).

Three ways to propose draft tokens (`engine.spec_decode`):

- `ngram`: prompt lookup, the tokens that followed an earlier occurrence of the sequence's last
  n-gram in its own prompt and output (vLLM's `ngram`); no extra model.
- `draft`: a smaller model with the same tokenizer (`model`), run by the same engine on its own
  KV cache, proposes greedily.
- `mtp`: the multi-token-prediction layer from the target checkpoint
  (`num_nextn_predict_layers`): DeepSeek-V3's (the layer after the last decoder layer, fed the
  target's final hidden states; vLLM's `deepseek_mtp`) or DeepSeek-V4's (`mtp.0.*`, fed the
  target's hyper-connection streams before its `hc_head`; `engine.spec_decode.mtp_v4`),
  proposes greedily.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from configs.model_source import ModelSource

SpeculativeMethod = Literal["ngram", "draft", "mtp"]


class SpeculativeConfig(BaseModel):
    """How a model replica speculates (see `engine.spec_decode`)."""

    model_config = ConfigDict(extra="forbid")

    method: SpeculativeMethod = Field(
        description="How draft tokens are proposed. `ngram`: prompt lookup (the tokens that "
        "followed the earliest earlier occurrence of the sequence's final n-gram, vLLM's "
        "`ngram`). `draft`: the greedy tokens of a smaller model with the same tokenizer "
        "(`model`), on its own KV cache. `mtp`: the greedy tokens of the checkpoint's own "
        "multi-token-prediction layer (DeepSeek-V3 or V4, `num_nextn_predict_layers` >= 1)."
    )
    num_speculative_tokens: int = Field(
        gt=0,
        le=16,
        description="Draft tokens proposed per step (k); one forward pass verifies k + 1 "
        "positions of a speculating sequence. `mtp` applies its layer k times (vLLM's reuse "
        "of the first MTP layer).",
    )
    model: ModelSource | None = Field(
        None,
        description="draft: the draft model's checkpoint (`path` or `package`, as a model's "
        "`source`); its vocabulary must not be larger than the target's. Only with `draft`.",
    )
    prompt_lookup_min: int = Field(2, ge=1, description="ngram: shortest n-gram matched (tokens).")
    prompt_lookup_max: int = Field(
        5,
        ge=1,
        description="ngram: longest n-gram matched (tokens); the longest n in "
        "[prompt_lookup_min, prompt_lookup_max] that matches wins, its earliest occurrence.",
    )
    min_acceptance_rate: float = Field(
        0.2,
        ge=0.0,
        le=1.0,
        description="A sequence stops speculating for good once the exponential moving "
        "average (weight 0.3 on the newest) of its accepted / proposed draft tokens falls "
        "below this after 4 verified drafts, so free generation never pays for draft tokens "
        "that keep being rejected. 0 never turns speculation off.",
    )

    @model_validator(mode="after")
    def _consistent(self) -> SpeculativeConfig:
        if self.prompt_lookup_min > self.prompt_lookup_max:
            raise ValueError(
                f"prompt_lookup_min ({self.prompt_lookup_min}) must be <= prompt_lookup_max "
                f"({self.prompt_lookup_max})"
            )
        if self.method == "draft" and self.model is None:
            raise ValueError("speculative method 'draft' needs `model` (the draft checkpoint)")
        if self.method != "draft" and self.model is not None:
            raise ValueError(
                f"speculative `model` is the draft checkpoint of method 'draft'; method "
                f"{self.method!r} takes none"
            )
        return self
