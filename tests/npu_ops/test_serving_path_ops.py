"""Which torch_npu kernels one engine step of each family calls, with the recording stand-in.

The engine's modules (`engine.fused_layers`, `engine.fused_moe`, `engine.model_runner`) use the
`npu` op table while the recording `torch_npu` stand-in is installed; the stand-in has the
documented signatures and asserts the documented dtypes and shapes (bfloat16, as on an Atlas
A2), so a wrong call fails. One prefill step and one decode step of every family must call
exactly the kernels listed here, which `docs/architecture.md` ("Ops on the serving path") lists
too. DeepSeek-V4's attention kernels take V4-Flash's head sizes only, so the tiny V4 runs their
references and calls no kernel; a second V4 checkpoint at those head sizes calls them.
"""

from __future__ import annotations

import types
from pathlib import Path

import fake_torch_npu_util
import pytest
import torch

import engine.deepseek_v4.attention
import engine.fused_layers
import engine.fused_moe
import engine.mla_attention
import engine.model_runner
from configs.engine_config import EngineConfig
from engine.llm_engine import LLMEngine
from engine.sampling_params import SamplingParams
from fixtures.tiny_checkpoints import FAMILY_CONFIGS, make_tiny_checkpoint
from npu_ops.ops import REGISTRY
from npu_ops.platform import current_platform

current_platform()  # detected (CPU) before any test installs the torch_npu stand-in

DENSE = {"npu_rms_norm", "npu_rotary_mul", "npu_swiglu"}
MOE = {"npu_moe_init_routing", "npu_moe_finalize_routing"}
# the decode step also attends through page attention, but for DeepSeek: its MLA ops
# (`npu_mla_prolog_v2`, `npu_fused_infer_attention_score`) take DeepSeek-V3's sizes only, so the
# tiny models run their references (test_mla_ops.py checks those kernel calls)
DECODE_ATTENTION = {"npu_incre_flash_attention"}
KERNELS = {
    "llama": DENSE,
    "qwen2": DENSE,
    "qwen3": DENSE,
    "phi3": DENSE,
    "qwen3_moe": DENSE | MOE | {"npu_moe_gating_top_k_softmax"},
    "deepseek_v2": {"npu_rms_norm", "npu_swiglu", "npu_moe_gating_top_k_softmax"} | MOE,
    "deepseek_v3": {"npu_rms_norm", "npu_swiglu", "npu_moe_gating_top_k"} | MOE,
    # ops `kv_compress` (no kernel), `lightning_indexer` and `sparse_shared_kv_attention`, whose
    # kernels take 128-wide indexer heads and 512-wide attention heads only (below: at those
    # sizes); the rest of V4's modules are transformers' own
    "deepseek_v4": set(),
}
V4_KERNELS = {"npu_lightning_indexer", "npu_sparse_flash_attention"}
# the tiny V4 with the kernels' head sizes: K=V heads of 512 (64 of them RoPE), indexer heads
# of 128, and a block of 64 tokens, 16 ratio-4 entries (pages of 16 at least)
V4_AT_KERNEL_SIZES = {
    **FAMILY_CONFIGS["deepseek_v4"],
    "head_dim": 512,
    "qk_rope_head_dim": 64,
    "index_head_dim": 128,
}


def _use_npu_ops(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every engine module that calls ops takes the `npu` table."""
    npu = REGISTRY.select("npu")
    for module in (
        engine.fused_layers,
        engine.fused_moe,
        engine.mla_attention,
        engine.model_runner,
        engine.deepseek_v4.attention,
    ):
        monkeypatch.setattr(module, "active_ops", lambda: npu)


def _engine(family: str, path: Path, block_size: int = 16) -> LLMEngine:
    """A tiny checkpoint's engine with two requests added (7 and 3 prompt tokens)."""
    make_tiny_checkpoint(family, path, real_vocab=False, seed=1)
    config = EngineConfig(
        dtype="bfloat16", num_kv_blocks=8, block_size=block_size, max_model_len=64
    )
    eng = LLMEngine(str(path), config)
    params = SamplingParams(max_tokens=4, temperature=0.0, ignore_eos=True)
    eng.add_request("a", [5, 6, 7, 8, 9, 10, 11], params)
    eng.add_request("b", [12, 13, 14], params)
    return eng


def _step_kernels(engine: LLMEngine) -> set[str]:
    fake_torch_npu_util.CALLS.clear()
    engine.step()
    return {name for name, _ in fake_torch_npu_util.CALLS}


@pytest.mark.parametrize("family", sorted(FAMILY_CONFIGS))
def test_prefill_and_decode_call_the_familys_npu_kernels(
    family: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    fake_torch_npu_module: types.ModuleType,
) -> None:
    _use_npu_ops(monkeypatch)
    eng = _engine(family, tmp_path / family)
    prefill = _step_kernels(eng)
    decode = _step_kernels(eng)
    expected_decode = KERNELS[family] | (
        set() if family.startswith("deepseek") else DECODE_ATTENTION
    )
    assert prefill == KERNELS[family], sorted(prefill ^ KERNELS[family])
    assert decode == expected_decode, sorted(decode ^ expected_decode)
    rotary = fake_torch_npu_util.calls_to("npu_rotary_mul")
    if rotary:  # the decode step's last call: BSND input [1, T=2 tokens, heads, head_dim]
        assert rotary[-1]["input"][0][:2] == (1, 2) and rotary[-1]["rotary_mode"] == "half"


def test_deepseek_v4_at_the_kernels_head_sizes_calls_the_indexer_and_sparse_attention(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    fake_torch_npu_module: types.ModuleType,
) -> None:
    monkeypatch.setitem(FAMILY_CONFIGS, "deepseek_v4", V4_AT_KERNEL_SIZES)
    _use_npu_ops(monkeypatch)
    eng = _engine("deepseek_v4", tmp_path / "v4", block_size=64)
    layers = 4  # every layer attends through the kernel; the two ratio-4 ones also index
    for tokens in (10, 2):  # the prefill step, then the decode step
        kernels = _step_kernels(eng)
        assert kernels == V4_KERNELS, sorted(kernels ^ V4_KERNELS)
        attention = fake_torch_npu_util.calls_to("npu_sparse_flash_attention")
        assert len(attention) == layers
        for call in attention:
            assert call["query"] == ((tokens, 1, 4, 512), torch.bfloat16)
            assert call["key"][0][0] == tokens and call["key"][0][2:] == (1, 512)
            assert call["query_rope"][0] == (tokens, 1, 4, 64) and call["same_key_value"]
            assert (call["layout_query"], call["attention_mode"], call["sparse_mode"]) == (
                "BSND",
                2,
                0,
            )
        indexer = fake_torch_npu_util.calls_to("npu_lightning_indexer")
        assert len(indexer) == 2
        for call in indexer:
            assert call["query"] == ((tokens, 1, 8, 128), torch.bfloat16)
            assert call["weights"] == ((tokens, 1, 8), torch.float32)
            blocks, page, heads, dim = call["key"][0]
            assert page % 16 == 0 and (heads, dim) == (1, 128)
            assert call["layout_key"] == "PA_BSND" and call["sparse_mode"] == 0
            assert call["block_table"][1] == torch.int32
