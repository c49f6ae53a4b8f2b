"""LoRA adapters in the engine give peft's own greedy tokens (fp32, dense base), alone and
mixed with other adapters and the base model in one continuous batch.

Adapters are written by peft with random non-zero B (`fixtures.tiny_adapters`): on SmolLM2
(the GGUF loaded dense) rank 8 on every linear, rank 64 rsLoRA on attention only, and rank 16
on the MLP with `rank_pattern`/`alpha_pattern`; on a tiny Qwen3 rank 8 everywhere and rank 4
rsLoRA on q/v. Divergence is accepted only at a near-tie of peft's logits (top-2 < 1e-4).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from engine_helpers import assert_same_until_tie, greedy, run_to_completion, step
from lora_helpers import lora_engine, peft_greedy, run_one

from fixtures.tiny_adapters import TinyLoraSpec, load_base, write_adapter
from fixtures.tiny_checkpoints import SMALL_VOCAB, make_tiny_checkpoint

ATTENTION = ("q_proj", "k_proj", "v_proj", "o_proj")
MLP = ("gate_proj", "up_proj", "down_proj")
SMOLLM2_SPECS = [
    TinyLoraSpec("r8-all", rank=8, seed=1),
    TinyLoraSpec(
        "r64-attn-rs", rank=64, alpha=32, target_modules=ATTENTION, use_rslora=True, seed=2
    ),
    TinyLoraSpec(
        "r16-mlp-pattern",
        rank=16,
        target_modules=MLP,
        rank_pattern={"down_proj": 4},
        alpha_pattern={r"layers\.1\d\.mlp\.up_proj": 64},
        seed=3,
    ),
]
TINY_SPECS = [
    TinyLoraSpec("a", rank=8, std=0.5, seed=4),
    TinyLoraSpec(
        "b", rank=4, target_modules=("q_proj", "v_proj"), use_rslora=True, std=0.5, seed=5
    ),
]


def _check_against_peft(
    checkpoint: str | Path,
    adapters: dict[str, Path],
    base: torch.nn.Module,
    prompts: list[list[int]],
    n: int,
    alone: bool = True,
) -> None:
    """Batch of every adapter (and the base) per prompt == peft (and == each alone)."""
    engine = lora_engine(checkpoint, adapters, max_num_batched_tokens=64)
    names: list[str | None] = [None, *adapters]
    batch: dict[str, list[int]] = {}
    for i, prompt in enumerate(prompts):
        for name in names:
            engine.add_request(f"{name}/{i}", prompt, greedy(n, lora=name))
        step(engine, batch)  # later requests join a running batch
    run_to_completion(engine, batch)
    for name in names:
        for i, prompt in enumerate(prompts):
            if alone:
                assert run_one(engine, prompt, name, n) == batch[f"{name}/{i}"], (name, i)
            ref, model = peft_greedy(base, adapters.get(name) if name else None, prompt, n)
            assert_same_until_tie(batch[f"{name}/{i}"], ref, prompt, model)
            if name is not None:
                assert batch[f"{name}/{i}"] != batch[f"None/{i}"], f"{name} changes nothing"
                model.unload()
    assert engine.block_manager.num_free_blocks == engine.block_manager.num_blocks


class SmolLM2Loras:
    """SmolLM2 as transformers loads it, its adapters, and two chat prompts."""

    def __init__(self, path: str, tokenizer: Any, out: Path) -> None:
        self.path = path
        self.base = load_base(path)
        self.adapters = {s.name: write_adapter(self.base, s, out) for s in SMOLLM2_SPECS}
        self.prompts = [
            tokenizer.apply_chat_template(
                [{"role": "user", "content": p}], add_generation_prompt=True, tokenize=True
            )["input_ids"]
            for p in ("Name a color.", "Write a haiku about the sea.")
        ]


@pytest.fixture(scope="module")
def smollm2(smollm2_path: str, tokenizer, tmp_path_factory: pytest.TempPathFactory) -> SmolLM2Loras:
    return SmolLM2Loras(smollm2_path, tokenizer, tmp_path_factory.mktemp("smollm2-loras"))


def test_smollm2_adapters_equal_peft(smollm2: SmolLM2Loras) -> None:
    # (alone == in a batch: checked on the tiny model, cheaper)
    _check_against_peft(
        smollm2.path, smollm2.adapters, smollm2.base, smollm2.prompts, 12, alone=False
    )


def test_smollm2_int4_base_with_adapter_equals_peft(smollm2: SmolLM2Loras) -> None:
    # the GGUF is Q4_1, which int4 group-32 weights hold exactly (test_greedy_equals_
    # transformers), so peft on transformers' fp32 model is the reference here too
    adapter = smollm2.adapters["r8-all"]
    engine = lora_engine(smollm2.path, {"r8-all": adapter}, weight_quantization="int4")
    prompt = smollm2.prompts[1]
    ours = run_one(engine, prompt, "r8-all", 12)
    ref, model = peft_greedy(smollm2.base, adapter, prompt, 12)
    assert_same_until_tie(ours, ref, prompt, model)
    model.unload()


def test_tiny_qwen3_adapters_equal_peft(tmp_path_factory: pytest.TempPathFactory) -> None:
    path = make_tiny_checkpoint("qwen3", tmp_path_factory.mktemp("qwen3"), real_vocab=False)
    base = load_base(str(path))
    adapters = {s.name: write_adapter(base, s, path.parent / "loras") for s in TINY_SPECS}
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(3, SMALL_VOCAB, (k,), generator=g).tolist() for k in (5, 13, 22)]
    _check_against_peft(path, adapters, base, prompts, 10)
