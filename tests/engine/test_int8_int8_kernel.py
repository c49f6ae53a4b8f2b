"""The int8 x int8 CPU kernel of the output layer (`output_quantization: int8` with
`activation_quantization: int8`): exact against its own arithmetic spelled out in torch, batch
invariant, and run by the head (tests/engine/test_int8_head.py: what the loader wires in)."""

from __future__ import annotations

import pytest
import torch
from engine_helpers import q8_activations
from torch import nn

from engine.quantization.int8_head import Int8CopyOutputHead
from npu_ops.cpu_kernels import INT8_INT8_GEMM, int8_int8_gemm, load, pack_int8_codes, unavailable

UNAVAILABLE = unavailable(INT8_INT8_GEMM)
pytestmark = pytest.mark.skipif(UNAVAILABLE is not None, reason=f"kernel: {UNAVAILABLE}")


@pytest.fixture(scope="module", autouse=True)
def kernel() -> None:
    load(INT8_INT8_GEMM)


def _weights(n: int, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(7)
    w = torch.randn(n, k) * 0.05
    scales = w.abs().amax(1) / 127
    return torch.round(w / scales[:, None]).clamp(-127, 127).to(torch.int8), scales


@pytest.mark.parametrize("rows", [1, 3, 4, 5, 16])
def test_kernel_equals_the_q8_activation_product(rows: int) -> None:
    codes, scales = _weights(96, 128)
    x = torch.randn(rows, 128)
    got = int8_int8_gemm(x, pack_int8_codes(codes), scales)
    w = codes.float() * scales[:, None]
    torch.testing.assert_close(got, q8_activations(x) @ w.t(), atol=1e-4, rtol=1e-4)


def test_a_rows_result_is_the_same_bits_in_any_batch() -> None:
    codes, scales = _weights(64, 576)
    packed = pack_int8_codes(codes)
    x = torch.randn(11, 576)
    batch = int8_int8_gemm(x, packed, scales)
    for row in (0, 3, 4, 10):
        assert torch.equal(
            int8_int8_gemm(x[row : row + 1].contiguous(), packed, scales)[0], batch[row]
        )


def test_layout_errors_are_clear() -> None:
    with pytest.raises(ValueError, match="N % 16 == 0 and K % 32 == 0"):
        pack_int8_codes(torch.zeros(24, 64, dtype=torch.int8))
    codes, scales = _weights(32, 64)
    with pytest.raises(RuntimeError):
        int8_int8_gemm(torch.randn(2, 96), pack_int8_codes(codes), scales)


def test_head_runs_small_steps_on_the_kernel() -> None:
    torch.manual_seed(8)
    linear = nn.Linear(576, 256, bias=False)
    weight = linear.weight.detach().clone()  # the head shares, and casts, the linear's weight
    head = Int8CopyOutputHead(linear, max_rows=4, int8_activations=True).to(torch.bfloat16)
    x = torch.randn(3, 576).bfloat16()
    expect = int8_int8_gemm(x.float(), head.codes, head.int8_scales).bfloat16()
    assert torch.equal(head(x), expect)
    exact = x.float() @ weight.t()
    assert float((head(x).float() - exact).abs().max()) < 0.05 * float(exact.abs().max())
