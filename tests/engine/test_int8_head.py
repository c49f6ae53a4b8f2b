"""The output projection's int8 copy (`output_quantization: int8`): kernel choice by rows,
accuracy against the float head, and what the loader does with it."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from engine.model_loader import CheckpointRef, load_model
from engine.quantization.int8_head import INT8_MAX_ROWS, Int8CopyOutputHead


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


def test_loader_adds_the_copy_to_the_tied_head(smollm2_path: str) -> None:
    model = load_model(
        CheckpointRef.from_path(smollm2_path),
        torch.bfloat16,
        torch.device("cpu"),
        weight_quantization="int4",
        output_quantization="int8",
        batch_invariant=False,
    )
    head = model.get_output_embeddings()
    assert isinstance(head, Int8CopyOutputHead) and head.max_rows == INT8_MAX_ROWS
    assert head.codes.dtype == torch.int8 and head.scales.dtype == torch.bfloat16
    embed = model.get_input_embeddings().weight
    assert head.weight.data_ptr() == embed.data_ptr()  # still tied: no second float copy
