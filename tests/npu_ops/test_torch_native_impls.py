"""The `torch` implementations (torch's fused kernels) against the references, on CPU tensors."""

from __future__ import annotations

import pytest
import torch
from op_helpers import small_shapes

from npu_ops.ops import REGISTRY
from operate.ops_check.preflight import compare
from operate.ops_check.samples import build_case

TORCH_OPS = sorted(op.name for op in REGISTRY if "torch" in [i.name for i in op.impls])


def test_torch_impls_cover_norms_and_attention() -> None:
    assert TORCH_OPS == [
        "add_rms_norm",
        "encoder_attention",
        "layer_norm",
        "paged_decode_attention",
        "prefill_attention",
        "rms_norm",
    ]
    for op in TORCH_OPS:
        impl = REGISTRY.get(op).implementation("torch")
        cpu_too = op.endswith("_norm") or op == "encoder_attention"
        assert impl.portable and impl.platforms == frozenset(
            {"cuda", "cpu"} if cpu_too else {"cuda"}
        )


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("op", TORCH_OPS)
def test_torch_impl_matches_reference_on_cpu(op: str, dtype: torch.dtype) -> None:
    opdef = REGISTRY.get(op)
    case = build_case(op, small_shapes(dtype))
    ok, err, reason = compare(
        op, opdef.implementation("torch").fn(*case.args), opdef.reference.fn(*case.args)
    )
    assert ok, f"{op} {dtype}: {reason} (max abs err {err})"


@pytest.mark.parametrize("op", ["prefill_attention", "paged_decode_attention"])
def test_torch_attention_handles_mla_head_sizes(op: str) -> None:
    shapes = small_shapes(torch.float32, num_heads=2, num_kv_heads=2, k_head_dim=24, v_head_dim=16)
    opdef = REGISTRY.get(op)
    case = build_case(op, shapes)
    got = opdef.implementation("torch").fn(*case.args)
    assert got.shape[-1] == 16
    ok, _, reason = compare(op, got, opdef.reference.fn(*case.args))
    assert ok, reason
