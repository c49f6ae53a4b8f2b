"""A W8A8 DeepSeek-V4 checkpoint (`engine.quantization.deepseek_v4`) on the `npu` op table with
the recording `torch_npu` stand-in, in bfloat16 as on an Atlas A2: every int8 linear and the
routed experts call `npu_dynamic_quant` and `npu_quant_matmul`, whose stand-ins assert the
op-plugin docs' dtypes and shapes (a half-precision input, an int8 `[K, N]` weight, a float32
`[N]` scale and `[M]` per-token scale), and the experts route through `npu_moe_init_routing` /
`npu_moe_finalize_routing`."""

from __future__ import annotations

import types
from pathlib import Path

import fake_torch_npu_util
import pytest
import torch

import engine.deepseek_v4.attention
import engine.fused_layers
import engine.fused_moe
import engine.model_runner
import engine.quantization.experts
import engine.quantization.linear
import engine.quantization.loader
from configs.engine_config import EngineConfig
from engine.llm_engine import LLMEngine
from engine.quantization.quantizer import quantize_checkpoint
from engine.sampling_params import SamplingParams
from fixtures.tiny_checkpoints import make_tiny_checkpoint
from npu_ops.ops import REGISTRY
from npu_ops.platform import current_platform

current_platform()  # detected (CPU) before the test installs the torch_npu stand-in

KERNELS = {
    "npu_dynamic_quant",
    "npu_quant_matmul",
    "npu_moe_init_routing",
    "npu_moe_finalize_routing",
}
LINEARS = 4 * 7 + 2
"""int8 linears of the tiny V4: wq_a, wq_b, wkv, wo_b and the shared expert's three per layer,
and the two ratio-4 layers' indexer query projections."""


def test_a_w8a8_v4_step_calls_the_int8_kernels(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake_torch_npu_module: types.ModuleType
) -> None:
    src = make_tiny_checkpoint("deepseek_v4", tmp_path / "float", real_vocab=False, seed=1)
    quantize_checkpoint(src, tmp_path / "w8a8", "w8a8_dynamic")
    npu = REGISTRY.select("npu")
    for module in (
        engine.fused_layers,
        engine.fused_moe,
        engine.model_runner,
        engine.deepseek_v4.attention,
        engine.quantization.linear,
        engine.quantization.experts,
        engine.quantization.loader,
    ):
        monkeypatch.setattr(module, "active_ops", lambda: npu)
    config = EngineConfig(dtype="bfloat16", num_kv_blocks=8, block_size=16, max_model_len=64)
    eng = LLMEngine(str(tmp_path / "w8a8"), config)
    params = SamplingParams(max_tokens=4, temperature=0.0, ignore_eos=True)
    eng.add_request("a", [5, 6, 7, 8, 9, 10, 11], params)
    eng.add_request("b", [12, 13, 14], params)
    for tokens in (10, 2):  # the prefill step, then the decode step
        fake_torch_npu_util.CALLS.clear()
        eng.step()
        kernels = {name for name, _ in fake_torch_npu_util.CALLS}
        assert kernels == KERNELS, sorted(kernels ^ KERNELS)
        matmuls = fake_torch_npu_util.calls_to("npu_quant_matmul")
        assert all(c["output_dtype"] == torch.bfloat16 for c in matmuls)
        # the linears take the step's tokens; each layer's experts at least one GEMM pair
        assert sum(c["x1"][0] == (tokens, c["x1"][0][1]) for c in matmuls) >= LINEARS
        assert len(matmuls) >= LINEARS + 4 * 2
        routed = fake_torch_npu_util.calls_to("npu_moe_init_routing")
        assert len(routed) == 4 and all(c["x"][0][0] == tokens for c in routed)
