"""Op selection: per-platform defaults, `ASCEND_ROUTER_OP_IMPL` overrides, errors, logging."""

from __future__ import annotations

import logging

import pytest

import npu_ops.ops as ops_pkg
from configs import envs
from npu_ops.cpu_kernels import (
    BLOCK_DEQUANTIZE,
    GROUPED_LORA,
    PAGED_DECODE_ATTENTION,
    unavailable,
)
from npu_ops.ops import REGISTRY
from npu_ops.ops.registry import OpRegistry


def test_npu_platform_chooses_every_npu_kernel() -> None:
    table = REGISTRY.select("npu")
    assert {table.impl_name(op) for op in REGISTRY.names()} == {"npu"}


def test_cuda_platform_chooses_torch_kernels_where_registered() -> None:
    table = REGISTRY.select("cuda")
    chosen = {op: table.impl_name(op) for op in REGISTRY.names()}
    assert {op for op, impl in chosen.items() if impl == "torch"} == {
        "rms_norm",
        "add_rms_norm",
        "layer_norm",
        "prefill_attention",
        "paged_decode_attention",
        "encoder_attention",
    }
    assert chosen["swiglu"] == "reference" and chosen["fp8_block_matmul"] == "cuda"


def test_cpu_platform_runs_torch_norms_our_attention_and_references_otherwise() -> None:
    table = REGISTRY.select("cpu")
    chosen = {op: table.impl_name(op) for op in REGISTRY.names()}
    ours = {"paged_decode_attention"} if unavailable(PAGED_DECODE_ATTENTION) is None else set()
    if unavailable(BLOCK_DEQUANTIZE) is None:
        ours |= {"fp8_block_matmul", "mxfp4_matmul", "mxfp4_grouped_matmul"}
    if unavailable(GROUPED_LORA) is None:
        ours.add("grouped_lora")
    assert {op for op, impl in chosen.items() if impl != "reference"} == {
        "rms_norm",
        "add_rms_norm",
        "layer_norm",
        "encoder_attention",
        *ours,
    }
    assert chosen["rms_norm"] == "torch" and chosen["swiglu"] == "reference"
    assert table.rotary_embedding is REGISTRY.get("rotary_embedding").reference.fn


def test_override_replaces_one_op_and_is_marked_in_the_log(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.INFO, logger="npu_ops.ops.registry"):
        table = REGISTRY.select("npu", {"rms_norm": "reference"})
    assert table.impl_name("rms_norm") == "reference" and table.impl_name("swiglu") == "npu"
    assert "rms_norm=reference*" in caplog.text and "swiglu=npu," in caplog.text


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"rmsnorm": "npu"}, "unknown op 'rmsnorm'"),
        ({"swiglu": "torch"}, "no implementation 'torch'"),
    ],
)
def test_bad_overrides_fail_at_selection(overrides: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        REGISTRY.select("cpu", overrides)


def test_env_overrides_are_parsed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ASCEND_ROUTER_OP_IMPL", " rms_norm=reference, swiglu=npu ,")
    assert envs.op_impl_overrides() == {"rms_norm": "reference", "swiglu": "npu"}
    monkeypatch.setenv("ASCEND_ROUTER_OP_IMPL", "rms_norm")
    with pytest.raises(ValueError, match="not 'op=impl'"):
        envs.op_impl_overrides()
    monkeypatch.delenv("ASCEND_ROUTER_OP_IMPL")
    assert envs.op_impl_overrides() == {}


def test_active_ops_is_chosen_once_with_env_overrides(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ASCEND_ROUTER_OP_IMPL", "rms_norm=reference")
    ops_pkg.active_ops.cache_clear()
    try:
        table = ops_pkg.active_ops()
        assert table.platform == "cpu" and table.impl_name("rms_norm") == "reference"
        assert ops_pkg.active_ops() is table
    finally:
        ops_pkg.active_ops.cache_clear()


def test_table_names_unknown_ops() -> None:
    with pytest.raises(AttributeError, match="no op named 'softmax'"):
        _ = REGISTRY.select("cpu").softmax


def test_registry_rejects_duplicates() -> None:
    reg = OpRegistry()
    reg.define("double", lambda x: 2 * x, "twice")
    with pytest.raises(ValueError, match="already defined"):
        reg.define("double", lambda x: 2 * x, "twice")
    reg.register("double", "npu", lambda x: x + x, ("npu",))
    with pytest.raises(ValueError, match="already has"):
        reg.register("double", "npu", lambda x: x + x, ("npu",))
    with pytest.raises(ValueError, match="unknown op"):
        reg.register("half", "npu", lambda x: x / 2, ("npu",))
    assert reg.select("npu").double(3) == 6
