"""The encoders' ops: `encoder_attention` and `layer_norm`, reference and every implementation.

References against formulas written independently (a block-diagonal mask over the whole batch,
`torch.nn.LayerNorm`), the `torch` implementations against the references, and the `npu` ones
against the recording torch_npu stand-in (documented signature, asserted layout).
"""

from __future__ import annotations

import types

import fake_torch_npu_util
import pytest
import torch
import torch.nn.functional as F
from fake_torch_npu_util import calls_to

from npu_ops.ops import REGISTRY, torch_native
from npu_ops.ops.encoder_attention import encoder_attention
from npu_ops.ops.norm import layer_norm

LENS = (5, 1, 9)  # a one-token segment and an odd length among them
HEADS, HEAD_DIM = 2, 16


def _qkv(dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    t = sum(LENS)
    q, k, v = (torch.randn(t, HEADS, HEAD_DIM, generator=g).to(dtype) for _ in range(3))
    cu = torch.tensor([0, 5, 6, 15], dtype=torch.int32)
    return q, k, v, cu


def test_reference_is_sdpa_under_a_block_diagonal_mask() -> None:
    q, k, v, cu = _qkv(torch.float32)  # the reference computes in float32
    q, k, v = q.double(), k.double(), v.double()
    seg = torch.repeat_interleave(torch.arange(len(LENS)), torch.tensor(LENS))
    mask = seg[:, None] == seg[None, :]
    want = F.scaled_dot_product_attention(
        q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1), attn_mask=mask, scale=0.3
    ).transpose(0, 1)
    torch.testing.assert_close(encoder_attention(q, k, v, cu, 0.3), want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    ("cu", "message"),
    [
        (torch.tensor([0, 5, 15]), "int32"),
        (torch.tensor([0, 5, 14], dtype=torch.int32), "from 0 to T=15"),
        (torch.tensor([0, 5, 5, 15], dtype=torch.int32), "strictly increasing"),
    ],
)
def test_bad_boundaries_are_refused(cu: torch.Tensor, message: str) -> None:
    q, k, v, _ = _qkv(torch.float32)
    for impl in REGISTRY.get("encoder_attention").implementations():
        if impl.portable:
            with pytest.raises(ValueError, match=message):
                impl.fn(q, k, v, cu, 0.25)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_torch_encoder_attention_matches_the_reference(dtype: torch.dtype) -> None:
    q, k, v, cu = _qkv(dtype)
    tol = {} if dtype == torch.float32 else {"rtol": 2e-2, "atol": 2e-2}
    torch.testing.assert_close(
        torch_native.encoder_attention(q, k, v, cu, 0.25),
        encoder_attention(q, k, v, cu, 0.25),
        **tol,
    )


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_npu_encoder_attention_is_one_tnd_call_without_a_mask(
    fake_torch_npu_module: types.ModuleType, dtype: torch.dtype
) -> None:
    q, k, v, cu = _qkv(dtype)
    got = REGISTRY.get("encoder_attention").implementation("npu").fn(q, k, v, cu, 0.25)
    (call,) = calls_to("npu_fusion_attention")
    assert call["input_layout"] == "TND" and call["sparse_mode"] == 0
    assert call["atten_mask"] is None and call["head_num"] == HEADS
    assert call["actual_seq_qlen"] == call["actual_seq_kvlen"] == [5, 6, 15]
    torch.testing.assert_close(got, encoder_attention(q, k, v, cu, 0.25))


def test_layer_norm_reference_is_torch_s_layer_norm_module() -> None:
    x = torch.randn(3, 7, 32, dtype=torch.float64)
    ln = torch.nn.LayerNorm(32, eps=1e-5, dtype=torch.float64)
    torch.nn.init.normal_(ln.weight)
    torch.nn.init.normal_(ln.bias)
    with torch.no_grad():
        tol = {"rtol": 1e-5, "atol": 1e-5}  # float32 statistics against float64
        torch.testing.assert_close(layer_norm(x, ln.weight, ln.bias, 1e-5), ln(x), **tol)
        no_bias = F.layer_norm(x, (32,), ln.weight, None, 1e-5)
        torch.testing.assert_close(layer_norm(x, ln.weight, None, 1e-5), no_bias, **tol)


@pytest.mark.parametrize("impl", ["torch", "npu"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_layer_norm_implementations_match_the_reference(impl: str, dtype: torch.dtype) -> None:
    x, w, b = torch.randn(4, 32).to(dtype), torch.randn(32).to(dtype), torch.randn(32).to(dtype)
    tol = {} if dtype == torch.float32 else {"rtol": 2e-2, "atol": 2e-2}
    got = REGISTRY.get("layer_norm").implementation(impl).fn(x, w, b, 1e-5)
    torch.testing.assert_close(got, layer_norm(x, w, b, 1e-5), **tol)


def test_platform_choices() -> None:
    for op in ("encoder_attention", "layer_norm"):
        assert REGISTRY.select("npu").impl_name(op) == "npu"
        assert REGISTRY.select("cuda").impl_name(op) == "torch"
        assert REGISTRY.select("cpu").impl_name(op) == "torch"


# The encoders' own attention modules through `engine.multimodal.encoder_attention`: the tiny
# Qwen2.5-VL vision tower and Qwen2-Audio audio tower give what they give under SDPA/eager.

GRID = torch.tensor([[1, 4, 8], [1, 6, 4]])  # two images: 32 and 24 patches, 2x2 windows each
FEATURE_LENS = (3000, 1100)  # one full 30 s window, one clip padded from 11 s


@pytest.fixture(scope="module")
def vision_tower() -> torch.nn.Module:
    from transformers.models.qwen2_5_vl.modeling_qwen2_5_vl import (
        Qwen2_5_VisionTransformerPretrainedModel,
    )

    from fixtures.tiny_multimodal import tiny_multimodal_config

    torch.manual_seed(0)
    config = tiny_multimodal_config("qwen2_5_vl").vision_config
    return Qwen2_5_VisionTransformerPretrainedModel._from_config(config).eval()


@pytest.fixture(scope="module")
def audio_tower() -> torch.nn.Module:
    from transformers.models.qwen2_audio.modeling_qwen2_audio import Qwen2AudioEncoder

    from fixtures.tiny_multimodal import tiny_multimodal_config

    torch.manual_seed(0)
    return Qwen2AudioEncoder._from_config(tiny_multimodal_config("qwen2_audio").audio_config).eval()


def _vision(tower: torch.nn.Module, implementation: str) -> torch.Tensor:
    tower.config._attn_implementation = implementation
    pixels = torch.randn(int(GRID.prod(-1).sum()), 1176, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        return tower(pixels, grid_thw=GRID).pooler_output  # [merged tokens, out_hidden]


def _audio(tower: torch.nn.Module, implementation: str) -> list[torch.Tensor]:
    """Each clip's encoder output, cut to its length, with the mask Qwen2-Audio builds."""
    from transformers.masking_utils import create_bidirectional_mask

    tower.config._attn_implementation = implementation
    g = torch.Generator().manual_seed(2)
    features = torch.randn(len(FEATURE_LENS), 128, 3000, generator=g)
    frames, out_lens = tower._get_feat_extract_output_lengths(torch.tensor(FEATURE_LENS))
    valid = (torch.arange(1500) < frames[:, None]).long()
    mask = create_bidirectional_mask(
        config=tower.config,
        inputs_embeds=torch.zeros(len(FEATURE_LENS), 1500, 1),
        attention_mask=valid,
    )
    with torch.no_grad():
        hidden = tower(features, attention_mask=mask).last_hidden_state
    return [row[:n] for row, n in zip(hidden, out_lens.tolist())]


@pytest.mark.parametrize("baseline", ["sdpa", "eager"])
def test_vision_tower_output_is_unchanged(vision_tower: torch.nn.Module, baseline: str) -> None:
    from engine.multimodal.encoder_attention import ENCODER_ATTENTION_NAME

    want = _vision(vision_tower, baseline)
    torch.testing.assert_close(
        _vision(vision_tower, ENCODER_ATTENTION_NAME), want, rtol=1e-5, atol=1e-5
    )


def test_audio_tower_output_is_unchanged_with_a_padded_clip(audio_tower: torch.nn.Module) -> None:
    from engine.multimodal.encoder_attention import ENCODER_ATTENTION_NAME

    for got, want in zip(
        _audio(audio_tower, ENCODER_ATTENTION_NAME), _audio(audio_tower, "sdpa"), strict=True
    ):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_towers_call_the_npu_kernel_in_tnd(
    vision_tower: torch.nn.Module,
    audio_tower: torch.nn.Module,
    monkeypatch: pytest.MonkeyPatch,
    fake_torch_npu_module: types.ModuleType,
) -> None:
    import engine.multimodal.encoder_attention as encoder

    npu = REGISTRY.select("npu")
    monkeypatch.setattr(encoder, "active_ops", lambda: npu)
    torch.testing.assert_close(
        _vision(vision_tower, encoder.ENCODER_ATTENTION_NAME),
        _vision(vision_tower, "sdpa"),
        rtol=1e-5,
        atol=1e-5,
    )
    # one call per image (the full-attention block) or window (the windowed block)
    calls = calls_to("npu_fusion_attention")
    assert calls and all(c["input_layout"] == "TND" and c["sparse_mode"] == 0 for c in calls)
    fake_torch_npu_util.CALLS.clear()
    _audio(audio_tower, encoder.ENCODER_ATTENTION_NAME)
    calls = calls_to("npu_fusion_attention")
    assert len(calls) == 2  # one per encoder layer, both clips in one call
    # clip 0 whole; clip 1's 550 frames, then its padding on its own
    assert calls[0]["actual_seq_qlen"] == [1500, 2050, 3000]


def test_a_mask_that_is_not_key_padding_is_refused() -> None:
    from engine.multimodal.encoder_attention import segments

    causal = torch.ones(4, 4, dtype=torch.bool).tril()[None, None]
    with pytest.raises(ValueError, match="suffix of padding keys"):
        segments(1, 4, causal, torch.device("cpu"))
    with pytest.raises(ValueError, match=r"bool \[B, 1, S, S\]"):
        segments(1, 4, torch.zeros(1, 1, 4, 4), torch.device("cpu"))
