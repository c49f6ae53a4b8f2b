"""DeepSeek-V2/V3 on the MLA latent KV cache (`engine.mla_attention`, `engine.kv_cache`).

Greedy tokens equal transformers' (fp32; near-ties as in `test_greedy_equals_transformers`) in
one continuous batch with chunked prefill and prefix-cache hits, and so do their logprobs
(within 2e-5: the tiny random models' attention moves them by ~2e-4 when the softmax scale is
10% off, the tokens often not at all); the cache holds
`kv_lora_rank + qk_rope_head_dim` elements per token and layer, the same on every rank; two
tensor-parallel ranks give the tokens of one (run under `flock /tmp/ray-tests.lock`).
"""

from __future__ import annotations

import logging
import random
from pathlib import Path
from typing import Any

import pytest
import torch
from engine_helpers import assert_same_until_tie, greedy, hf_greedy, run_to_completion
from transformers import AutoModelForCausalLM, DeepseekV2Config
from transformers.models.deepseek_v2.modeling_deepseek_v2 import DeepseekV2Attention

from configs.engine_config import EngineConfig
from engine.kv_cache import KVCacheSpec
from engine.llm_engine import LLMEngine
from engine.mla_attention import MLAAttention
from fixtures.tiny_checkpoints import SMALL_VOCAB, make_tiny_checkpoint, tiny_config

MAX_TOKENS = 10
YARN = {  # DeepSeek-V2-Lite's rotary type (factor 40 there), so the softmax scale has mscale²
    "rope_type": "yarn",
    "factor": 4.0,
    "original_max_position_embeddings": 512,
    "mscale": 0.707,
    "mscale_all_dim": 0.707,
    "beta_fast": 32.0,
    "beta_slow": 1.0,
    "rope_theta": 10000.0,
}
VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {
    "deepseek_v2": ("deepseek_v2", {}),  # no query LoRA, complex-pair rotary
    "deepseek_v2-yarn": ("deepseek_v2", {"rope_parameters": YARN}),
    "deepseek_v3": ("deepseek_v3", {}),  # query LoRA, interleaved rotary
    "deepseek_v3-rotate-half": ("deepseek_v3", {"rope_interleave": False}),
}


def _checkpoint(variant: str, out: Path) -> Path:
    family, fields = VARIANTS[variant]
    if not fields:
        return make_tiny_checkpoint(family, out, real_vocab=False, seed=1)
    config = tiny_config(family)
    for name, value in fields.items():
        setattr(config, name, value)
    torch.manual_seed(1)
    AutoModelForCausalLM.from_config(config).save_pretrained(out)
    return out


def _engine(path: Path, **fields: Any) -> LLMEngine:
    config = {
        "dtype": "float32",
        "num_kv_blocks": 64,
        "block_size": 8,
        "max_num_batched_tokens": 16,
        "max_model_len": 256,
        **fields,
    }
    return LLMEngine(str(path), EngineConfig(**config))


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_continuous_batch_with_prefix_hits_matches_transformers(
    variant: str, tmp_path: Path
) -> None:
    path = _checkpoint(variant, tmp_path / variant)
    engine = _engine(path)
    rng = random.Random(len(variant))
    shared = [rng.randrange(3, SMALL_VOCAB) for _ in range(19)]  # two full blocks and then some
    prompts = [
        shared + [rng.randrange(3, SMALL_VOCAB) for _ in range(5)],
        [rng.randrange(3, SMALL_VOCAB) for _ in range(13)],
        shared[:17] + [rng.randrange(3, SMALL_VOCAB) for _ in range(9)],
        [rng.randrange(3, SMALL_VOCAB) for _ in range(4)],
    ]
    engine.add_request("warm", shared, greedy(2))  # its prefix blocks stay cached once freed
    run_to_completion(engine)
    ours: dict[str, list[int]] = {}
    logprobs: dict[str, list[float | None]] = {}

    def step() -> None:
        for o in engine.step():
            ours.setdefault(o.request_id, []).extend(o.new_token_ids)
            logprobs.setdefault(o.request_id, []).extend(lp.logprob for lp in o.logprobs or ())

    for i, p in enumerate(prompts):
        engine.add_request(str(i), p, greedy(MAX_TOKENS, logprobs=1))
        if i in (1, 2):  # requests 2 and 3 join a batch that is already running
            step()
    while engine.has_unfinished():
        step()
    bm = engine.block_manager
    assert bm.stats.hits >= 4, f"prefix blocks reused: {bm.stats.hits}"
    assert bm.num_free_blocks == bm.num_blocks
    engine.shutdown()

    hf = AutoModelForCausalLM.from_pretrained(
        path, dtype=torch.float32, attn_implementation="sdpa"
    ).eval()
    if variant.endswith("yarn"):  # the yarn mscale reaches the softmax scale
        assert hf.model.layers[0].self_attn.scaling > (16 + 8) ** -0.5 * 1.1
    for i, p in enumerate(prompts):
        tokens = ours[str(i)]
        assert_same_until_tie(tokens, hf_greedy(hf, p, MAX_TOKENS), p, hf)
        with torch.no_grad():  # transformers' logprobs of our tokens, teacher-forced
            want = hf(torch.tensor([p + tokens])).logits[0, len(p) - 1 : -1].log_softmax(-1)
        want_chosen = want.gather(1, torch.tensor(tokens)[:, None])[:, 0]
        torch.testing.assert_close(torch.tensor(logprobs[str(i)]), want_chosen, rtol=0, atol=2e-5)


@pytest.mark.parametrize("family", ["deepseek_v2", "deepseek_v3"])
@pytest.mark.parametrize("tp", [1, 2, 4])
def test_kv_bytes_per_token_are_the_latent_on_every_rank(family: str, tp: int) -> None:
    config = tiny_config(family)  # 2 layers, kv_lora_rank 32, qk_rope_head_dim 8
    spec = KVCacheSpec.from_config(config, torch.float32, tp)
    assert spec.latent and (spec.num_kv_heads, spec.k_head_dim, spec.v_head_dim) == (1, 32, 8)
    assert spec.bytes_per_token() == 2 * (32 + 8) * 4


def test_deepseek_v2_lite_latent_is_nine_times_smaller_than_expanded() -> None:
    lite = DeepseekV2Config(  # DeepSeek-V2-Lite's attention (config.json)
        num_hidden_layers=27,
        num_attention_heads=16,
        kv_lora_rank=512,
        qk_rope_head_dim=64,
        qk_nope_head_dim=128,
        v_head_dim=128,
        q_lora_rank=None,
    )
    spec = KVCacheSpec.from_config(lite, torch.bfloat16, 4)
    expanded = 27 * 16 * (128 + 64 + 128) * 2  # the cache transformers' expansion implied
    assert spec.bytes_per_token() == (512 + 64) * 27 * 2 == 31104
    assert expanded / spec.bytes_per_token() > 8.8
    assert "MLA latent" in spec.describe()


def test_the_engine_allocates_and_logs_the_latent_cache(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = make_tiny_checkpoint("deepseek_v3", tmp_path / "v3", real_vocab=False)
    with caplog.at_level(logging.INFO, logger="engine.kv_budget"):
        engine = _engine(path, num_kv_blocks=None, kv_cache_memory_bytes=102_400)
    c_kv, k_pe = engine.executor.runner.kv_caches[0]  # type: ignore[attr-defined]
    assert (c_kv.shape[1:], k_pe.shape[1:]) == ((1, 32), (1, 8))
    # 102,400 bytes at 320 bytes/token (2 layers x (32 + 8) x 4) are 320 tokens: 40 blocks of 8
    assert engine.block_manager.num_blocks == 40 == c_kv.shape[0] // 8
    assert "320 bytes/token (MLA latent, 2 layers x (c_kv 32 + k_pe 8)" in caplog.text
    engine.shutdown()


def test_quantised_or_biased_projections_are_refused() -> None:
    config = tiny_config("deepseek_v2")
    attn = DeepseekV2Attention(config, layer_idx=0)
    attn.kv_a_proj_with_mqa = torch.nn.Linear(16, 40, bias=True)
    with pytest.raises(ValueError, match="kv_a_proj_with_mqa is a Linear with a bias"):
        MLAAttention(attn)


def _generate(path: Path, tp: int, ep: bool = False) -> dict[str, list[int]]:
    engine = LLMEngine(
        str(path),
        EngineConfig(
            dtype="float32",
            num_kv_blocks=64,
            block_size=8,
            max_num_batched_tokens=16,
            max_model_len=256,
            rank_num_cpus=0.25,
        ),
        tensor_parallel_size=tp,
        expert_parallel=ep,
    )
    try:
        prompts = [[5, 6, 7, 8, 9, 10, 11, 12, 13, 14], [20, 21, 22], [5, 6, 7, 8, 9, 10, 11, 40]]
        for i, p in enumerate(prompts):
            engine.add_request(str(i), p, greedy(MAX_TOKENS))
        out = run_to_completion(engine)
        assert engine.block_manager.num_free_blocks == engine.block_manager.num_blocks
        return out
    finally:
        engine.shutdown()


@pytest.mark.parametrize("variant", ["deepseek_v2", "deepseek_v3"])
def test_two_ranks_with_a_replicated_latent_equal_one(
    ray_session: None, tmp_path: Path, variant: str
) -> None:
    path = _checkpoint(variant, tmp_path / variant)
    assert _generate(path, 2) == _generate(path, 1)
