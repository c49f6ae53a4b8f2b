"""Static memory plan of a deployment on Ascend cards: weights, KV cache, concurrency.

Per rank (one NPU; a replica has `tensor_parallel_size` ranks):

- weights = `num_parameters × dtype_bytes / tensor_parallel_size` (experts and dense layers
  alike are taken as evenly sharded);
- KV bytes per token = `KVCacheSpec.bytes_per_token()` of the rank's share of the K/V heads
  (`max(1, num_kv_heads // tp)`), i.e. `num_layers × kv_heads × (k_head_dim + v_head_dim) ×
  dtype_bytes` (engine/kv_cache.py); for DeepSeek MLA the latent, `num_layers ×
  (kv_lora_rank + qk_rope_head_dim) × dtype_bytes`, whole on every rank;
- KV budget = `device_memory × gpu_memory_utilization − weights − ACTIVATION_RESERVE_BYTES`,
  the engine's own budget formula (DESIGN.md, "KV budget comes from measurement") with the
  profiled peak activations replaced by a fixed reserve;
- blocks = `KV budget // bytes_per_block(block_size)`; a sequence at full context needs
  `ceil(max_model_len / block_size)` blocks, so `blocks // that` sequences fit at once.

`ACTIVATION_RESERVE_BYTES` is 2 GiB per rank: room for the forward pass's peak activations at
`max_num_batched_tokens` ≤ 8192 for 7B-16B models in bfloat16 (hidden states, attention
workspace, MLP intermediates, logits of the sampled rows), the CANN operator workspace, and the
HCCL buffers of a TP group (`HCCL_BUFFSIZE`, 200 MB by default). It is a planning estimate; the
engine measures the real peak at start-up.

Device memory is the deployment's `device_memory_bytes`, else the card default: 64 GiB HBM for
an Atlas 800T/800I A2 (Ascend 910B1-B3), see `CARD_MEMORY_BYTES`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from configs.model_config import ModelDeploymentConfig
from engine.planning.model_facts import ModelFacts

GiB = 1 << 30
ACTIVATION_RESERVE_BYTES = 2 * GiB
# HBM per card (Atlas hardware specs: 910B1/B2/B3 64 GB, 910B4 32 GB, 910 (A1) 32 GB,
# Atlas 300I Duo 310P3 48 GB per card = 24 GB per chip).
CARD_MEMORY_BYTES: dict[str, int] = {
    "910B": 64 * GiB,
    "910B1": 64 * GiB,
    "910B2": 64 * GiB,
    "910B3": 64 * GiB,
    "910B4": 32 * GiB,
    "910A": 32 * GiB,
    "310P3": 24 * GiB,
}
DEFAULT_CARD = "910B"
_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def plan_dtype(name: str) -> torch.dtype:
    """Weights/KV dtype of an engine `dtype` setting; `auto` is bfloat16 on an NPU."""
    return _DTYPES.get(name, torch.bfloat16)


@dataclass(frozen=True)
class DeploymentPlan:
    """The memory plan of one deployment, per rank (bytes unless noted).

    Attributes:
        model_id: the deployment.
        tensor_parallel_size: ranks per replica.
        dtype: weights and KV dtype.
        device_memory: bytes of one device, and `memory_source` saying where it came from.
        utilization: `gpu_memory_utilization`.
        weights_total: all weights of one replica.
        weights_per_rank: weights on one rank.
        kv_bytes_per_token: KV bytes of one token on one rank.
        block_size: tokens per KV block.
        kv_budget: bytes left for KV on one rank (may be negative).
        num_blocks: KV blocks that fit on one rank.
        blocks_per_seq: blocks of one sequence at `max_model_len`.
        max_seqs_full_context: sequences at full context that fit at once.
        max_model_len: context length in tokens.
        shape_source: where the model's shapes came from.
        problems: why the deployment cannot run as configured; empty when it fits.
    """

    model_id: str
    tensor_parallel_size: int
    dtype: torch.dtype
    device_memory: int
    memory_source: str
    utilization: float
    weights_total: int
    weights_per_rank: int
    kv_bytes_per_token: int
    block_size: int
    kv_budget: int
    num_blocks: int
    blocks_per_seq: int
    max_seqs_full_context: int
    max_model_len: int
    shape_source: str
    problems: tuple[str, ...]

    @property
    def fits(self) -> bool:
        """True when at least one full-context sequence fits and nothing else is wrong."""
        return not self.problems

    def min_free_per_rank(self) -> int:
        """Bytes one rank needs free to serve one full-context sequence."""
        kv_one_seq = self.blocks_per_seq * self.block_size * self.kv_bytes_per_token
        return self.weights_per_rank + ACTIVATION_RESERVE_BYTES + kv_one_seq


def gib(n: int) -> str:
    """Bytes as GiB with two decimals."""
    return f"{n / GiB:.2f} GiB"


def plan_deployment(
    model: ModelDeploymentConfig, facts: ModelFacts, card: str = DEFAULT_CARD
) -> DeploymentPlan:
    """Plan `model` from its `facts` (see the module docstring for the formulas).

    Raises:
        ValueError: unknown `card`.
    """
    if card not in CARD_MEMORY_BYTES:
        raise ValueError(f"unknown card {card!r}; known: {', '.join(CARD_MEMORY_BYTES)}")
    tp, eng = model.tensor_parallel_size, model.engine
    dtype = plan_dtype(eng.dtype)
    elem = torch.tensor([], dtype=dtype).element_size()
    if model.device_memory_bytes is not None:
        memory, source = model.device_memory_bytes, "device_memory_bytes"
    else:
        memory, source = CARD_MEMORY_BYTES[card], f"default for Ascend {card}"
    weights_total = facts.num_parameters * elem
    weights_rank = -(-weights_total // tp)
    spec = facts.kv_spec(dtype, tp)
    per_token = spec.bytes_per_token()
    per_block = spec.bytes_per_block(eng.block_size)
    budget = int(memory * eng.gpu_memory_utilization) - weights_rank - ACTIVATION_RESERVE_BYTES
    blocks = max(0, budget // per_block)
    per_seq = -(-facts.max_model_len // eng.block_size)
    seqs = blocks // per_seq
    problems: list[str] = []
    if budget <= 0:
        problems.append(
            f"weights {gib(weights_rank)} per rank + activation reserve "
            f"{gib(ACTIVATION_RESERVE_BYTES)} exceed {eng.gpu_memory_utilization:g} × "
            f"{gib(memory)} device memory; raise tensor_parallel_size or use larger cards"
        )
    elif seqs < 1:
        problems.append(
            f"KV budget {gib(budget)} per rank holds {blocks} blocks but one "
            f"{facts.max_model_len}-token sequence needs {per_seq}; lower engine.max_model_len "
            "or raise tensor_parallel_size"
        )
    if eng.num_kv_blocks is not None and eng.num_kv_blocks > blocks:
        problems.append(f"engine.num_kv_blocks={eng.num_kv_blocks} exceeds the {blocks} that fit")
    return DeploymentPlan(
        model.model_id,
        tp,
        dtype,
        memory,
        source,
        eng.gpu_memory_utilization,
        weights_total,
        weights_rank,
        per_token,
        eng.block_size,
        budget,
        blocks,
        per_seq,
        seqs,
        facts.max_model_len,
        facts.shape_source,
        tuple(problems),
    )
