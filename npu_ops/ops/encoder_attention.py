"""Encoder attention: bidirectional attention within segments of a flattened batch.

The vision tower of Qwen2.5-VL attends within each image (its full-attention blocks) or within
each window of an image (the others), and the Whisper-style audio encoder of Qwen2-Audio within
each audio clip: no causal mask, and no attention across segments. The tokens of every segment
are flattened into one `[T, N, D]` batch and the segments given by their cumulative boundaries
`cu_seqlens` (`[0, len_0, len_0 + len_1, ...]`), the varlen layout of flash-attention's
`cu_seqlens_q` and of torch_npu `npu_fusion_attention`'s `TND` layout (whose
`actual_seq_qlen`/`actual_seq_kvlen` are the same boundaries without the leading 0; Ascend
op-plugin docs/context/torch_npu-npu_fusion_attention.md).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from npu_ops.ops.attention import attend


def segment_lengths(cu_seqlens: torch.Tensor, tokens: int) -> list[int]:
    """The segments' lengths, after checking `cu_seqlens` against the batch.

    Args:
        cu_seqlens: int32 `[n + 1]`, cumulative boundaries starting at 0 and ending at `tokens`.
        tokens: `T`, the flattened batch's token count.

    Returns:
        `n` host ints, each >= 1.

    Raises:
        ValueError: `cu_seqlens` is not int32 1-D, does not start at 0 or end at `tokens`, or has
            an empty or negative segment.
    """
    if cu_seqlens.dtype != torch.int32 or cu_seqlens.dim() != 1 or len(cu_seqlens) < 2:
        raise ValueError(
            f"cu_seqlens must be int32 [n + 1] with n >= 1, got {cu_seqlens.dtype} "
            f"{tuple(cu_seqlens.shape)}"
        )
    bounds = cu_seqlens.tolist()
    if bounds[0] != 0 or bounds[-1] != tokens:
        raise ValueError(f"cu_seqlens must run from 0 to T={tokens}, got {bounds[0]}..{bounds[-1]}")
    lengths = [b - a for a, b in zip(bounds, bounds[1:])]
    if min(lengths) < 1:
        raise ValueError(f"cu_seqlens must be strictly increasing, got {bounds}")
    return lengths


def check_qkv(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor) -> None:
    """Encoder attention is self-attention with as many K/V heads as query heads.

    Raises:
        ValueError: the three tensors are not 3-D of one shape.
    """
    if query.dim() != 3 or query.shape != key.shape or key.shape != value.shape:
        raise ValueError(
            f"query, key and value must all be [T, N, D], got {tuple(query.shape)}, "
            f"{tuple(key.shape)}, {tuple(value.shape)}"
        )


def encoder_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    cu_seqlens: torch.Tensor,
    scale: float,
) -> torch.Tensor:
    """`softmax(scale * q k^T) v` within each segment, no mask inside a segment.

    Args:
        query: `[T, N, D]`, the segments' tokens concatenated.
        key: `[T, N, D]`.
        value: `[T, N, D]`.
        cu_seqlens: int32 `[n + 1]`, the segments' cumulative boundaries (`0` first, `T` last).
        scale: softmax scale, usually `D ** -0.5` (1.0 where the caller scaled `query` already,
            as Whisper's attention does).

    Returns:
        `[T, N, D]` in `query.dtype`.

    Raises:
        ValueError: the shapes differ, or `cu_seqlens` does not partition the `T` tokens.
    """
    return per_segment(lambda q, k, v: attend(q, k, v, scale, None), query, key, value, cu_seqlens)


def per_segment(
    attend_one: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor],
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    cu_seqlens: torch.Tensor,
) -> torch.Tensor:
    """`attend_one(q, k, v)` (`[S, N, D]` each) on every segment, outputs concatenated `[T, N,
    D]`, after checking the shapes and boundaries (`ValueError`, as `encoder_attention`)."""
    check_qkv(query, key, value)
    outs = []
    start = 0
    for length in segment_lengths(cu_seqlens, query.shape[0]):
        end = start + length
        outs.append(attend_one(query[start:end], key[start:end], value[start:end]))
        start = end
    return torch.cat(outs, dim=0)
