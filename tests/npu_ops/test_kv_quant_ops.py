"""8-bit KV caches (`npu_ops.ops.kv_quant`): the quantise/dequantise round trip, and every
attention op over a packed cache against the same op over its dequantised float values (the
reference, the CPU kernel, torch's SDPA, and the `npu` implementations through the recording
torch_npu stand-in)."""

from __future__ import annotations

import types

import pytest
import torch
from fake_torch_npu_util import calls_to
from op_helpers import small_shapes

from npu_ops.cpu_kernels import PAGED_DECODE_ATTENTION, unavailable
from npu_ops.ops import attention, cpu_attention, mla, torch_native
from npu_ops.ops.kv_quant import (
    KV_CACHE_DTYPES,
    dequantize_blocks,
    dequantize_kv,
    is_quantized,
    quantize_kv,
    storage_dtype,
)
from npu_ops.ops.npu import attention as npu_attention
from npu_ops.ops.npu import mla as npu_mla
from operate.ops_check.preflight import compare
from operate.ops_check.samples import build_case
from operate.ops_check.shapes import OpShapes

STORAGES = sorted(KV_CACHE_DTYPES.values(), key=str)


@pytest.mark.parametrize("storage", STORAGES, ids=str)
def test_round_trip_is_within_half_a_code_step(storage: torch.dtype) -> None:
    torch.manual_seed(0)
    x = torch.randn(50, 3, 64) * torch.logspace(-3, 2, 50)[:, None, None]
    packed = quantize_kv(x, storage)
    assert packed.dtype == storage and packed.shape == (50, 3, 66) and is_quantized(packed)
    back = dequantize_kv(packed, torch.float32)
    amax = x.abs().amax(-1, keepdim=True)
    if storage == torch.int8:  # step amax / 127; the float16 scale adds a relative 2^-11
        bound = amax / 127 * 0.5 + amax * 2**-10
    else:  # e4m3: 3 mantissa bits, 2^-4 relative; subnormal step 2^-9 of the scale
        bound = x.abs() * 2**-4 + amax / 448 * 2**-9 + amax * 2**-10
    assert ((back - x).abs() <= bound).all()
    assert not torch.equal(back, x)  # it is quantised


def test_zero_rows_and_the_names() -> None:
    packed = quantize_kv(torch.zeros(2, 1, 8), torch.int8)
    assert torch.equal(dequantize_kv(packed, torch.float32), torch.zeros(2, 1, 8))
    assert storage_dtype("fp8_e4m3") == torch.uint8 and storage_dtype("int8") == torch.int8
    with pytest.raises(ValueError, match="unknown kv_cache_dtype 'int4'"):
        storage_dtype("int4")


def _quantised_decode(
    shapes: OpShapes, storage: torch.dtype
) -> tuple[tuple[object, ...], tuple[object, ...]]:
    """The decode case with packed caches, and with their dequantised values as float caches."""
    q, k, v, table, lens, scale = build_case("paged_decode_attention", shapes).args
    pk, pv = quantize_kv(k, storage), quantize_kv(v, storage)
    dk, dv = dequantize_kv(pk, k.dtype), dequantize_kv(pv, v.dtype)
    return (q, pk, pv, table, lens, scale), (q, dk, dv, table, lens, scale)


@pytest.mark.parametrize("storage", STORAGES, ids=str)
def test_decode_over_a_packed_cache_is_decode_over_its_values(storage: torch.dtype) -> None:
    packed, values = _quantised_decode(small_shapes(torch.float32), storage)
    want = attention.paged_decode_attention(*values)
    impls = [attention.paged_decode_attention, torch_native.paged_decode_attention]
    if unavailable(PAGED_DECODE_ATTENTION) is None:
        impls.append(cpu_attention.paged_decode_attention)
    for impl in impls:
        torch.testing.assert_close(impl(*packed), want, rtol=1e-5, atol=1e-5)


def test_dequantised_blocks_get_a_table_of_their_own() -> None:
    cache = quantize_kv(torch.randn(4, 2, 1, 6), torch.int8)  # 4 blocks of 2 slots
    table = torch.tensor([[3, 1], [1, 0]], dtype=torch.int32)
    (values,), new = dequantize_blocks((cache,), table, torch.float32)
    assert new.tolist() == [[0, 1], [2, 3]] and new.dtype == torch.int32
    assert torch.equal(values[new[1, 0]], dequantize_kv(cache[1], torch.float32))


def test_npu_decode_runs_page_attention_on_the_dequantised_blocks(
    fake_torch_npu_module: types.ModuleType,
) -> None:
    packed, values = _quantised_decode(small_shapes(torch.bfloat16), torch.int8)
    got = npu_attention.paged_decode_attention(*packed)
    ok, err, reason = compare(
        "paged_decode_attention", got, attention.paged_decode_attention(*values)
    )
    assert ok, f"{reason} (max abs err {err})"
    (call,) = calls_to("npu_incre_flash_attention")
    rows, width = packed[3].shape  # type: ignore[attr-defined]
    assert call["key"][0] == (rows * width, 16, 2 * 16) and call["key"][1] == torch.bfloat16
    assert call["block_table"][0] == (rows, width)


V3_DECODE = OpShapes(
    dtype=torch.bfloat16, num_tokens=5, block_size=16, mla_heads=32, decode_lens=(5, 17, 33)
)


@pytest.mark.parametrize("storage", STORAGES, ids=str)
def test_mla_decode_over_a_packed_latent(storage: torch.dtype) -> None:
    q, q_pe, kv, kr, table, lens, scale = build_case(
        "mla_decode_attention", small_shapes(torch.float32)
    ).args
    pkv, pkr = quantize_kv(kv, storage), quantize_kv(kr, storage)
    want = mla.mla_decode_attention(
        q, q_pe, dequantize_kv(pkv, kv.dtype), dequantize_kv(pkr, kr.dtype), table, lens, scale
    )
    got = mla.mla_decode_attention(q, q_pe, pkv, pkr, table, lens, scale)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_npu_mla_decode_runs_the_kernel_on_the_dequantised_latent(
    fake_torch_npu_module: types.ModuleType,
) -> None:
    q, q_pe, kv, kr, table, lens, scale = build_case("mla_decode_attention", V3_DECODE).args
    pkv, pkr = quantize_kv(kv, torch.int8), quantize_kv(kr, torch.int8)
    got = npu_mla.mla_decode_attention(q, q_pe, pkv, pkr, table, lens, scale)
    want = mla.mla_decode_attention(q, q_pe, pkv, pkr, table, lens, scale)
    ok, err, reason = compare("mla_decode_attention", got, want)
    assert ok, f"{reason} (max abs err {err})"
    (call,) = calls_to("npu_fused_infer_attention_score")
    assert call["key"][0][1:] == (16, 512) and call["key"][1] == torch.bfloat16


@pytest.mark.parametrize("storage", STORAGES, ids=str)
def test_mla_prolog_quantises_what_it_writes(storage: torch.dtype) -> None:
    args = list(build_case("mla_prolog", small_shapes(torch.float32)).args)
    kv, kr, slots = args[10], args[11], args[9]
    want = mla.mla_prolog(*args)  # float caches, written in place
    float_kv, float_kr = kv.clone(), kr.clone()
    args[10] = torch.zeros(*kv.shape[:-1], kv.shape[-1] + 2, dtype=storage)
    args[11] = torch.zeros(*kr.shape[:-1], kr.shape[-1] + 2, dtype=storage)
    got = mla.mla_prolog(*args)
    torch.testing.assert_close(got[0], want[0])  # the queries do not read the cache
    for packed, ref in ((got[2], float_kv), (got[3], float_kr)):
        rows = packed.flatten(0, 1)[slots]
        assert torch.equal(rows, quantize_kv(ref.flatten(0, 1)[slots], storage))


@pytest.mark.skipif(unavailable(PAGED_DECODE_ATTENTION) is not None, reason="no CPU kernel here")
@pytest.mark.parametrize("storage", STORAGES, ids=str)
def test_cpu_kernel_reads_every_code(storage: torch.dtype) -> None:
    codes = torch.arange(256, dtype=torch.uint8)
    if storage == torch.uint8:  # e4m3fn's NaNs are never written
        codes = codes[(codes & 0x7F) != 0x7F]
    rows = codes.repeat(16 * 16 * 16 // len(codes) + 1)[: 16 * 16 * 16].view(16, 16, 1, 16)
    scale = torch.full((16, 16, 1, 1), 0.01, dtype=torch.float16).view(storage)
    cache = torch.cat((rows.view(storage), scale), dim=-1)  # 16 blocks of 16 rows, D = 16
    table = torch.arange(16, dtype=torch.int32).view(2, 8)
    lens = torch.tensor([128, 101], dtype=torch.int32)
    query = torch.randn(2, 2, 16)
    want = attention.paged_decode_attention(query, cache, cache, table, lens, 0.25)
    got = cpu_attention.paged_decode_attention(query, cache, cache, table, lens, 0.25)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
