"""The `cpu` implementation of `paged_decode_attention`: our AVX512 kernel
(`npu_ops/cpu_kernels/paged_decode_attention.cpp`), which reads K/V in place through the block
table. The reference gathers every sequence's context into a new tensor first; on SmolLM2 at
decode batch 16 and ~170-token contexts that copy was most of a step's attention time.

An 8-bit cache (`npu_ops.ops.kv_quant`: int8 or float8 e4m3 codes and a float16 scale per row)
is read in place too: the kernel converts the codes as it loads them and scales each row's dot
product and weight by its scale.
"""

from __future__ import annotations

import torch

from npu_ops.cpu_kernels import PAGED_DECODE_ATTENTION, load
from npu_ops.ops.attention import check_paged_inputs


def paged_decode_attention(
    query: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    block_table: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float,
) -> torch.Tensor:
    """Shapes and semantics as `npu_ops.ops.attention.paged_decode_attention` (float32 or
    bfloat16 caches, or 8-bit ones; scores, softmax and sums in float32).

    Inside a captured graph (`torch.compile`) the inputs are not checked, since reading
    `seq_lens` on the host would split the graph; the engine builds them and checks them in
    eager steps.

    Raises:
        ValueError: inconsistent block table or lengths (eager calls).
        RuntimeError: the kernel cannot be compiled or loaded on this host.
    """
    if not torch.compiler.is_compiling():
        check_paged_inputs(query, key_cache, block_table, seq_lens)
        load(PAGED_DECODE_ATTENTION)
    out = torch.ops.ascend_router.paged_decode_attention(
        query.float().contiguous(),
        key_cache.contiguous(),
        value_cache.contiguous(),
        block_table.contiguous(),
        seq_lens.contiguous(),
        float(scale),
    )
    return out.to(query.dtype)
