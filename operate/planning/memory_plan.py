"""Static memory plan of a deployment on Ascend cards: weights, KV cache, concurrency.

Per rank (one NPU; a replica has `tensor_parallel_size` ranks):

- weights = `num_parameters × dtype_bytes / tensor_parallel_size` (experts and dense layers
  alike are taken as evenly sharded); for a model planned from a stored hub config, the bytes
  of rank 0's shard of the model itself, int8 where the checkpoint is W8A8
  (`operate.planning.weights`);
- the KV geometry is the engine's (`ModelFacts.kv_specs`): KV bytes per token =
  `bytes_per_token()` of the rank's share of the K/V heads (`max(1, num_kv_heads // tp)`), i.e.
  `num_layers × kv_heads × (k_head_dim + v_head_dim) × dtype_bytes` (engine/kv_cache.py); for
  DeepSeek MLA the latent, `num_layers × (kv_lora_rank + qk_rope_head_dim) × dtype_bytes`, whole
  on every rank; for DeepSeek-V4's hybrid cache the kinds that grow with the context, i.e. the
  compressed entries and indexer keys (`HybridKVSpec.bytes_per_token`, 6,880 B at V4-Flash's
  shape in bfloat16), the same on every rank; a speculative drafting model's cache
  (`engine.spec_decode.draft_kv`) adds its bytes to every block, as in the engine;
  with `engine.kv_cache_dtype` int8 / fp8_e4m3 each K/V row is `head_dim` one-byte codes plus a
  2-byte scale (`KVCacheSpec.storage`), `(head_dim + 2) / (2 × head_dim)` of bfloat16's bytes;
- with `engine.pipeline_parallel_size` > 1 a rank holds one stage's layers
  (`engine.parallel.stage_layers.stage_layer_ranges`): its weights are taken as that share of
  its tensor-parallel share (embedding and output projection spread with the layers, an
  estimate), and its KV bytes are those of its layers; the stage with the most layers decides,
  as the engine's block count is the fewest any stage holds;
- KV budget = `device_memory × gpu_memory_utilization − weights − ACTIVATION_RESERVE_BYTES`,
  computed by the engine's own function (`engine.kv_budget.kv_budget`) with the profiled peak
  activations replaced by a fixed reserve and a `draft` model's weights added to the target's;
  a hybrid cache's sliding-window pool (`sliding_pool_bytes(block_size)`, its `sliding_blocks`
  sized by `engine.kv_layout.kv_spec` for `max_num_seqs` and `max_num_batched_tokens`) comes
  off it first. On `card="cpu"` it is `engine.kv_cache_memory_bytes`, the engine's CPU budget;
- blocks = `KV budget // bytes_per_block(block_size)`; a sequence of `n` tokens needs
  `ceil(n / block_size)` of them, and with a hybrid cache also
  `sliding_blocks_per_sequence(block_size)` blocks of the sliding pool, so
  `min(blocks // ceil(n / block_size), sliding_blocks // sliding_blocks_per_sequence)`
  sequences of `n` tokens fit at once (`DeploymentPlan.seqs_at`): at `max_model_len` and at
  each of `CONTEXTS` (128k and 1M tokens).

`ACTIVATION_RESERVE_BYTES` is 2 GiB per rank: room for the forward pass's peak activations at
`max_num_batched_tokens` ≤ 8192 for 7B-16B models in bfloat16 (hidden states, attention
workspace, MLP intermediates, logits of the sampled rows), the CANN operator workspace, and the
HCCL buffers of a TP group (`HCCL_BUFFSIZE`, 200 MB by default). It is a planning estimate; the
engine measures the real peak at start-up.

Device memory is the deployment's `device_memory_bytes`, else the card default: 64 GiB HBM for
an Atlas 800T/800I A2 (Ascend 910B1-B3), see `CARD_MEMORY_BYTES`. The block count is the one the
engine logs at start-up for the same config where its measured peak equals the reserve, and on
CPU always (`tests/operate/test_plan_matches_engine.py`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from configs.model_config import ModelDeploymentConfig
from engine.checkpoint_ref import CheckpointRef
from engine.deepseek_v4.cache import HybridKVSpec
from engine.kv_budget import MemoryProfile, kv_budget
from engine.kv_cache import KVCacheSpec
from engine.parallel.stage_layers import stage_layer_ranges
from operate.planning.model_facts import ModelFacts, count_parameters, plan_dtype

__all__ = ["CONTEXTS", "DeploymentPlan", "gib", "plan_deployment", "plan_dtype"]

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
CPU = "cpu"
"""The `card` of a CPU replica: its KV budget is `engine.kv_cache_memory_bytes`, as the engine
sizes it on CPU (weights and activations live in host memory beside it)."""
CONTEXTS = (128 * 1024, 1024 * 1024)
"""Context lengths whose concurrency every plan reports (`DeploymentPlan.seqs_at`): 128k and
1M tokens (DeepSeek-V4's `max_position_embeddings`)."""


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
        kv_bytes_per_token: KV bytes of one more token of context on one rank (a hybrid
            cache's growing kinds; a float where compressed kinds make it fractional).
        block_size: tokens per KV block.
        kv_budget: bytes left for KV blocks on one rank, after a hybrid cache's sliding pool
            (may be negative).
        num_blocks: KV blocks that fit on one rank.
        blocks_per_seq: blocks of one sequence at `max_model_len`.
        max_seqs_full_context: sequences at full context that fit at once.
        max_model_len: context length in tokens.
        shape_source: where the model's shapes came from.
        problems: why the deployment cannot run as configured; empty when it fits.
        kv_bytes_per_block: bytes of one KV block (`kv_bytes_per_token × block_size`).
        sliding_blocks: blocks of a hybrid cache's sliding-window pool; 0 for other caches.
        sliding_bytes_per_block: bytes of one sliding-pool block.
        sliding_blocks_per_seq: sliding blocks one sequence holds at most between steps.
        sliding_pool_bytes: bytes of the sliding-window pool on one rank; 0 for other caches.
        kv_geometry: the KV kinds in words (`describe()` of the engine's spec, and of the
            drafting model's).
        draft_weights: bytes of a `draft` model's weights on its rank; 0 without one.
        cpu: planned for a CPU replica (`card="cpu"`): `device_memory` is the KV budget
            `engine.kv_cache_memory_bytes`.
        pipeline_stage_layers: decoder layers per pipeline stage; empty without pipeline
            parallel. The per-rank figures are then those of the stage with the most layers.
    """

    model_id: str
    tensor_parallel_size: int
    dtype: torch.dtype
    device_memory: int
    memory_source: str
    utilization: float
    weights_total: int
    weights_per_rank: int
    kv_bytes_per_token: float
    block_size: int
    kv_budget: int
    num_blocks: int
    blocks_per_seq: int
    max_seqs_full_context: int
    max_model_len: int
    shape_source: str
    problems: tuple[str, ...]
    kv_bytes_per_block: int = 0
    sliding_blocks: int = 0
    sliding_bytes_per_block: int = 0
    sliding_blocks_per_seq: int = 0
    sliding_pool_bytes: int = 0
    kv_geometry: str = ""
    draft_weights: int = 0
    cpu: bool = False
    pipeline_stage_layers: tuple[int, ...] = ()

    @property
    def fits(self) -> bool:
        """True when at least one full-context sequence fits and nothing else is wrong."""
        return not self.problems

    @property
    def hybrid(self) -> bool:
        """The KV cache has a sliding-window pool beside its growing blocks (DeepSeek-V4)."""
        return self.sliding_blocks > 0

    def blocks_for(self, num_tokens: int) -> int:
        """Growing (full-group) blocks of one sequence of `num_tokens` tokens."""
        return -(-num_tokens // self.block_size)

    def seqs_at(self, num_tokens: int) -> int:
        """Sequences of `num_tokens` tokens that fit at once: the blocks over each one's
        `blocks_for`, and for a hybrid cache no more than the sliding pool holds."""
        seqs = self.num_blocks // self.blocks_for(num_tokens)
        if self.sliding_blocks_per_seq:
            seqs = min(seqs, self.sliding_blocks // self.sliding_blocks_per_seq)
        return seqs

    def budget_derivation(self) -> str:
        """How the KV budget of one rank follows from memory, weights and reserve, in words."""
        pool = f" - sliding-window pool {gib(self.sliding_pool_bytes)}" if self.hybrid else ""
        if self.cpu:
            return (
                f"KV memory {gib(self.device_memory)} ({self.memory_source}){pool} = KV "
                f"{gib(self.kv_budget)} per rank"
            )
        drafting = f" - drafting model {gib(self.draft_weights)}" if self.draft_weights else ""
        return (
            f"device memory {gib(self.device_memory)} ({self.memory_source}) x "
            f"{self.utilization:g} - weights {gib(self.weights_per_rank)}{drafting} - activation "
            f"reserve {gib(ACTIVATION_RESERVE_BYTES)}{pool} = KV {gib(self.kv_budget)} per rank"
        )

    def min_free_per_rank(self) -> int:
        """Bytes one rank needs free to serve one full-context sequence."""
        kv_one_seq = self.blocks_per_seq * self.kv_bytes_per_block
        fixed = self.weights_per_rank + self.draft_weights + ACTIVATION_RESERVE_BYTES
        return fixed + self.sliding_pool_bytes + kv_one_seq


def gib(n: float) -> str:
    """Bytes as GiB with two decimals."""
    return f"{n / GiB:.2f} GiB"


def draft_weight_bytes(model: ModelDeploymentConfig, dtype: torch.dtype) -> int:
    """Bytes of a `draft` model's weights on its one rank (from its tensor headers, in `dtype`),
    which the engine counts with the target's; 0 for `ngram` and `mtp` (the MTP layer's
    weights are the checkpoint's own).

    Raises:
        ValueError: the draft checkpoint is not on this machine.
    """
    spec = model.engine.speculative
    if spec is None or spec.model is None:
        return 0
    params = count_parameters(CheckpointRef.from_path(spec.model.resolve())) or 0
    return params * torch.tensor([], dtype=dtype).element_size()


def plan_deployment(
    model: ModelDeploymentConfig, facts: ModelFacts, card: str = DEFAULT_CARD
) -> DeploymentPlan:
    """Plan `model` from its `facts` (see the module docstring for the formulas).

    Raises:
        ValueError: unknown `card`, a `block_size` the model's cache cannot use
            (DeepSeek-V4: a multiple of its compress ratios, as the engine requires), or a
            drafting model whose KV geometry cannot be read (`draft_kv_spec`).
    """
    if card != CPU and card not in CARD_MEMORY_BYTES:
        raise ValueError(f"unknown card {card!r}; known: {', '.join(CARD_MEMORY_BYTES)}, {CPU}")
    tp, eng = model.tensor_parallel_size, model.engine
    dtype = plan_dtype(eng.dtype, cpu=card == CPU)
    elem = torch.tensor([], dtype=dtype).element_size()
    if card == CPU:
        memory, source = eng.kv_cache_memory_bytes, "engine.kv_cache_memory_bytes (CPU)"
    elif model.device_memory_bytes is not None:
        memory, source = model.device_memory_bytes, "device_memory_bytes"
    else:
        memory, source = CARD_MEMORY_BYTES[card], f"default for Ascend {card}"
    if facts.weights is not None:
        weights_total, weights_rank = facts.weights.total, facts.weights.per_rank
    else:
        weights_total = facts.num_parameters * elem
        weights_rank = -(-weights_total // tp)
    spec, draft = facts.kv_specs(dtype, tp, eng)
    if isinstance(spec, KVCacheSpec):  # a `shape`-only model's spec gets the cache dtype too
        spec = replace(spec, kv_cache_dtype=eng.kv_cache_dtype)
    stage_layers: tuple[int, ...] = ()
    if eng.pipeline_parallel_size > 1 and isinstance(spec, KVCacheSpec):
        ranges = stage_layer_ranges(
            facts.num_layers, eng.pipeline_parallel_size, eng.pipeline_layer_partition
        )
        stage_layers = tuple(len(r) for r in ranges)
        # the widest stage decides, as in the engine (`engine.kv_budget.pipeline_kv_blocks`)
        weights_rank = -(-weights_rank * max(stage_layers) // facts.num_layers)
        spec = replace(spec, num_layers=max(stage_layers))
    draft_weights = draft_weight_bytes(model, dtype)
    profile = None
    if card != CPU:
        profile = MemoryProfile(memory, weights_rank + draft_weights, ACTIVATION_RESERVE_BYTES)
    # the engine's own budget, from memory even where num_kv_blocks is hand-set (checked below)
    budget = kv_budget(eng.model_copy(update={"num_kv_blocks": None}), spec, profile, draft)
    per_token = spec.bytes_per_token() + (draft.bytes_per_token() if draft is not None else 0)
    sliding = sliding_block = sliding_per_seq = 0
    if isinstance(spec, HybridKVSpec):
        sliding = spec.sliding_blocks
        sliding_block = spec.sliding_bytes_per_block(eng.block_size)
        sliding_per_seq = spec.sliding_blocks_per_sequence(eng.block_size)
    geometry = spec.describe() + ("" if draft is None else f"; drafting model {draft.describe()}")
    blocks, pool = budget.blocks, budget.sliding_pool_bytes
    plan = DeploymentPlan(
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
        budget.kv_bytes,
        blocks,
        -(-facts.max_model_len // eng.block_size),
        0,
        facts.max_model_len,
        facts.shape_source,
        (),
        budget.bytes_per_block,
        sliding,
        sliding_block,
        sliding_per_seq,
        pool,
        geometry,
        draft_weights,
        card == CPU,
        stage_layers,
    )
    seqs = plan.seqs_at(facts.max_model_len)
    problems: list[str] = []
    if budget.kv_bytes <= 0:
        problems.append(_no_budget(plan))
    elif seqs < 1:
        problems.append(
            f"KV budget {gib(budget.kv_bytes)} per rank holds {blocks} blocks but one "
            f"{facts.max_model_len}-token sequence needs {plan.blocks_per_seq}; lower "
            "engine.max_model_len or raise tensor_parallel_size"
        )
    if eng.num_kv_blocks is not None and eng.num_kv_blocks > blocks:
        problems.append(f"engine.num_kv_blocks={eng.num_kv_blocks} exceeds the {blocks} that fit")
    return replace(plan, max_seqs_full_context=seqs, problems=tuple(problems))


def _no_budget(plan: DeploymentPlan) -> str:
    """Why no byte is left for KV blocks, and what to change."""
    pool = f"sliding-window pool {gib(plan.sliding_pool_bytes)}"
    if plan.cpu:
        after = f" after the {pool}" if plan.hybrid else ""
        return (
            f"engine.kv_cache_memory_bytes {gib(plan.device_memory)} holds no KV block{after}; "
            "raise engine.kv_cache_memory_bytes"
        )
    pooled = f" + {pool}" if plan.hybrid else ""
    drafting = f" + drafting model {gib(plan.draft_weights)}" if plan.draft_weights else ""
    return (
        f"weights {gib(plan.weights_per_rank)} per rank{drafting} + activation reserve "
        f"{gib(ACTIVATION_RESERVE_BYTES)}{pooled} exceed {plan.utilization:g} × "
        f"{gib(plan.device_memory)} device memory; raise tensor_parallel_size or use larger cards"
    )
