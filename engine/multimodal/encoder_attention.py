"""The vision and audio encoders' attention through the op registry, plugged into transformers.

`ENCODER_ATTENTION_NAME` is registered with transformers' `AttentionInterface` (and, for the
masks transformers builds before calling it, its `AttentionMaskInterface`, as `sdpa_mask`) on
import; setting an encoder config's `_attn_implementation` to it makes the checkpoint's own
attention modules call `encoder_attention` below, which runs the registry op
`encoder_attention` (`npu_ops.ops.encoder_attention`: `npu_fusion_attention` in `TND` on
Ascend, SDPA per segment on CUDA and CPU). How each encoder calls it (transformers 5.25):

- Qwen2.5-VL's vision attention (`Qwen2_5_VLVisionAttention.forward`) splits its packed patches
  at `cu_seqlens` itself for every implementation whose name lacks "flash", and calls once per
  image (full-attention blocks) or window (the others): `[1, H, S_i, D]`, no mask.
- Qwen2-Audio's Whisper-style encoder (`Qwen2AudioAttention.forward`) calls once per layer with
  the clip batch `[B, H, 1500, D]`, the query already scaled (`scaling=1.0`), and the frames'
  padding as a bool key mask `[B, 1, 1500, 1500]` from `create_bidirectional_mask` (None when
  nothing is padded).

Registration follows transformers' "Customizing attention function" docs, as `engine.attention`
does for the language model.
"""

from __future__ import annotations

import torch
from transformers import AttentionInterface
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

from npu_ops.ops import active_ops

ENCODER_ATTENTION_NAME = "ascend_router_encoder"


def segments(
    batch: int, seq_len: int, attention_mask: torch.Tensor | None, device: torch.device
) -> torch.Tensor:
    """The segments of a `[B, S]` batch flattened to `B * S` tokens, as int32 `cu_seqlens`.

    Each row is one segment; a row with padding (the mask's keys `[len, S)` masked) is two: its
    `len` valid frames, which attend only to each other as under the mask, and its padding,
    which attends only to itself (those outputs differ from SDPA's, where padded queries see the
    valid keys, and are never read: the encoders keep the first `len` positions' outputs).

    Args:
        batch: `B`.
        seq_len: `S`.
        attention_mask: None, or bool `[B, 1, S, S]`, True where a query attends a key, the same
            prefix of keys for every query of a row.
        device: where the boundaries go.

    Returns:
        int32 `[n + 1]`, cumulative boundaries from 0 to `B * S`.

    Raises:
        ValueError: the mask is not a bool key-padding mask of that shape.
    """
    if attention_mask is None:
        return torch.arange(0, (batch + 1) * seq_len, seq_len, dtype=torch.int32, device=device)
    if attention_mask.dtype != torch.bool or attention_mask.shape != (batch, 1, seq_len, seq_len):
        raise ValueError(
            f"encoder attention takes a bool [B, 1, S, S] key-padding mask, got "
            f"{attention_mask.dtype} {tuple(attention_mask.shape)} for B={batch}, S={seq_len}"
        )
    keys = attention_mask[:, 0, 0, :]  # [B, S]
    lens = keys.sum(dim=-1)
    prefix = torch.arange(seq_len, device=keys.device) < lens[:, None]
    if not (torch.equal(keys, prefix) and bool((attention_mask == keys[:, None, None, :]).all())):
        raise ValueError("encoder attention takes masks that hide a suffix of padding keys only")
    bounds = [0]
    for row, length in enumerate(lens.tolist()):
        if 0 < length < seq_len:
            bounds.append(row * seq_len + length)
        bounds.append((row + 1) * seq_len)
    return torch.tensor(bounds, dtype=torch.int32, device=device)


def encoder_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    **kwargs: object,
) -> tuple[torch.Tensor, None]:
    """Bidirectional attention of an encoder layer through the registry op `encoder_attention`.

    Args:
        module: the HF attention module (unused: the op needs only the tensors).
        query: `[B, H, S, D]`.
        key: `[B, H, S, D]`.
        value: `[B, H, S, D]`.
        attention_mask: None, or a bool key-padding mask `[B, 1, S, S]` (see `segments`).
        scaling: softmax scale; None means `D ** -0.5`.
        dropout: must be 0 (inference).
        **kwargs: the rest of transformers' call (`is_causal=False`, `output_attentions`, ...),
            ignored.

    Returns:
        `(out, None)`, `out` `[B, S, H, D]` in `query.dtype` (transformers' convention: no
        attention weights).

    Raises:
        ValueError: the mask is not a key-padding mask (see `segments`).
    """
    assert dropout == 0.0, f"encoder attention runs in inference only, got dropout={dropout}"
    batch, heads, seq_len, head_dim = query.shape
    cu_seqlens = segments(batch, seq_len, attention_mask, query.device)

    def tokens(t: torch.Tensor) -> torch.Tensor:  # [B, H, S, D] -> [B * S, H, D]
        return t.transpose(1, 2).reshape(batch * seq_len, heads, t.shape[-1])

    scale = head_dim**-0.5 if scaling is None else scaling
    out = active_ops().encoder_attention(
        tokens(query), tokens(key), tokens(value), cu_seqlens, scale
    )
    return out.view(batch, seq_len, heads, -1), None


AttentionInterface.register(ENCODER_ATTENTION_NAME, encoder_attention)
AttentionMaskInterface.register(ENCODER_ATTENTION_NAME, sdpa_mask)
