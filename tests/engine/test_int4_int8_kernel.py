"""The int4 x int8 CPU kernel (`activation_quantization: int8`): exact against its own
arithmetic spelled out in torch, batch invariant, wired into the int4 linears and the engine."""

from __future__ import annotations

import pytest
import torch
from engine_helpers import q8_activations
from torch import nn

from engine.forward_context import ForwardContext, forward_context
from engine.quantization.weight_int4 import Int4WeightLinear, dequantize_int4, quantize_int4
from engine.sampling_params import SamplingParams
from npu_ops.cpu_kernels import INT4_INT8_GEMM, int4_int8_gemm, load, pack_int4_codes, unavailable

UNAVAILABLE = unavailable(INT4_INT8_GEMM)
pytestmark = pytest.mark.skipif(UNAVAILABLE is not None, reason=f"kernel: {UNAVAILABLE}")


@pytest.fixture(scope="module", autouse=True)
def kernel() -> None:
    load(INT4_INT8_GEMM)


def _weights(n: int, k: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    torch.manual_seed(5)
    codes, scales, zeros = quantize_int4(torch.randn(n, k) * 0.05)
    offsets = zeros - 8 * scales
    return codes, scales, offsets, dequantize_int4(codes, scales, zeros)


@pytest.mark.parametrize("rows", [1, 3, 8, 9, 16, 33])
def test_kernel_equals_the_q8_activation_product(rows: int) -> None:
    codes, scales, offsets, w = _weights(96, 128)
    x = torch.randn(rows, 128)
    got = int4_int8_gemm(x, pack_int4_codes(codes), scales, offsets)
    expect = q8_activations(x) @ w.t()
    torch.testing.assert_close(got, expect, atol=1e-4, rtol=1e-4)
    # and the activation rounding stays within what Q8_0 promises (half a step per value)
    assert float((got - x @ w.t()).abs().max()) < 0.02 * float((x @ w.t()).abs().max())


def test_a_rows_result_is_the_same_bits_in_any_batch() -> None:
    codes, scales, offsets, _ = _weights(64, 576)
    packed = pack_int4_codes(codes)
    x = torch.randn(21, 576)
    batch = int4_int8_gemm(x, packed, scales, offsets)
    for row in (0, 7, 8, 20):
        alone = int4_int8_gemm(x[row : row + 1].contiguous(), packed, scales, offsets)
        assert torch.equal(alone[0], batch[row]), row


def test_layout_errors_are_clear() -> None:
    with pytest.raises(ValueError, match="N % 16 == 0 and K % 32 == 0"):
        pack_int4_codes(torch.zeros(24, 64, dtype=torch.uint8))
    codes, scales, offsets, _ = _weights(32, 64)
    with pytest.raises(RuntimeError):
        int4_int8_gemm(torch.randn(2, 96), pack_int4_codes(codes), scales, offsets)


def test_int4_linear_sends_every_token_through_the_kernel() -> None:
    torch.manual_seed(6)
    linear = nn.Linear(576, 192, bias=True)
    layer = Int4WeightLinear(linear, int8_activations=True).to(torch.bfloat16)
    assert layer.int8_scales.dtype == torch.float32  # kept exact through the cast
    x = torch.randn(5, 576).bfloat16()
    rows = torch.arange(5)
    ctx = ForwardContext(attention=None, prompt_rows=rows[:2], generated_rows=rows[2:])  # type: ignore[arg-type]
    with forward_context(ctx):
        out = layer(x)
    kernel = int4_int8_gemm(x[2:].float(), layer.packed, layer.int8_scales, layer.int8_offsets)
    assert torch.equal(out[2:], (kernel.bfloat16() + layer.bias))
    prompt = int4_int8_gemm(x[:2].float(), layer.packed, layer.int8_scales, layer.int8_offsets)
    assert torch.equal(out[:2], (prompt.bfloat16() + layer.bias))  # prompt rows too
    assert layer.dense is None  # no dense copy is kept


def test_engine_decodes_through_the_kernel_batch_invariantly(make_engine) -> None:
    """bf16 + int4 SmolLM2 with int8 decode activations: every int4 linear uses the kernel, and
    a request's greedy tokens are the same alone as in a batch of four. (How often greedy
    output differs from float activations: `python -m load_tests.greedy_divergence`.)"""
    engine = make_engine(
        dtype="bfloat16", weight_quantization="int4", activation_quantization="int8"
    )
    layers = [m for m in engine.executor.model.modules() if isinstance(m, Int4WeightLinear)]
    assert layers and all(m.int8_activations for m in layers)
    prompts = [[1, 9690, 198, 2683, 359, 253, 5356, 5646, 30, 2] + [100 + i] * 5 for i in range(4)]
    batched = _generate(engine, {str(i): p for i, p in enumerate(prompts)})
    alone = _generate(engine, {"alone": prompts[2]})
    assert alone["alone"] == batched["2"] and len(alone["alone"]) == 16


def _generate(engine, prompts: dict[str, list[int]]) -> dict[str, list[int]]:
    params = SamplingParams(max_tokens=16, temperature=0.0, ignore_eos=True)
    for rid, prompt in prompts.items():
        engine.add_request(rid, prompt, params)
    tokens: dict[str, list[int]] = {}
    while engine.has_unfinished():
        for o in engine.step():
            tokens.setdefault(o.request_id, []).extend(o.new_token_ids)
    return tokens
