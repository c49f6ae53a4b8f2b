"""Ops `fp8_block_matmul` and `mxfp4_matmul`: their dequantisation equals transformers' own
(`Fp8Dequantize._dequantize_one`, integrations/finegrained_fp8.py), partial edge tiles included,
and the GEMM is the dequantised weight's; the `cpu` kernel equals the reference; Ascend 950's
FP8 / MX `npu_quant_matmul` calls (recording stand-in) and CUDA's blockwise `scaled_mm` arguments
(torch's meta checks, no GPU) compute the same product within FP8 activation rounding."""

from __future__ import annotations

import sys
import types
from collections.abc import Callable, Iterator

import fake_torch_npu
import fake_torch_npu_fp8
import fake_torch_npu_util
import pytest
import torch
import torch.nn.functional as F
from fake_torch_npu_util import calls_to
from transformers.integrations.finegrained_fp8 import Fp8Dequantize

from fixtures.fp8_checkpoints import quantize_fp8_block, quantize_mxfp4
from npu_ops import platform
from npu_ops.cpu_kernels import BLOCK_DEQUANTIZE, unavailable
from npu_ops.ops import REGISTRY, cpu_quant, cuda_fp8, quant
from npu_ops.ops.npu import fp8 as npu_fp8


@pytest.mark.parametrize("ue8m0", [False, True])
def test_fp8_blocks_dequantise_as_transformers(ue8m0: bool) -> None:
    w = torch.randn(64, 96)
    codes, scale = quantize_fp8_block(w, (32, 32), ue8m0)
    got = quant.dequantize_fp8_block(codes, scale, (32, 32))
    assert torch.equal(got, Fp8Dequantize(None)._dequantize_one(codes, scale, torch.float32))
    assert float((got - w).abs().max() / w.abs().max()) < 0.07  # e4m3: 3 mantissa bits


def test_partial_edge_tiles_take_their_tile_scale() -> None:
    w = torch.randn(40, 24)  # 3 x 2 tiles of 16: the last row/column tiles are partial
    codes, scale = quantize_fp8_block(w, (16, 16), ue8m0=False)
    assert scale.shape == (3, 2)
    got = quant.dequantize_fp8_block(codes, scale, (16, 16))
    assert torch.equal(got[32:, 16:], codes[32:, 16:].float() * scale[2, 1])


def test_mxfp4_unpacks_low_nibble_first_as_transformers() -> None:
    w = torch.randn(8, 64)
    packed, scale = quantize_mxfp4(w)
    assert packed.shape == (8, 32) and scale.shape == (8, 2)
    got = quant.dequantize_mxfp4(packed, scale)
    want = Fp8Dequantize(None)._dequantize_one(packed, scale, torch.float32)
    assert torch.equal(got, want)
    assert got[0, 0] == quant.FP4_E2M1_VALUES[int(packed.view(torch.uint8)[0, 0]) & 0xF] * float(
        scale[0, 0].float()
    )


def test_matmuls_use_the_dequantised_weights() -> None:
    x = torch.randn(5, 64, dtype=torch.bfloat16)
    codes, scale = quantize_fp8_block(torch.randn(48, 64), (16, 32), ue8m0=True)
    want = x @ quant.dequantize_fp8_block(codes, scale, (16, 32)).to(x.dtype).T
    assert torch.equal(quant.fp8_block_matmul(x, codes, scale, (16, 32)), want)
    packed, s4 = quantize_mxfp4(torch.randn(48, 64))
    want = x @ quant.dequantize_mxfp4(packed, s4).to(x.dtype).T
    assert torch.equal(quant.mxfp4_matmul(x, packed, s4), want)


def test_a_wrong_scale_grid_names_the_shapes() -> None:
    codes, scale = quantize_fp8_block(torch.randn(32, 32), (16, 16), ue8m0=False)
    with pytest.raises(ValueError, match=r"needs scales \[2, 2\], got \[1, 2\]"):
        quant.dequantize_fp8_block(codes, scale[:1], (16, 16))


# --- cpu: the table-lookup kernel ---------------------------------------------------------------

needs_kernel = pytest.mark.skipif(
    unavailable(BLOCK_DEQUANTIZE) is not None, reason=f"{unavailable(BLOCK_DEQUANTIZE)}"
)


def _fp8_case(n: int, k: int, block: tuple[int, int], ue8m0: bool) -> tuple[torch.Tensor, ...]:
    codes, scale = quantize_fp8_block(torch.randn(n, k), block, ue8m0)
    return codes, scale


@needs_kernel
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_cpu_dequantisation_is_bit_equal_to_the_reference(dtype: torch.dtype) -> None:
    codes, scale = _fp8_case(40, 56, (16, 16), ue8m0=False)  # partial edge tiles both ways
    want = quant.dequantize_fp8_block(codes, scale, (16, 16)).to(dtype)
    out = torch.empty(40, 56, dtype=dtype)
    got = cpu_quant.dequantize_into(
        out, codes.view(torch.uint8), cpu_quant.FP8_TABLE, scale, (16, 16)
    )
    assert torch.equal(got, want)
    packed, s4 = quantize_mxfp4(torch.randn(24, 80))  # K = 80: a partial 32-block
    want = quant.dequantize_mxfp4(packed, s4).to(dtype)
    out = torch.empty(24, 80, dtype=dtype)
    table = cpu_quant.FP4_TABLE
    got = cpu_quant.dequantize_into(out, packed.view(torch.uint8), table, s4.float(), (1, 32))
    assert torch.equal(got, want)


@needs_kernel
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("rows", [1, 7])
@pytest.mark.parametrize("ue8m0", [False, True])
def test_cpu_matmuls_equal_the_reference(
    monkeypatch: pytest.MonkeyPatch, dtype: torch.dtype, rows: int, ue8m0: bool
) -> None:
    """Several bands (the band is shrunk to 2 tile rows), bias included. The weights are
    bit-equal; the products are the same GEMMs on a band of rows, so they agree to rounding."""
    monkeypatch.setattr(cpu_quant, "BAND_BYTES", 2 * 16 * 96 * 4)
    x = torch.randn(rows, 96, dtype=dtype)
    bias = torch.randn(72, dtype=dtype)
    codes, scale = _fp8_case(72, 96, (16, 32), ue8m0)
    got = cpu_quant.fp8_block_matmul(x, codes, scale, (16, 32), bias)
    want = quant.fp8_block_matmul(x, codes, scale, (16, 32), bias)
    torch.testing.assert_close(got, want)
    packed, s4 = quantize_mxfp4(torch.randn(72, 96))
    got = cpu_quant.mxfp4_matmul(x, packed, s4, bias)
    torch.testing.assert_close(got, quant.mxfp4_matmul(x, packed, s4, bias))


def _experts(hidden: int, out: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Three experts' MXFP4 weights `[3, out, hidden / 2]` and scales."""
    quantized = [quantize_mxfp4(torch.randn(out, hidden)) for _ in range(3)]
    return torch.stack([q[0] for q in quantized]), torch.stack([q[1] for q in quantized])


@needs_kernel
def test_cpu_grouped_matmul_equals_the_reference() -> None:
    x = torch.randn(9, 64)
    packed, s4 = _experts(64, 40)
    sizes = torch.tensor([4, 0, 5])  # an expert without rows
    got = cpu_quant.mxfp4_grouped_matmul(x, packed, s4, sizes)
    torch.testing.assert_close(got, quant.mxfp4_grouped_matmul(x, packed, s4, sizes))
    with pytest.raises(ValueError, match=r"3 experts' rows summing to 9, got \[4, 0, 4\]"):
        quant.mxfp4_grouped_matmul(x, packed, s4, torch.tensor([4, 0, 4]))


@needs_kernel
def test_cpu_is_the_registered_cpu_implementation() -> None:
    for op in ("fp8_block_matmul", "mxfp4_matmul", "mxfp4_grouped_matmul"):
        impl = REGISTRY.get(op).implementation("cpu")
        assert impl.fn is getattr(cpu_quant, op) and impl.platforms == frozenset({"cpu"})


# --- npu: Ascend 950's FP8 / MX matmul against the recording stand-in ---------------------------


@pytest.fixture
def ascend(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[int], types.ModuleType]]:
    """Install the 950 torch_npu stand-in and report SoC version `soc` (260: Ascend 950)."""

    def install(soc: int) -> types.ModuleType:
        fake_torch_npu_util.CALLS.clear()
        module = fake_torch_npu_fp8.make_module()
        monkeypatch.setitem(sys.modules, "torch_npu", module)
        monkeypatch.setattr(platform, "npu_soc_version", lambda: soc)
        return module

    yield install
    fake_torch_npu_util.CALLS.clear()


W8A8_BOUND = 0.05
"""Largest error of a W8A8 product against the weight-only reference, relative to the largest
output: e4m3 activations round each value by up to 2^-4 (measured up to 3.1%)."""


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)


def _relative_error(got: torch.Tensor, want: torch.Tensor) -> float:
    return float((got.float() - want.float()).abs().max() / want.float().abs().max())


@pytest.mark.parametrize("ue8m0", [False, True])
def test_950_fp8_uses_the_gb_quant_matmul(
    ascend: Callable[[int], types.ModuleType], ue8m0: bool
) -> None:
    ascend(platform.ASCEND_950_SOC_VERSION)
    x = torch.randn(5, 320, dtype=torch.bfloat16)  # K = 320: a last K slice of 64
    codes, scale = _fp8_case(256, 320, (128, 128), ue8m0)
    bias = torch.randn(256, dtype=torch.bfloat16)
    got = npu_fp8.fp8_block_matmul(x, codes, scale, (128, 128), bias)
    (call,) = calls_to("npu_quant_matmul")
    assert call["group_sizes"] == [1, 128, 128] and call["output_dtype"] == torch.bfloat16
    assert call["x1"] == ((5, 320), torch.float8_e4m3fn) and call["x2"][0] == (320, 256)
    assert call["x2_transposed"] and call["scale_transposed"]
    assert call["pertoken_scale"] == ((5, 3), torch.float32)
    # W8A8: e4m3 activations (3 mantissa bits) against the weight-only reference
    assert (
        _relative_error(got, quant.fp8_block_matmul(x, codes, scale, (128, 128), bias)) < W8A8_BOUND
    )


def test_950_mxfp4_uses_the_mx_quant_matmul(ascend: Callable[[int], types.ModuleType]) -> None:
    ascend(platform.ASCEND_950_SOC_VERSION)
    x = torch.randn(3, 128, dtype=torch.bfloat16)
    packed, s4 = quantize_mxfp4(torch.randn(48, 128))
    got = npu_fp8.mxfp4_matmul(x, packed, s4)
    (quantized,) = calls_to("npu_dynamic_mx_quant")
    assert quantized["dst_type"] == torch.float8_e4m3fn
    (call,) = calls_to("npu_quant_matmul")
    assert call["group_sizes"] == [1, 1, 32] and call["x2_dtype"] == torch.float4_e2m1fn_x2
    assert call["x2"] == ((64, 48), torch.uint8) and call["x2_transposed"]
    assert call["scale"] == ((2, 48, 2), torch.uint8) and call["pertoken_scale"][0] == (3, 2, 2)
    assert _relative_error(got, quant.mxfp4_matmul(x, packed, s4)) < W8A8_BOUND


def test_950_experts_use_one_grouped_matmul(ascend: Callable[[int], types.ModuleType]) -> None:
    ascend(platform.ASCEND_950_SOC_VERSION)
    x = torch.randn(9, 128, dtype=torch.bfloat16)
    packed, s4 = _experts(128, 40)
    sizes = torch.tensor([4, 0, 5])
    got = npu_fp8.mxfp4_grouped_matmul(x, packed, s4, sizes)
    (call,) = calls_to("npu_grouped_matmul")
    assert call["weight"] == ((3, 64, 40), torch.uint8) and call["split_item"] == 2
    assert call["antiquant_scale"][0] == (3, 2, 40, 2) and call["per_token_scale"][0] == (9, 2, 2)
    assert call["group_list"][1] == torch.int64 and call["weight_dtype"] == torch.float4_e2m1fn_x2
    want = quant.mxfp4_grouped_matmul(x, packed, s4, sizes)
    assert _relative_error(got, want) < W8A8_BOUND


@pytest.mark.parametrize(
    "soc", [fake_torch_npu.ATLAS_A2_SOC_VERSION, platform.ASCEND_950_SOC_VERSION]
)
def test_npu_falls_back_to_the_reference(
    ascend: Callable[[int], types.ModuleType], soc: int
) -> None:
    """Atlas A2 always; the 950 for blocks other than 128 x 128, K not a multiple of 64
    (MX) and float32 activations."""
    ascend(soc)
    x = torch.randn(4, 96, dtype=torch.bfloat16)
    codes, scale = _fp8_case(64, 96, (32, 32), ue8m0=True)
    want = quant.fp8_block_matmul(x, codes, scale, (32, 32))
    assert torch.equal(npu_fp8.fp8_block_matmul(x, codes, scale, (32, 32)), want)
    packed, s4 = quantize_mxfp4(torch.randn(16, 96))
    assert torch.equal(npu_fp8.mxfp4_matmul(x, packed, s4), quant.mxfp4_matmul(x, packed, s4))
    x32 = torch.randn(2, 128)
    packed, s4 = quantize_mxfp4(torch.randn(16, 128))
    assert torch.equal(npu_fp8.mxfp4_matmul(x32, packed, s4), quant.mxfp4_matmul(x32, packed, s4))
    experts, scales = _experts(96, 16)
    sizes = torch.tensor([1, 2, 1])
    want = quant.mxfp4_grouped_matmul(x, experts, scales, sizes)
    assert torch.equal(npu_fp8.mxfp4_grouped_matmul(x, experts, scales, sizes), want)
    assert fake_torch_npu_util.CALLS == []


# --- cuda: the blockwise scaled_mm, checked without a GPU ---------------------------------------


def test_cuda_dispatch_decision() -> None:
    cuda = torch.device("cuda", 0)
    ok = (cuda, (9, 0), (128, 128), 256, 512, torch.bfloat16)
    assert cuda_fp8.blockwise_unsupported(*ok) is None
    assert cuda_fp8.blockwise_unsupported(torch.device("cpu"), None, *ok[2:]) is not None
    assert "below SM90" in str(cuda_fp8.blockwise_unsupported(cuda, (8, 9), *ok[2:]))
    assert "[64, 64]" in str(
        cuda_fp8.blockwise_unsupported(cuda, (9, 0), (64, 64), 256, 512, ok[5])
    )
    assert "whole" in str(
        cuda_fp8.blockwise_unsupported(cuda, (10, 0), (128, 128), 200, 512, ok[5])
    )
    assert "float16" in str(cuda_fp8.blockwise_unsupported(*ok[:5], torch.float16))


@pytest.mark.parametrize("ue8m0", [False, True])
def test_cuda_scaled_mm_arguments(ue8m0: bool) -> None:
    """torch's own meta checks of `scaled_mm` accept the layouts (K = 384: 3 K blocks, padded
    to 4), and the recipe's formula over them gives the FP8 product."""
    x = torch.randn(6, 384, dtype=torch.bfloat16)
    codes, scale = _fp8_case(256, 384, (128, 128), ue8m0)
    mat_a, mat_b, scale_a, scale_b = cuda_fp8.scaled_mm_args(x, codes, scale)
    assert scale_a.stride() == (1, 6) and scale_b.shape == (4, 2) and scale_b.stride() == (1, 4)
    meta = [t.to("meta") for t in (mat_a, mat_b, scale_a, scale_b)]
    out = F.scaled_mm(
        meta[0],
        meta[1],
        meta[2],
        F.ScalingType.BlockWise1x128,
        meta[3],
        F.ScalingType.BlockWise128x128,
        output_dtype=torch.bfloat16,
    )
    assert out.shape == (6, 256) and out.dtype == torch.bfloat16
    blocks = [
        (mat_a[:, j : j + 128].double() @ mat_b[j : j + 128].double())
        * scale_a[:, i : i + 1].double()
        * scale_b[i].double().repeat_interleave(128)
        for i, j in enumerate(range(0, 384, 128))
    ]
    got = sum(blocks[1:], blocks[0]).to(torch.bfloat16)
    assert _relative_error(got, quant.fp8_block_matmul(x, codes, scale, (128, 128))) < W8A8_BOUND


def test_cuda_impl_runs_the_reference_off_a_gpu() -> None:
    x = torch.randn(3, 256, dtype=torch.bfloat16)
    codes, scale = _fp8_case(128, 256, (128, 128), ue8m0=False)
    want = quant.fp8_block_matmul(x, codes, scale, (128, 128))
    assert torch.equal(cuda_fp8.fp8_block_matmul(x, codes, scale, (128, 128)), want)
