"""The output projection's int8 copy (`output_quantization: int8`): kernel choice by rows,
accuracy against the float head, and what the loader does with it."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from engine.checkpoint_ref import CheckpointRef
from engine.model_loader import load_model
from engine.quantization.int8_head import INT8_MAX_ROWS, Int8CopyOutputHead
from npu_ops.cpu_kernels import INT8_INT8_GEMM, unavailable


def _head(max_rows: int | None = INT8_MAX_ROWS) -> tuple[torch.Tensor, Int8CopyOutputHead]:
    """The float32 weight and a bfloat16 head built from it (which shares, and casts, it)."""
    torch.manual_seed(4)
    linear = nn.Linear(576, 4096, bias=False)
    weight = linear.weight.detach().clone()
    return weight, Int8CopyOutputHead(linear, max_rows).to(torch.bfloat16)


def test_small_steps_use_the_int8_copy_and_large_ones_the_float_weight() -> None:
    weight, head = _head()
    x = torch.randn(INT8_MAX_ROWS + 1, 576).bfloat16()
    small = x[:INT8_MAX_ROWS]
    assert torch.equal(head(small), torch._weight_int8pack_mm(small, head.codes, head.scales))
    assert torch.equal(head(x), F.linear(x, weight.bfloat16()))
    exact = small.float() @ weight.t()
    # int8 rounding of the weights: at most half a step per weight, far below bf16's own error
    assert float((head(small).float() - exact).abs().max()) < 0.05 * float(exact.abs().max())


def test_batch_invariant_head_uses_the_int8_copy_at_every_size() -> None:
    _, head = _head(max_rows=None)
    x = torch.randn(16, 576).bfloat16()
    batch = head(x)
    for row in (0, 7, 15):
        assert torch.equal(head(x[row : row + 1])[0], batch[row])


@pytest.mark.parametrize("activations", ["none", "int8"])
def test_loader_adds_the_copy_to_the_tied_head(smollm2_path: str, activations: str) -> None:
    vnni = activations == "int8"
    if vnni and unavailable(INT8_INT8_GEMM) is not None:
        pytest.skip(f"int8_int8_gemm: {unavailable(INT8_INT8_GEMM)}")
    model = load_model(
        CheckpointRef.from_path(smollm2_path),
        torch.bfloat16,
        torch.device("cpu"),
        weight_quantization="int4",
        output_quantization="int8",
        batch_invariant=False,
        activation_quantization=activations,
    )
    head = model.get_output_embeddings()
    assert isinstance(head, Int8CopyOutputHead) and head.int8_activations == vnni
    if vnni:  # the kernel beats the float head at every size: it serves every step
        assert head.max_rows is None and head.codes.dtype == torch.uint8
        assert head.int8_scales.dtype == torch.float32
    else:
        assert head.max_rows == INT8_MAX_ROWS and head.codes.dtype == torch.int8
        assert head.scales.dtype == torch.bfloat16
    embed = model.get_input_embeddings().weight
    assert head.weight.data_ptr() == embed.data_ptr()  # still tied: no second float copy
