"""LoRA under tensor parallel: adapters sharded like their base linears (B's rows for
column-parallel layers, A's columns for row-parallel ones), so two ranks on gloo give the tokens
of one, for the base model and two adapters in one batch (Qwen2: separate q/k/v and gate/up;
Phi-3: fused `qkv_proj` and `gate_up_proj`)."""

from __future__ import annotations

from pathlib import Path

import pytest
from engine_helpers import greedy, run_to_completion
from lora_helpers import lora_engine

from fixtures.tiny_adapters import TinyLoraSpec, load_base, write_adapter
from fixtures.tiny_checkpoints import make_tiny_checkpoint

PROMPTS = [[5, 6, 7, 8, 9, 10, 11], [20, 21, 22], [100, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13]]
TARGETS = {
    "qwen2": (("q_proj", "k_proj", "v_proj", "o_proj"), ("gate_proj", "up_proj", "down_proj")),
    "phi3": (("qkv_proj", "o_proj"), ("gate_up_proj", "down_proj")),
}


def _generate(path: Path, adapters: dict[str, Path], tp: int) -> dict[str, list[int]]:
    engine = lora_engine(
        path,
        adapters,
        tensor_parallel_size=tp,
        block_size=8,
        max_num_batched_tokens=16,
        rank_num_cpus=0.25,
    )
    try:
        for i, p in enumerate(PROMPTS):
            for name in [None, *adapters]:
                engine.add_request(f"{name}/{i}", p, greedy(10, lora=name))
        return run_to_completion(engine)
    finally:
        engine.shutdown()


@pytest.mark.parametrize("family", ["qwen2", "phi3"])
def test_lora_two_ranks_equal_one(ray_session: None, tmp_path: Path, family: str) -> None:
    path = make_tiny_checkpoint(family, tmp_path / family, real_vocab=False)
    base = load_base(str(path))
    attention, mlp = TARGETS[family]
    specs = [
        TinyLoraSpec("all", rank=8, target_modules=attention + mlp, std=0.5, seed=1),
        TinyLoraSpec("attn", rank=4, target_modules=attention, use_rslora=True, std=0.5, seed=2),
    ]
    adapters = {s.name: write_adapter(base, s, tmp_path / "loras") for s in specs}
    one = _generate(path, adapters, 1)
    assert one["all/0"] != one["None/0"] and one["attn/0"] != one["None/0"]
    assert _generate(path, adapters, 2) == one
