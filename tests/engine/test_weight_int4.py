"""Weight-only int4 linears: quantisation arithmetic, the CPU kernel against the reference,
exactness on the Q4_1 SmolLM2 GGUF, and the configuration limits."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from configs.engine_config import EngineConfig
from engine.checkpoint_ref import CheckpointRef
from engine.forward_context import ForwardContext, forward_context
from engine.llm_engine import LLMEngine
from engine.model_loader import load_model
from engine.quantization.weight_int4 import (
    DENSE_MIN_ROWS,
    Int4WeightLinear,
    dequantize_int4,
    quantize_int4,
    quantize_linears_int4,
)


def test_quantize_round_trip_is_within_half_a_step() -> None:
    torch.manual_seed(0)
    w = torch.randn(48, 96) * 0.05
    codes, scales, zeros = quantize_int4(w)
    assert codes.dtype == torch.uint8 and codes.shape == (48, 96)
    assert int(codes.min()) == 0 and int(codes.max()) == 15  # every group spans 0..15
    assert scales.shape == zeros.shape == (3, 48)
    err = (dequantize_int4(codes, scales, zeros) - w).abs().reshape(48, 3, 32)
    assert bool((err <= scales.t()[..., None] / 2 + 1e-7).all())


def test_quantize_rejects_a_width_that_is_not_whole_groups() -> None:
    with pytest.raises(ValueError, match="in_features 40 is not a multiple of 32"):
        quantize_int4(torch.randn(8, 40))


def _ctx(prompt_rows: list[int], generated_rows: list[int]) -> forward_context:
    return forward_context(
        ForwardContext(
            attention=None,  # type: ignore[arg-type]  # linears read only the token kinds
            prompt_rows=torch.tensor(prompt_rows, dtype=torch.long),
            generated_rows=torch.tensor(generated_rows, dtype=torch.long),
        )
    )


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(
    ("cpu_kernel", "prompt_rows"),
    [(True, None), (True, [0, 1, 2, 3, 4]), (True, [1, 3]), (False, None)],
    ids=["int4-kernel", "dense-copy", "mixed", "reference"],
)
def test_linear_matches_the_dequantised_product(
    dtype: torch.dtype, cpu_kernel: bool, prompt_rows: list[int] | None
) -> None:
    torch.manual_seed(1)
    linear = nn.Linear(64, 96, bias=True)
    layer = Int4WeightLinear(linear, cpu_kernel=cpu_kernel).to(dtype)
    codes, scales, zeros = quantize_int4(linear.weight.detach())
    x = torch.randn(1, 5, 64)
    expect = x @ dequantize_int4(codes, scales, zeros).t() + linear.bias.detach()
    if prompt_rows is None:
        out = layer(x.to(dtype))
    else:
        with _ctx(prompt_rows, [r for r in range(5) if r not in prompt_rows]):
            out = layer(x.to(dtype))
    assert out.shape == (1, 5, 96) and out.dtype == dtype
    tol = 1e-4 if dtype == torch.float32 else 0.06
    torch.testing.assert_close(out.float(), expect, atol=tol, rtol=tol)


def test_a_rows_result_does_not_depend_on_its_batch() -> None:
    """Each token's output is bit-identical alone and in any batch, per token kind."""
    torch.manual_seed(2)
    layer = Int4WeightLinear(nn.Linear(576, 1536, bias=False)).to(torch.bfloat16)
    x = torch.randn(9, 576).bfloat16()
    prompt, generated = [0, 1, 2, 3, 4, 5], [6, 7, 8]
    with _ctx(prompt, generated):
        batch = layer(x)
    for row in range(9):
        kinds = ([0], []) if row in prompt else ([], [0])
        with _ctx(*kinds):
            alone = layer(x[row : row + 1])
        assert torch.equal(alone[0], batch[row]), row
    with _ctx([0, 1, 2], []):  # a prompt chunk of three
        assert torch.equal(layer(x[3:6]), batch[3:6])


def test_large_decode_batches_go_through_the_dense_copy() -> None:
    """Without batch invariance, a step of DENSE_MIN_ROWS generated tokens uses the dense GEMM;
    below that, each generated token gets the int4 kernel's result."""
    torch.manual_seed(3)
    linear = nn.Linear(576, 1536, bias=False)
    fast = Int4WeightLinear(linear, dense_min_rows=DENSE_MIN_ROWS).to(torch.bfloat16)
    invariant = Int4WeightLinear(linear).to(torch.bfloat16)
    x = torch.randn(DENSE_MIN_ROWS, 576).bfloat16()
    rows = list(range(DENSE_MIN_ROWS))
    with _ctx([], rows):
        assert torch.equal(fast(x), x @ fast.dense.t())
        assert torch.equal(invariant(x), invariant._int4(x))
    with _ctx([], rows[:-1]):
        assert torch.equal(fast(x[:-1]), invariant._int4(x[:-1]))
    y = torch.randn(DENSE_MIN_ROWS + 1, 576).bfloat16()
    with _ctx([0], list(range(1, DENSE_MIN_ROWS + 1))):  # a prompt token, enough generated: GEMM
        assert torch.equal(fast(y), y @ fast.dense.t())


def test_q4_1_gguf_weights_are_held_exactly(smollm2_path: str) -> None:
    """Re-quantising the dequantised Q4_1 weights gives back the same weights (same codes)."""
    ref = CheckpointRef.from_path(smollm2_path)
    model = load_model(ref, torch.float32, torch.device("cpu"), fused_layers=False)
    for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
        w = getattr(model.model.layers[3].self_attn, name).weight.detach()
        back = dequantize_int4(*quantize_int4(w))
        torch.testing.assert_close(back, w, atol=1e-6, rtol=0)
    for name in ("gate_proj", "up_proj", "down_proj"):
        w = getattr(model.model.layers[7].mlp, name).weight.detach()
        torch.testing.assert_close(dequantize_int4(*quantize_int4(w)), w, atol=1e-6, rtol=0)


def test_only_the_decoder_linears_are_quantised(smollm2_path: str) -> None:
    model = load_model(CheckpointRef.from_path(smollm2_path), torch.float32, torch.device("cpu"))
    replaced = quantize_linears_int4(model, torch.device("cpu"))
    layers = len(model.model.layers)
    assert replaced == 4 * layers  # qkv (merged), o, gate_up (merged), down
    assert isinstance(model.get_output_embeddings(), nn.Linear)  # tied to the embedding


def test_int4_with_tensor_parallel_is_refused_up_front(smollm2_path: str) -> None:
    config = EngineConfig(weight_quantization="int4", num_kv_blocks=8, max_model_len=64)
    with pytest.raises(
        ValueError, match="tensor_parallel_size 1 and pipeline_parallel_size 1 only"
    ):
        LLMEngine(smollm2_path, config, tensor_parallel_size=2)
