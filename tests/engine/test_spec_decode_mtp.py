"""Speculative decoding with DeepSeek-V3's multi-token-prediction layer (`speculative: {method:
mtp}`) on a tiny DeepSeek-V3 checkpoint with one MTP layer (float32): the layer loads from the
checkpoint's `model.layers.{num_hidden_layers}.*` tensors; its drafts equal transformers'
`MtpModel` run on the whole sequence at every step (so its latent KV cache follows the
target's through chunked prefill, verification and rollback); greedy output is unchanged in a
batch mixing speculating and non-speculating requests with prefix-cache hits; every block is
free at the end; a checkpoint without the layer is refused."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from engine_helpers import AnyToken, assert_blocks_free, greedy, run_staggered
from safetensors import safe_open
from transformers import AutoModelForCausalLM

from configs.engine_config import EngineConfig
from engine.llm_engine import LLMEngine
from engine.sampling_params import SamplingParams
from engine.spec_decode.mtp_model import load_mtp
from fixtures.tiny_checkpoints import MTP_SHARD, make_tiny_checkpoint

K = 3
ENGINE = {
    "dtype": "float32",
    "max_model_len": 256,
    "num_kv_blocks": 64,
    "block_size": 4,
    "max_num_batched_tokens": 16,  # prompts of more than 16 tokens are prefilled in chunks
}
MTP = {"method": "mtp", "num_speculative_tokens": K, "min_acceptance_rate": 0.0}


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_checkpoint(
        "deepseek_v3", tmp_path_factory.mktemp("v3-mtp"), real_vocab=False, mtp_layers=1
    )


@pytest.fixture(scope="module")
def hf(checkpoint: Path) -> tuple[Any, Any]:
    """transformers' own model (eager attention, float32) and its MTP layer."""
    model = AutoModelForCausalLM.from_pretrained(
        checkpoint, dtype=torch.float32, attn_implementation="eager"
    ).eval()
    return model, load_mtp(model)


def hf_drafts(hf: tuple[Any, Any], tokens: list[int], k: int) -> tuple[list[int], list[float]]:
    """The k greedy MTP drafts after `tokens`, from transformers on the whole sequence, and
    the top-2 logit gap of each (near-ties may resolve either way)."""
    model, mtp = hf
    n = len(tokens)
    with torch.no_grad():
        h = model.model(torch.tensor([tokens])).last_hidden_state  # after the final norm
        ids, previous = tokens[1:], h[:, : n - 1]
        drafts, gaps = [], []
        for r in range(k):
            out = mtp.forward_layer(
                0,
                last_hidden_states=previous,
                position_ids=torch.arange(n - 1 + r)[None],
                mtp_cache=None,
                input_ids=torch.tensor([ids]),
            )
            logits = mtp.shared_head(out[0, -1])
            top2 = logits.topk(2).values
            drafts.append(int(logits.argmax()))
            gaps.append(float(top2[0] - top2[1]))
            ids = ids + [drafts[-1]]
            previous = torch.cat([previous, out[:, -1:]], dim=1)  # the layer's own output
    return drafts, gaps


def test_the_mtp_layer_loads_from_the_checkpoint(checkpoint: Path, hf: tuple[Any, Any]) -> None:
    model, mtp = hf
    layer = mtp.layers[0]
    with safe_open(checkpoint / MTP_SHARD, "pt") as f:
        for ours, key in [
            (layer.eh_proj.weight, "model.layers.2.eh_proj.weight"),
            (layer.enorm.weight, "model.layers.2.enorm.weight"),
            (layer.post_norm.weight, "model.layers.2.shared_head.norm.weight"),
        ]:
            assert torch.equal(ours.to(torch.bfloat16), f.get_tensor(key)), key
    assert type(layer.mtp_block.mlp).__name__ == "DeepseekV3MoE"  # MTP blocks are MoE
    assert mtp.shared_head is model.lm_head and mtp.embed_tokens is model.model.embed_tokens


def test_mtp_drafts_equal_transformers_at_every_step(checkpoint: Path, hf: tuple[Any, Any]) -> None:
    engine = LLMEngine(str(checkpoint), EngineConfig(**ENGINE, speculative=MTP))
    prompt = list(range(3, 40))  # 37 tokens: three prefill chunks
    engine.add_request("a", prompt, SamplingParams(max_tokens=40, temperature=0.0, ignore_eos=True))
    engine.add_request("b", [5, 6, 7], SamplingParams(max_tokens=40, temperature=0.0))
    checked = 0
    while engine.has_unfinished():
        engine.step()
        seq = engine._seqs.get("a")
        if seq is None or not seq.draft_token_ids:
            continue
        expected, gaps = hf_drafts(hf, seq.token_ids(), len(seq.draft_token_ids))
        for ours, ref, gap in zip(seq.draft_token_ids, expected, gaps):
            if ours != ref:
                assert gap < 1e-4, f"draft {seq.draft_token_ids} != transformers' {expected}"
                break
        checked += 1
    assert checked >= 10
    assert_blocks_free(engine)


def test_mtp_leaves_greedy_output_unchanged(checkpoint: Path) -> None:
    shared = list(range(10, 34))  # 6 full blocks: later requests hit the prefix cache
    requests = [
        ("long", shared + [40, 41, 42], greedy(30, ignore_eos=True)),
        ("again", shared + [50], greedy(29, ignore_eos=True)),
        ("grammar", shared + [60], greedy(12, constraint=AnyToken(), ignore_eos=True)),
        ("short", [7, 8], greedy(17, ignore_eos=True)),
    ]
    off = LLMEngine(str(checkpoint), EngineConfig(**ENGINE))
    on = LLMEngine(str(checkpoint), EngineConfig(**ENGINE, speculative=MTP))
    ref = run_staggered(off, requests, join_every=1)
    got = run_staggered(on, requests, join_every=1)
    assert got == ref
    assert [len(got[r]) for r, _, _ in requests] == [30, 29, 12, 17]
    assert on.block_manager.stats.hits > 0
    stats = on.stats().spec
    assert stats is not None and stats.num_drafts > 20


def test_a_checkpoint_without_an_mtp_layer_is_refused(tmp_path: Path) -> None:
    plain = make_tiny_checkpoint("deepseek_v3", tmp_path, real_vocab=False)
    with pytest.raises(ValueError, match="no multi-token-prediction layer"):
        LLMEngine(str(plain), EngineConfig(**ENGINE, speculative=MTP))
