"""Our decoder modules in place of the HF ones (`engine.fused_layers`, `engine.fused_moe`).

Greedy output against unmodified `transformers` is checked per family in `test_families.py`
and on SmolLM2 in `test_greedy_equals_transformers.py` (both run the fused layers); here: which
modules each family gets, and that the merged and unmerged projections compute the same.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from engine.checkpoint_ref import CheckpointRef
from engine.fused_layers import MergedProjection, RegistryAttention, use_fused_layers
from engine.model_loader import load_model
from fixtures.tiny_checkpoints import FAMILY_CONFIGS, make_tiny_checkpoint

LAYERS = 2  # every tiny family has two decoder layers
EXPECTED = {
    # family: replacements installed (norms: 2 per layer + the final one + q/k norms inside
    # attention are not counted, they live in RegistryAttention)
    "llama": {"RegistryAttention": 2, "RegistrySwiGLUMLP": 2, "RegistryRMSNorm": 5},
    "qwen2": {"RegistryAttention": 2, "RegistrySwiGLUMLP": 2, "RegistryRMSNorm": 5},
    "qwen3": {"RegistryAttention": 2, "RegistrySwiGLUMLP": 2, "RegistryRMSNorm": 5},
    "phi3": {"RegistryAttention": 2, "RegistrySwiGLUMLP": 2, "RegistryRMSNorm": 5},
    "qwen3_moe": {
        "RegistryAttention": 2,
        "RegistryExperts": 2,
        "RegistrySoftmaxRouter": 2,
        "RegistryRMSNorm": 5,
    },
    # MLAAttention takes over its q/kv low-rank norms (their gammas); layer 0 is dense
    "deepseek_v2": {
        "RegistryRMSNorm": 5,
        "MLAAttention": 2,
        "RegistrySwiGLUMLP": 2,
        "RegistryExperts": 1,
        "RegistrySoftmaxRouter": 1,
    },
    "deepseek_v3": {
        "RegistryRMSNorm": 5,
        "MLAAttention": 2,
        "RegistrySwiGLUMLP": 2,
        "RegistryExperts": 1,
        "RegistryGroupedRouter": 1,
    },
    # four layers; its norms, MLPs, experts and routers are not among the fused ones
    "deepseek_v4": {"V4Attention": 4},
}


@pytest.mark.parametrize("family", sorted(FAMILY_CONFIGS))
def test_each_family_gets_its_registry_modules(family: str, tmp_path: Path) -> None:
    path = make_tiny_checkpoint(family, tmp_path / family, real_vocab=False, seed=1)
    ref = CheckpointRef.from_path(path)
    model = load_model(ref, torch.float32, torch.device("cpu"), fused_layers=False)
    assert dict(use_fused_layers(model)) == EXPECTED[family]
    if EXPECTED[family].get("RegistryAttention"):
        attn = model.model.layers[0].self_attn
        assert isinstance(attn, RegistryAttention)
        qkv = attn.qkv_proj  # one GEMM for q, k and v (Phi-3's checkpoint has it fused already)
        assert qkv.merged is not None or len(qkv.parts) == 1
        assert (attn.q_norm is not None) == (family == "qwen3" or family == "qwen3_moe")


def test_merged_projection_equals_its_parts() -> None:
    torch.manual_seed(7)
    parts = [nn.Linear(32, 48, bias=True), nn.Linear(32, 16, bias=False), nn.Linear(32, 16)]
    merged = MergedProjection(parts)
    x = torch.randn(5, 32)
    expect = torch.cat([p(x) for p in parts], dim=-1)
    assert merged.merged is not None and merged.sizes == [48, 16, 16]
    torch.testing.assert_close(merged(x), expect, atol=1e-6, rtol=1e-6)


class _NotLinear(nn.Module):
    """A projection that is not a plain nn.Linear (W8A8 layers, tensor-parallel shards)."""

    def __init__(self, inner: nn.Linear) -> None:
        super().__init__()
        self.inner, self.out_features = inner, inner.out_features

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.inner(x)


def test_projections_that_cannot_merge_are_called_one_by_one() -> None:
    torch.manual_seed(8)
    a, b = nn.Linear(32, 8), nn.Linear(32, 24)
    kept = MergedProjection([_NotLinear(a), b])
    x = torch.randn(3, 32)
    assert kept.merged is None
    torch.testing.assert_close(kept(x), torch.cat([a(x), b(x)], dim=-1))
