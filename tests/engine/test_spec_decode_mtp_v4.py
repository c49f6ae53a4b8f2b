"""Speculative decoding with DeepSeek-V4's multi-token-prediction layer (`speculative: {method:
mtp}`) on a tiny DeepSeek-V4 checkpoint with one `mtp.0.*` layer (float32): the layer loads from
the checkpoint's tensors in DeepSeek's layout; its drafts equal an uncached whole-sequence
reference (transformers' own attention over the layer's inputs) at every step, through chunked
prefill whose chunks outrun the sliding window and the sliding blocks the target releases;
greedy output is unchanged in one continuous batch with a prefix hit and a request that never
speculates, with drafts verified (and, on a checkpoint whose target often emits the token the
layer always drafts, accepted); every block of both pools is free at the end; the sliding-window span the target keeps covers
the layer's window at V4-Flash's real shape; the layer says where each checkpoint tensor went
(for the W8A8 loader, `tests/engine/test_w8a8_deepseek_v4.py`) and refuses FP8/FP4 tensors; a
checkpoint without the layer is refused."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch
from engine_helpers import AnyToken, assert_blocks_free, greedy, run_staggered
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from torch import nn
from transformers import AutoModelForCausalLM
from transformers.masking_utils import create_sliding_window_causal_mask
from transformers.models.auto.configuration_auto import CONFIG_MAPPING

from configs.engine_config import EngineConfig
from engine.deepseek_v4.cache import SLIDING, HybridKVSpec
from engine.hybrid_block_manager import HybridBlockManager
from engine.kv_layout import kv_spec
from engine.llm_engine import LLMEngine
from engine.quantization.checkpoint_names import CheckpointMapped
from engine.spec_decode.build import Drafter, fit_hybrid_drafter
from engine.spec_decode.mtp_v4 import V4MtpLayer, block_config, mtp_layer_type
from engine.spec_decode.mtp_v4_weights import load_v4_mtp
from fixtures.tiny_checkpoints import MTP_SHARD, SMALL_VOCAB, make_tiny_checkpoint

BLOCK = 16
ENGINE: dict[str, Any] = {
    "dtype": "float32",
    "block_size": BLOCK,
    "max_model_len": 256,
    "num_kv_blocks": 64,
    "max_num_seqs": 8,
    # 48-token chunks: a 70-token prompt's first chunk ends past the tiny span (15 tokens), so
    # the target releases sliding blocks the drafter's follow pass then starts after
    "max_num_batched_tokens": 48,
}
FLASH_CONFIG = (
    Path(__file__).parents[2]
    / "operate/planning/hub_configs/deepseek-ai--DeepSeek-V4-Flash.config.json"
)


def mtp(k: int) -> dict[str, Any]:
    return {"method": "mtp", "num_speculative_tokens": k, "min_acceptance_rate": 0.0}


def prompts(seed: int, lengths: tuple[int, ...]) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(3, SMALL_VOCAB) for _ in range(n)] for n in lengths]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_checkpoint(
        "deepseek_v4", tmp_path_factory.mktemp("v4-mtp") / "tiny", real_vocab=False, mtp_layers=1
    )


@pytest.fixture(scope="module")
def agreeing(checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The checkpoint with the MTP layer's final norm zeroed (all its logits 0: it always
    drafts token 0) and the head's row 0 along a random direction, so that the target emits
    token 0 after about half of its hidden states and drafts get accepted."""
    out = tmp_path_factory.mktemp("v4-mtp-agreeing") / "tiny"
    shutil.copytree(checkpoint, out)
    index = json.loads((out / "model.safetensors.index.json").read_text())["weight_map"]
    mtp_tensors = load_file(out / MTP_SHARD)
    mtp_tensors["mtp.0.norm.weight"].zero_()
    save_file(mtp_tensors, out / MTP_SHARD, metadata={"format": "pt"})
    shard = out / index["head.weight"]
    tensors = load_file(shard)
    head = tensors["head.weight"]
    gen = torch.Generator().manual_seed(0)
    head[0] = (torch.randn(head.shape[1], generator=gen) * 4 * head.float().norm(dim=1).max()).to(
        head.dtype
    )
    save_file(tensors, shard, metadata={"format": "pt"})
    return out


@pytest.fixture(scope="module")
def reference(checkpoint: Path) -> tuple[nn.Module, V4MtpLayer]:
    """transformers' model (eager attention, float32) and the MTP layer built on it, with
    transformers' attention (no fused layers)."""
    model = AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32).eval()
    return model, load_v4_mtp(model, checkpoint)


def reference_drafts(
    ref: tuple[nn.Module, V4MtpLayer], tokens: list[int], k: int
) -> tuple[list[int], list[float]]:
    """The k greedy drafts after `tokens`: the target's hidden streams of the whole sequence,
    the MTP layer over all of its rows (row p: `t_{p+1}`, `h_p`) with a sliding-window mask,
    chained on its own output; and the top-2 logit gap of each."""
    model, layer = ref
    streams: list[torch.Tensor] = []
    hook = model.model.hc_head.register_forward_pre_hook(lambda _, a: streams.append(a[0]))
    with torch.no_grad():
        model.model(torch.tensor([tokens]), use_cache=False)
        hook.remove()
        previous = streams[0][0, :-1].flatten(1)  # [n - 1, hc * D]
        ids = tokens[1:]
        drafts, gaps = [], []
        for _ in range(k):
            pos = torch.arange(len(ids))[None]
            emb = model.model.embed_tokens(torch.tensor([ids]))
            mask = create_sliding_window_causal_mask(
                config=layer.config,
                inputs_embeds=emb,
                attention_mask=None,
                cache=None,
                position_ids=pos,
            )
            out = layer(torch.tensor([ids]), previous, pos, attention_mask=mask)[0]
            logits = model.lm_head(layer.final_hidden(out[-1]))
            top2 = logits.topk(2).values
            drafts.append(int(logits.argmax()))
            gaps.append(float(top2[0] - top2[1]))
            ids = ids + [drafts[-1]]
            previous = torch.cat([previous, out[-1:]])
    return drafts, gaps


def test_the_mtp_layer_loads_from_the_checkpoint(
    checkpoint: Path, reference: tuple[nn.Module, V4MtpLayer]
) -> None:
    model, layer = reference
    with safe_open(checkpoint / MTP_SHARD, "pt") as f:
        for ours, key in [
            (layer.e_proj.weight, "mtp.0.e_proj.weight"),
            (layer.hnorm.weight, "mtp.0.hnorm.weight"),
            (layer.hc_head.hc_fn, "mtp.0.hc_head_fn"),
            (layer.block.attn_hc.fn, "mtp.0.hc_attn_fn"),
            (layer.block.self_attn.kv_proj.weight, "mtp.0.attn.wkv.weight"),
            (layer.block.self_attn.kv_norm.weight, "mtp.0.attn.kv_norm.weight"),
            (layer.block.self_attn.sinks, "mtp.0.attn.attn_sink"),
            (layer.block.mlp.experts.down_proj[2], "mtp.0.ffn.experts.2.w2.weight"),
            (layer.block.mlp.experts.gate_up_proj[1, 16:], "mtp.0.ffn.experts.1.w3.weight"),
        ]:
            assert torch.equal(ours.to(torch.bfloat16), f.get_tensor(key)), key
    assert layer.block.self_attn.layer_type == SLIDING and layer.block.self_attn.compressor is None
    assert not layer.block.mlp.is_hash  # learned top-k routing, as past the hash layers
    assert layer.embed_tokens is model.model.embed_tokens
    raw = json.loads((checkpoint / "config.json").read_text())
    assert len(raw["layer_types"]) == model.config.num_hidden_layers + 1


def test_the_layer_says_where_each_checkpoint_tensor_went(
    checkpoint: Path, reference: tuple[nn.Module, V4MtpLayer]
) -> None:
    """`CheckpointMapped`, through which the W8A8 loader quantises the layer's block."""
    _, layer = reference
    assert isinstance(layer, CheckpointMapped) and layer.checkpoint_prefix == "mtp.0."
    params = {*dict(layer.named_parameters()), *dict(layer.named_buffers())}
    with safe_open(checkpoint / MTP_SHARD, "pt") as f:
        names = [k.removeprefix("mtp.0.") for k in f.keys() if k.startswith("mtp.0.")]
    for name in names:
        target = layer.checkpoint_target(name)
        assert target is not None and target[0] in params, name
    experts = "block.mlp.experts."
    assert layer.checkpoint_target("ffn.experts.3.w1.weight") == (f"{experts}gate_up_proj", 0)
    assert layer.checkpoint_target("ffn.experts.3.w3.weight") == (f"{experts}gate_up_proj", 1)
    assert layer.checkpoint_target("ffn.experts.3.w2.weight") == (f"{experts}down_proj", 0)
    wkv = "block.self_attn.kv_proj.weight"
    assert layer.checkpoint_target("attn.wkv.weight") == (wkv, None)
    assert layer.checkpoint_target("hc_head_fn") == ("hc_head.hc_fn", None)
    assert layer.checkpoint_target("attn.wkv.weight_scale") is None


def test_quantised_mtp_tensors_outside_w8a8_are_refused(
    checkpoint: Path, reference: tuple[nn.Module, V4MtpLayer], tmp_path: Path
) -> None:
    model, _ = reference
    layer = "mtp.0.attn.wq_a"

    def edited(name: str, edit: Any) -> Path:
        out = tmp_path / name
        shutil.copytree(checkpoint, out)
        tensors = load_file(out / MTP_SHARD)
        edit(tensors)
        save_file(tensors, out / MTP_SHARD, metadata={"format": "pt"})
        index_path = out / "model.safetensors.index.json"
        index = json.loads(index_path.read_text())
        index["weight_map"].update(dict.fromkeys(tensors, MTP_SHARD))
        index_path.write_text(json.dumps(index))
        return out

    def fp8(tensors: dict[str, torch.Tensor]) -> None:  # DeepSeek's block-scaled FP8
        tensors[f"{layer}.weight"] = tensors[f"{layer}.weight"].to(torch.float8_e4m3fn)
        tensors[f"{layer}.scale"] = torch.ones(1, 1)

    def fp4(tensors: dict[str, torch.Tensor]) -> None:  # FP4 packed two to an int8 byte
        tensors[f"{layer}.weight"] = tensors[f"{layer}.weight"][:, ::2].to(torch.int8).contiguous()
        tensors[f"{layer}.scale"] = torch.ones(1, 1)

    def int8(tensors: dict[str, torch.Tensor]) -> None:  # no quant_model_description.json
        tensors[f"{layer}.weight"] = tensors[f"{layer}.weight"].to(torch.int8)
        tensors[f"{layer}.weight_scale"] = torch.ones(24, 1)

    for name, edit in (("fp8", fp8), ("fp4", fp4)):
        with pytest.raises(ValueError, match=r"mtp\.0\.attn\.wq_a\.\S+ is FP8/FP4-quantised") as e:
            load_v4_mtp(model, edited(name, edit))
        assert "\n" not in str(e.value)
    with pytest.raises(ValueError, match="does not type"):
        load_v4_mtp(model, edited("int8", int8))


def test_mtp_drafts_equal_the_reference_at_every_step(
    checkpoint: Path, reference: tuple[nn.Module, V4MtpLayer]
) -> None:
    engine = LLMEngine(str(checkpoint), EngineConfig(**ENGINE, speculative=mtp(2)))
    long, short = prompts(1, (70, 6))
    engine.add_request("long", long, greedy(24, ignore_eos=True))
    engine.add_request("short", short, greedy(24, ignore_eos=True))
    checked = 0
    while engine.has_unfinished():
        engine.step()
        for rid in ("long", "short"):
            seq = engine._seqs.get(rid)
            if seq is None or not seq.draft_token_ids:
                continue
            want, gaps = reference_drafts(reference, seq.token_ids(), len(seq.draft_token_ids))
            for ours, ref, gap in zip(seq.draft_token_ids, want, gaps):
                if ours != ref:
                    assert gap < 1e-4, f"{rid}: drafts {seq.draft_token_ids} != reference {want}"
                    break
            checked += 1
    assert checked >= 30
    assert_blocks_free(engine)
    engine.shutdown()


PROMPTS = prompts(2, (5, 23, 70, 97))
REQUESTS = [
    *((str(i), p, greedy(20, ignore_eos=True)) for i, p in enumerate(PROMPTS)),
    # joins once the 70-token prompt is computed: hits its first 4 blocks of both pools
    ("again", PROMPTS[2][:64] + [5, 6, 7], greedy(20, ignore_eos=True)),
    ("grammar", PROMPTS[3][:40], greedy(10, constraint=AnyToken(), ignore_eos=True)),
]
"""Prompts shorter than, and many windows longer than, the window of 8 (48-token chunks), a
prefix hit, and a request that never speculates (a grammar)."""


@pytest.fixture(scope="module")
def without_mtp(agreeing: Path) -> dict[str, list[int]]:
    engine = LLMEngine(str(agreeing), EngineConfig(**ENGINE))
    out = run_staggered(engine, REQUESTS, join_every=2)  # requests join two steps apart
    engine.shutdown()
    return out


@pytest.mark.parametrize("k", [1, 2])
def test_mtp_leaves_greedy_output_unchanged(
    agreeing: Path, without_mtp: dict[str, list[int]], k: int
) -> None:
    on = LLMEngine(str(agreeing), EngineConfig(**ENGINE, speculative=mtp(k)))
    got = run_staggered(on, REQUESTS, join_every=2)  # asserts every block free
    assert got == without_mtp
    assert [len(got[rid]) for rid, _, _ in REQUESTS] == [20, 20, 20, 20, 20, 10]
    assert any(0 in tokens and len(set(tokens)) > 2 for tokens in got.values())
    assert on.block_manager.stats.hits >= 4
    stats = on.stats().spec
    assert stats is not None and stats.num_drafts >= 20
    assert stats.num_accepted_tokens_per_pos[k - 1] > 0  # whole drafts kept, k tokens each
    assert 0 < stats.num_accepted_tokens < stats.num_draft_tokens
    assert_blocks_free(on)
    on.shutdown()


def test_the_span_covers_the_mtp_window_at_v4_flash_shape() -> None:
    raw = json.loads(FLASH_CONFIG.read_text())
    config = CONFIG_MAPPING["deepseek_v4"].from_dict(raw)
    assert mtp_layer_type(raw, config) == SLIDING  # compress_ratios[43] == 0
    engine_config = EngineConfig(
        block_size=128, max_model_len=4096, max_num_seqs=32, max_num_batched_tokens=8192
    )
    target = kv_spec(config, torch.bfloat16, 1, engine_config)
    drafter = Drafter(
        nn.Identity(),
        HybridKVSpec.from_config(block_config(config, SLIDING), torch.bfloat16),
        mtp=True,
    )
    fitted, fitted_drafter = fit_hybrid_drafter(target, drafter, 32, 8192, 128)
    # the MTP layer's newest row reads 128 positions before the target's next token
    assert (target.span, fitted.span) == (127, 128)
    assert fitted.sliding_blocks == target.sliding_blocks  # still two 128-token blocks each
    assert fitted_drafter.spec.sliding_blocks == fitted.sliding_blocks
    # its K=V rides in the sliding pool: one 512-wide bfloat16 vector per token and block slot
    extra = fitted.sliding_bytes_per_block(128) - target.sliding_bytes_per_block(128)
    assert extra == 128 * 512 * 2
    assert fitted.bytes_per_token() == target.bytes_per_token()


def test_the_engine_keeps_the_mtp_window(checkpoint: Path) -> None:
    engine = LLMEngine(str(checkpoint), EngineConfig(**ENGINE, speculative=mtp(1)))
    bm = engine.block_manager
    assert isinstance(bm, HybridBlockManager)
    assert bm.span == max(15, 8)  # the tiny ratio-16 layers' span already covers the window
    assert "mtp_swa" in engine.executor.spec.describe()
    engine.shutdown()


def test_a_checkpoint_without_an_mtp_layer_is_refused(tmp_path: Path) -> None:
    plain = make_tiny_checkpoint("deepseek_v4", tmp_path, real_vocab=False)
    with pytest.raises(ValueError, match="no multi-token-prediction layer"):
        LLMEngine(str(plain), EngineConfig(**ENGINE, speculative=mtp(1)))
