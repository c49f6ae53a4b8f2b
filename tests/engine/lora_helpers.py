"""Helpers for LoRA engine tests: engines with adapters, peft's reference tokens."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from engine_helpers import greedy, run_to_completion

from configs.engine_config import EngineConfig
from configs.lora_config import LoraConfig
from engine.llm_engine import LLMEngine


def lora_engine(
    checkpoint: str | Path,
    adapters: dict[str, Path],
    lora: dict[str, Any] | None = None,
    tensor_parallel_size: int = 1,
    **fields: Any,
) -> LLMEngine:
    """A float32 engine serving `adapters` (name -> directory) with LoRA settings `lora` and
    `EngineConfig` fields `fields`."""
    modules = [{"name": n, "path": str(p)} for n, p in adapters.items()]
    config = {"dtype": "float32", "max_model_len": 256, "num_kv_blocks": 128, "block_size": 4}
    config.update(fields)
    settings: dict[str, Any] = {"max_lora_rank": 64, "max_loras": max(1, len(adapters))}
    settings.update(lora or {})
    lora_config = LoraConfig(lora_modules=modules, **settings)
    return LLMEngine(
        str(checkpoint), EngineConfig(**config, lora=lora_config), tensor_parallel_size
    )


def run_one(engine: LLMEngine, prompt: list[int], lora: str | None, n: int) -> list[int]:
    """Greedy tokens of one request run alone."""
    engine.add_request("alone", prompt, greedy(n, lora=lora))
    return run_to_completion(engine)["alone"]


def peft_greedy(
    base: torch.nn.Module, adapter: Path | None, prompt: list[int], n: int
) -> tuple[list[int], torch.nn.Module]:
    """peft's greedy tokens for `prompt` (transformers `generate` on `PeftModel`, fp32), and the
    model that made them (call `.unload()` on it when done if it is a `PeftModel`)."""
    from peft import PeftModel

    model = base if adapter is None else PeftModel.from_pretrained(base, str(adapter)).eval()
    ids = torch.tensor([prompt])
    with torch.no_grad():
        out = model.generate(
            input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=n, do_sample=False
        )
    return out[0, len(prompt) :].tolist(), model
