"""Which torch_npu kernels one engine step of each family calls, with the recording stand-in.

The engine's modules (`engine.fused_layers`, `engine.fused_moe`, `engine.model_runner`) use the
`npu` op table while the recording `torch_npu` stand-in is installed; the stand-in has the
documented signatures and asserts the documented dtypes and shapes (bfloat16, as on an Atlas
A2), so a wrong call fails. One prefill step and one decode step of every family must call
exactly the kernels listed here, which `docs/architecture.md` ("Ops on the serving path") lists
too.
"""

from __future__ import annotations

import types
from pathlib import Path

import fake_torch_npu_util
import pytest

import engine.fused_layers
import engine.fused_moe
import engine.mla_attention
import engine.model_runner
from configs.engine_config import EngineConfig
from engine.llm_engine import LLMEngine
from engine.sampling_params import SamplingParams
from engine.tiny_checkpoints import FAMILY_CONFIGS, make_tiny_checkpoint
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
}


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
    npu = REGISTRY.select("npu")
    monkeypatch.setattr(engine.fused_layers, "active_ops", lambda: npu)
    monkeypatch.setattr(engine.fused_moe, "active_ops", lambda: npu)
    monkeypatch.setattr(engine.mla_attention, "active_ops", lambda: npu)
    monkeypatch.setattr(engine.model_runner, "active_ops", lambda: npu)
    path = make_tiny_checkpoint(family, tmp_path / family, real_vocab=False, seed=1)
    config = EngineConfig(dtype="bfloat16", num_kv_blocks=8, block_size=16, max_model_len=64)
    eng = LLMEngine(str(path), config)
    params = SamplingParams(max_tokens=4, temperature=0.0, ignore_eos=True)
    eng.add_request("a", [5, 6, 7, 8, 9, 10, 11], params)
    eng.add_request("b", [12, 13, 14], params)
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
