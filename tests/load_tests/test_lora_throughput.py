"""`load_tests.lora_throughput`'s measurement at toy sizes: a tiny Llama, two adapters, a few
tokens (the real run loads SmolLM2 int4, too slow for a unit test)."""

from __future__ import annotations

from pathlib import Path

from configs.engine_config import EngineConfig
from configs.lora_config import LoraConfig
from engine.llm_engine import LLMEngine
from fixtures.tiny_adapters import TinyLoraSpec, make_tiny_loras
from fixtures.tiny_checkpoints import make_tiny_checkpoint
from load_tests.lora_throughput import measure


def test_every_mix_generates_every_token_and_is_compared_to_the_base_mix(
    tmp_path: Path,
) -> None:
    checkpoint = str(make_tiny_checkpoint("llama", tmp_path / "llama", real_vocab=False))
    specs = [TinyLoraSpec(f"lora{i}", rank=2, seed=i) for i in range(2)]
    adapters = make_tiny_loras(checkpoint, tmp_path / "loras", specs)
    modules = [{"name": p.name, "path": str(p)} for p in adapters]
    lora = LoraConfig(lora_modules=modules, max_loras=2, max_lora_rank=4)
    engine = LLMEngine(checkpoint, EngineConfig(dtype="float32", max_model_len=32, lora=lora))
    got = measure(engine, [0, 2], concurrency=2, rounds=2, prompt_len=4, output_len=3, repeats=2)
    assert got["single_stream_base_tok_s"] > 0
    base, two = got["mixes"]
    assert (base["extra"]["num_adapters"], two["extra"]["num_adapters"]) == (0, 2)
    for mix in (base, two):
        assert mix["total_output_tokens"] == 2 * 2 * 3
        assert mix["length_mismatches"] == mix["errors"] == 0
        assert len(mix["pass_throughputs"]) == 2
    assert base["ratio_to_base"] == 1.0 and two["ratio_to_base"] > 0
