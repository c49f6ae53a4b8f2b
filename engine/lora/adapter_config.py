"""A PEFT adapter's `adapter_config.json`: what the engine serves and what it refuses.

Served: plain LoRA and rsLoRA on linear layers, with per-module `rank_pattern` and
`alpha_pattern`. Refused (a `ValueError` naming the option; the HTTP side answers 4xx): DoRA,
`modules_to_save`, adapters on embeddings or the LM head, adapters that add tokens, LoRA biases,
and a rank above `max_lora_rank`.

Scaling (per module, with its `r` and `lora_alpha` after the patterns): `alpha / r` for LoRA
(Hu et al. 2021, "LoRA: Low-Rank Adaptation of Large Language Models", section 4.1) and
`alpha / sqrt(r)` for rsLoRA (Kalajdzievski 2023, "A Rank Stabilization Scaling Factor for
Fine-Tuning with LoRA", theorem 3.2), as peft's `LoraLayer.update_layer` computes it.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CONFIG_FILE = "adapter_config.json"
EMBEDDING_OR_HEAD = ("embed_tokens", "lm_head", "wte", "word_embeddings", "embed_out")
"""Module names of input embeddings and output heads (Llama/Qwen, GPT-2, BLOOM, GPT-NeoX)."""

_REFUSED_TRUE = {
    "use_dora": "DoRA (`use_dora`) is not supported",
    "lora_bias": "LoRA biases (`lora_bias`) are not supported",
    "fan_in_fan_out": "`fan_in_fan_out` (Conv1D base layers) is not supported",
    "use_qalora": "QA-LoRA (`use_qalora`) is not supported",
}
_REFUSED_NONEMPTY = {
    "modules_to_save": "`modules_to_save` (fully trained extra modules) is not supported",
    "trainable_token_indices": "adapters that add or train tokens (`trainable_token_indices`) "
    "are not supported",
    "target_parameters": "`target_parameters` (LoRA on raw parameters) is not supported",
    "layer_replication": "`layer_replication` is not supported",
    "alora_invocation_tokens": "activated LoRA (`alora_invocation_tokens`) is not supported",
}


def pattern_key(patterns: Mapping[str, Any], module: str) -> str | None:
    """The first key of `patterns` matching `module` as peft's `get_pattern_key` matches
    (`re.match(rf"(.*\\.)?({key})$", module)`), or None."""
    for key in patterns:
        if re.match(rf"(.*\.)?({key})$", module):
            return key
    return None


@dataclass(frozen=True)
class AdapterConfig:
    """The options of one adapter that the engine reads.

    Attributes:
        r: default rank.
        lora_alpha: default alpha.
        use_rslora: scale by `alpha / sqrt(r)` instead of `alpha / r`.
        rank_pattern: module-name regex -> rank.
        alpha_pattern: module-name regex -> alpha.
    """

    r: int
    lora_alpha: float
    use_rslora: bool
    rank_pattern: Mapping[str, int]
    alpha_pattern: Mapping[str, float]

    def rank(self, module: str) -> int:
        """The rank peft gives `module` (e.g. `model.layers.0.self_attn.q_proj`)."""
        key = pattern_key(self.rank_pattern, module)
        return self.r if key is None else int(self.rank_pattern[key])

    def scaling(self, module: str) -> float:
        """The factor on `B @ A` for `module` (module docstring: LoRA vs rsLoRA)."""
        key = pattern_key(self.alpha_pattern, module)
        alpha = self.lora_alpha if key is None else float(self.alpha_pattern[key])
        r = self.rank(module)
        return alpha / math.sqrt(r) if self.use_rslora else alpha / r

    def max_rank(self) -> int:
        """The largest rank any module may have (`r` and every `rank_pattern` value)."""
        return max([self.r, *self.rank_pattern.values()])


def read_adapter_config(path: Path, max_lora_rank: int, what: str) -> AdapterConfig:
    """Read and check `path / adapter_config.json`.

    Args:
        path: the adapter directory.
        max_lora_rank: the largest rank served.
        what: names the adapter in errors (e.g. `LoRA adapter 'finance' (/adapters/finance)`).

    Raises:
        ValueError: the file is missing or not JSON, the adapter is not a LoRA adapter, uses a
            refused option (the message names it), targets embeddings or the LM head, or has a
            rank above `max_lora_rank`.
    """
    file = path / CONFIG_FILE
    if file.exists() and not file.is_file():  # a FIFO or device would block or never end
        raise ValueError(f"{what}: {file} is not a regular file")
    try:
        raw = json.loads(file.read_text())
    except FileNotFoundError as exc:
        raise ValueError(f"{what}: no {CONFIG_FILE} in {path}") from exc
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"{what}: cannot read {file}: {exc}") from exc
    if not isinstance(raw, dict):
        raise ValueError(f"{what}: {file} is not a JSON object")
    peft_type = raw.get("peft_type", "LORA")
    if peft_type != "LORA":
        raise ValueError(f"{what}: `peft_type` {peft_type!r} is not supported (only LORA)")
    for option, message in _REFUSED_TRUE.items():
        if raw.get(option):
            raise ValueError(f"{what}: {message}")
    for option, message in _REFUSED_NONEMPTY.items():
        if raw.get(option):
            raise ValueError(f"{what}: {message}")
    if raw.get("bias", "none") != "none":
        raise ValueError(f"{what}: `bias` {raw['bias']!r} is not supported (only 'none')")
    targets = raw.get("target_modules") or []
    targets = [targets] if isinstance(targets, str) else list(targets)
    on_embedding = [t for t in targets if any(e in t for e in EMBEDDING_OR_HEAD)]
    if on_embedding:
        raise ValueError(
            f"{what}: `target_modules` {on_embedding} are embeddings or the LM head; only linear "
            "layers of the decoder are supported"
        )
    try:
        config = AdapterConfig(
            r=int(raw.get("r", 8)),
            lora_alpha=float(raw.get("lora_alpha", 8)),
            use_rslora=bool(raw.get("use_rslora", False)),
            rank_pattern=dict(raw.get("rank_pattern") or {}),
            alpha_pattern=dict(raw.get("alpha_pattern") or {}),
        )
        scales = [config.lora_alpha, *map(float, config.alpha_pattern.values())]
        ranks = [config.r, *map(int, config.rank_pattern.values())]
    except (TypeError, ValueError) as exc:
        raise ValueError(
            f"{what}: {file}: `r`, `lora_alpha` or a pattern is not a number: {exc}"
        ) from None
    if not all(math.isfinite(a) for a in scales) or min(ranks) <= 0:
        raise ValueError(f"{what}: {file}: `lora_alpha` must be finite and `r` positive")
    if config.max_rank() > max_lora_rank:
        raise ValueError(
            f"{what}: rank {config.max_rank()} (`r` / `rank_pattern`) is above max_lora_rank "
            f"{max_lora_rank}; raise max_lora_rank or use a smaller adapter"
        )
    return config
