"""`engine.kv_cache_dtype: int8 | fp8_e4m3`: 8-bit KV caches with a float16 scale per token and
head (`npu_ops.ops.kv_quant`), on tiny Llama and Qwen3 models and on the tiny MLA model
(DeepSeek-V3's latent cache).

Against the float32 cache, greedy tokens may part only where the float32 run's top-2 logits are
close at the first token that differs (quantisation moves logits by ~1e-3 on these models): a
prompt whose generation never comes that close must give the same tokens. Prefix-cache hits and
preemption give the tokens of a plain run under the int8 cache, and the cache's bytes per token
are `(head_dim + 2) / (2 * head_dim)` of a bfloat16 cache's, in `KVCacheSpec`, in the start-up
log and in `ascend-router plan`.
"""

from __future__ import annotations

import logging
import random
from pathlib import Path
from typing import Any

import pytest
import torch
from engine_helpers import greedy, run_to_completion
from transformers import AutoConfig, AutoModelForCausalLM

from configs.engine_config import EngineConfig
from configs.serve_file import load_app_config, pick_model
from engine.kv_cache import KVCacheSpec
from engine.kv_layout import kv_spec
from engine.llm_engine import LLMEngine
from engine.metrics import EngineMetrics
from fixtures.tiny_checkpoints import SMALL_VOCAB, make_tiny_checkpoint
from operate.planning.memory_plan import plan_deployment
from operate.planning.model_facts import model_facts

PROD = Path(__file__).resolve().parents[2] / "configs" / "prod.yaml"
MAX_TOKENS = 12
# largest top-2 logit gap (float32 cache) at which the 8-bit cache may pick the other token
TIE_GAP = {"int8": 0.05, "fp8_e4m3": 0.2}


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("kv8")
    return {
        family: make_tiny_checkpoint(family, root / family, real_vocab=False, seed=1)
        for family in ("llama", "qwen3", "deepseek_v3")
    }


def _engine(path: Path, kv_cache_dtype: str, **fields: Any) -> LLMEngine:
    config = {
        "dtype": "float32",
        "num_kv_blocks": 96,
        "block_size": 8,
        "max_num_batched_tokens": 64,
        "max_model_len": 128,
        "kv_cache_dtype": kv_cache_dtype,
        **fields,
    }
    return LLMEngine(str(path), EngineConfig(**config))


def _generate(engine: LLMEngine, prompts: list[list[int]]) -> list[list[int]]:
    for i, prompt in enumerate(prompts):
        engine.add_request(str(i), prompt, greedy(MAX_TOKENS))
    out = run_to_completion(engine)
    engine.shutdown()
    return [out[str(i)] for i in range(len(prompts))]


def _prompts(count: int, seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    return [
        [rng.randrange(3, SMALL_VOCAB) for _ in range(rng.randrange(4, 40))] for _ in range(count)
    ]


def _top2_gaps(model: torch.nn.Module, prompt: list[int], tokens: list[int]) -> list[float]:
    """Top-2 logit gap before each generated token, teacher-forced on the float32 run's."""
    with torch.no_grad():
        logits = model(torch.tensor([prompt + tokens])).logits[0, len(prompt) - 1 : -1]
    top2 = logits.topk(2, dim=-1).values
    return (top2[:, 0] - top2[:, 1]).tolist()


@pytest.mark.parametrize("kv_cache_dtype", ["int8", "fp8_e4m3"])
@pytest.mark.parametrize("family", ["llama", "qwen3", "deepseek_v3"])
def test_8bit_cache_parts_from_the_float_cache_only_near_ties(
    family: str, kv_cache_dtype: str, checkpoints: dict[str, Path]
) -> None:
    path = checkpoints[family]
    prompts = _prompts(12, seed=len(family))
    want = _generate(_engine(path, "auto"), prompts)
    got = _generate(_engine(path, kv_cache_dtype), prompts)
    hf = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    same = 0
    for prompt, ours, ref in zip(prompts, got, want, strict=True):
        gaps = _top2_gaps(hf, prompt, ref)
        first = next((i for i, (a, b) in enumerate(zip(ours, ref)) if a != b), None)
        if first is None:
            assert len(ours) == len(ref) == MAX_TOKENS
            same += 1
            continue
        assert gaps[first] < TIE_GAP[kv_cache_dtype], (
            f"{kv_cache_dtype} cache picked {ours[first]} over {ref[first]} at token {first} "
            f"with a top-2 gap of {gaps[first]:.4f}"
        )
    assert same >= len(prompts) // 2, f"only {same} of {len(prompts)} prompts kept every token"


def test_prefix_hits_and_preemption_keep_the_int8_tokens(checkpoints: dict[str, Path]) -> None:
    path = checkpoints["llama"]
    rng = random.Random(7)
    shared = [rng.randrange(3, SMALL_VOCAB) for _ in range(21)]
    prompts = [shared + [rng.randrange(3, SMALL_VOCAB) for _ in range(n)] for n in (3, 9, 5, 12)]
    plain = _generate(_engine(path, "int8", enable_prefix_caching=False), prompts)

    # 4 sequences of up to 45 tokens need 24 blocks; 10 preempt
    engine = _engine(path, "int8", num_kv_blocks=10, max_model_len=64)
    engine.add_request("warm", shared, greedy(1))
    run_to_completion(engine)
    got = _generate(engine, prompts)
    stats = engine.stats()
    assert stats.prefix_cache_hits >= 4, stats
    assert stats.num_preemptions >= 1, stats
    assert got == plain


def test_int8_halves_kv_bytes_per_token_in_the_spec_and_the_start_up_log(
    checkpoints: dict[str, Path], caplog: pytest.LogCaptureFixture
) -> None:
    smollm2 = AutoConfig.for_model(
        "llama", num_hidden_layers=30, num_attention_heads=9, num_key_value_heads=3, hidden_size=576
    )
    bf16 = KVCacheSpec.from_config(smollm2, torch.bfloat16)
    for name in ("int8", "fp8_e4m3"):
        spec = kv_spec(smollm2, torch.bfloat16, 1, EngineConfig(kv_cache_dtype=name))
        assert isinstance(spec, KVCacheSpec)
        assert (bf16.bytes_per_token(), spec.bytes_per_token()) == (23040, 30 * 3 * 2 * (64 + 2))
    tiny = AutoConfig.from_pretrained(checkpoints["deepseek_v3"])  # latent 32 + rope 8, 2 layers
    latent = kv_spec(tiny, torch.bfloat16, 1, EngineConfig(kv_cache_dtype="int8"))
    assert latent.bytes_per_token() == 2 * (32 + 2 + 8 + 2)

    with caplog.at_level(logging.INFO, logger="engine.kv_budget"):
        engine = _engine(checkpoints["llama"], "int8")  # 2 layers x 2 kv heads x D = 8
    try:
        stats = engine.stats()
    finally:
        engine.shutdown()
    (line,) = [r.getMessage() for r in caplog.records if r.getMessage().startswith("KV cache:")]
    assert "80 bytes/token" in line and "cache int8 + float16 scale" in line
    metrics = EngineMetrics("m", "r0", 64)  # the replica's /metrics
    metrics.observe_step(stats)
    text = metrics.exposition().decode()
    assert 'ascend_router_kv_cache_bytes_per_token{kv_cache_dtype="int8"' in text
    assert (stats.kv_cache_dtype, stats.kv_bytes_per_token) == ("int8", 80)


def test_plan_of_prod_qwen_halves_kv_bytes_and_doubles_sequences() -> None:
    model = pick_model(load_app_config(PROD), "qwen2.5-7b-instruct")
    int8 = model.model_copy(
        update={"engine": model.engine.model_copy(update={"kv_cache_dtype": "int8"})}
    )
    before = plan_deployment(model, model_facts(model))
    after = plan_deployment(int8, model_facts(int8))
    assert before.kv_bytes_per_token == 28 * 4 * (128 + 128) * 2
    assert after.kv_bytes_per_token == 28 * 4 * (130 + 130)  # 50.8 % of bfloat16's
    assert after.max_seqs_full_context >= 1.9 * before.max_seqs_full_context
    assert "cache int8" in after.kv_geometry


def test_deepseek_v4_refuses_an_8bit_cache() -> None:
    from fixtures.tiny_checkpoints import tiny_config

    with pytest.raises(ValueError, match="kv_cache_dtype=int8 is not supported for DeepSeek-V4"):
        kv_spec(tiny_config("deepseek_v4"), torch.float32, 1, EngineConfig(kv_cache_dtype="int8"))
