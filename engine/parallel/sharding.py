"""Re-shape a loaded HF model into one tensor-/expert-parallel rank's shard.

transformers' own tensor-parallel plans are a starting point but not enough: some layers are
fused (Phi-3's `qkv_proj` = [q | k | v] and `gate_up_proj` = [gate | up]) and must be re-split per
rank so each rank holds matching q/k/v heads and gate/up columns. Rules, by layer name:

* column parallel (output rows split): `q_proj`, `k_proj`, `v_proj`, `q_b_proj`, `kv_b_proj`
  (DeepSeek MLA, split by heads), `gate_proj`, `up_proj`;
* fused column parallel: `qkv_proj` (parts q, k, v), Linear `gate_up_proj` (parts gate, up);
* row parallel (input columns split, one all-reduce): `o_proj`, `down_proj`;
* routed experts (3-D `gate_up_proj` / `down_proj` parameters): split each expert's
  intermediate size (tensor parallel) or split the experts (expert parallel);
* DeepSeek-V4 attention (a module with `o_a_proj`, `o_b_proj` and `sinks`): `q_b_proj` and
  the per-head `sinks` split by heads; the grouped `o_a_proj` (`DeepseekV4GroupedLinear`, its
  rows `[o_groups * o_lora_rank]` one block per group of consecutive heads) split by groups, so
  each rank keeps `o_groups / world` groups, those of its heads; `o_b_proj` row parallel over
  the groups' outputs. The one K=V head (`kv_proj`, `kv_norm`), `q_a_proj`/`q_a_norm` and the
  whole compressor and indexer (per-token KV and index scores every rank needs whole, though
  their layers are named `gate_proj`, `q_b_proj`, ...) stay replicated, so every rank's hybrid
  KV cache is the same;
* everything else (embeddings, norms, routers with DeepSeek-V4's hash table `tid2eid`,
  DeepSeek-V4's hyper-connections, `kv_a_proj_with_mqa`, LM head) is replicated.

W8A8 checkpoints (`engine.quantization`) are sharded in their int8 form, by the same rules: the
loader installs the W8A8 modules on the whole model (it checks every tensor against the whole
layer's shape), then this re-shapes them (`keep_outputs` / `keep_inputs` /
`keep_intermediate` / `keep_experts` of `engine.quantization.linear` and `.experts`), before the
fused layers are put in. Column parallel keeps the output channels' int8 weight and their
per-channel scales (`weight_scale`, static W8A8's `deq_scale` and `quant_bias`); row parallel
keeps the int8 weight's input slice with the per-output-channel scales and static W8A8's
per-tensor input scale/offset whole, and the bias on rank 0 only (`RowParallelQuantLinear`:
the all-reduce sums dequantised partials, so the bias is added once). Routed W8A8_DYNAMIC experts
split each expert's intermediate size (gate and up columns, `down`'s input rows, with their
scales) or, under expert parallel, the experts. Dynamic per-token activation scales are then
computed on a row-parallel shard's input slice, which changes the numerics slightly (within the
W8A8 error; `tests/engine/test_parallel_w8a8.py`).

`shard_model` can record what it kept of each linear (`LinearShard`), so LoRA adapters are
sharded the same way (`engine.lora.model`): B's rows as a column-parallel base's, A's columns as
a row-parallel base's (the S-LoRA / Punica scheme).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch
from torch import nn
from transformers import PretrainedConfig

from engine.parallel.layers import ReducedExperts, RowParallelLinear, RowParallelQuantLinear
from engine.quantization.experts import W8A8DynamicExperts
from engine.quantization.linear import W8A8DynamicLinear, W8A8StaticLinear

_COLUMN = {"q_proj", "k_proj", "v_proj", "q_b_proj", "kv_b_proj", "gate_proj", "up_proj"}
_ROW = {"o_proj", "down_proj"}
_QUANT_LINEARS = (W8A8DynamicLinear, W8A8StaticLinear)
"""W8A8 linears, sharded in their int8 form (`keep_outputs` / `keep_inputs`)."""
_LINEARS = (nn.Linear, *_QUANT_LINEARS)


@dataclass(frozen=True)
class LinearShard:
    """What one rank kept of a linear layer.

    Attributes:
        in_features: the unsharded layer's input width.
        out_features: the unsharded layer's output width.
        rows: the output rows kept (column parallel), None if all.
        cols: the input columns kept (row parallel), None if all.
    """

    in_features: int
    out_features: int
    rows: torch.Tensor | None = None
    cols: slice | None = None


def _split(n: int, rank: int, world: int, what: str) -> slice:
    if n % world:
        raise ValueError(f"{what} ({n}) is not divisible by tensor_parallel_size {world}")
    size = n // world
    return slice(rank * size, (rank + 1) * size)


def kv_heads_per_rank(kv_heads: int, world: int) -> int:
    """K/V heads each rank holds: split when divisible, else replicated (Megatron GQA rule).

    Raises:
        ValueError: neither `kv_heads % world` nor `world % kv_heads` is zero.
    """
    if kv_heads % world == 0:
        return kv_heads // world
    if world % kv_heads == 0:
        return 1
    raise ValueError(
        f"num_key_value_heads ({kv_heads}) and tensor_parallel_size ({world}) must divide one "
        "another"
    )


def _kv_rows(kv_heads: int, head_dim: int, rank: int, world: int) -> slice:
    """Rows of a K or V projection for this rank (a replicated head when kv_heads < world)."""
    if kv_heads % world == 0:
        return _split(kv_heads * head_dim, rank, world, "K/V rows")
    kv_heads_per_rank(kv_heads, world)  # validates
    head = rank // (world // kv_heads)
    return slice(head * head_dim, (head + 1) * head_dim)


def _column(
    layer: nn.Linear | W8A8DynamicLinear | W8A8StaticLinear,
    parts: list[int],
    rank: int,
    world: int,
    name: str,
    fixed: dict[int, slice] | None = None,
) -> LinearShard:
    """Keep this rank's rows of every part (parts are consecutive row blocks); `fixed` gives
    explicit row slices for some parts (replicated K/V heads)."""
    full = LinearShard(int(layer.in_features), int(layer.out_features))
    rows, offset = [], 0
    for i, size in enumerate(parts):
        s = (fixed or {}).get(i) or _split(size, rank, world, f"{name} rows")
        rows.append(torch.arange(offset + s.start, offset + s.stop))
        offset += size
    keep = torch.cat(rows)
    if isinstance(layer, _QUANT_LINEARS):
        layer.keep_outputs(keep)
        return LinearShard(full.in_features, full.out_features, rows=keep)
    layer.weight = nn.Parameter(layer.weight.data[keep].clone(), requires_grad=False)
    if layer.bias is not None:
        layer.bias = nn.Parameter(layer.bias.data[keep].clone(), requires_grad=False)
    layer.out_features = len(keep)
    return LinearShard(full.in_features, full.out_features, rows=keep)


def _row(
    layer: nn.Linear | W8A8DynamicLinear | W8A8StaticLinear, rank: int, world: int, name: str
) -> tuple[RowParallelLinear, LinearShard]:
    cols = _split(layer.in_features, rank, world, f"{name} columns")
    full = LinearShard(int(layer.in_features), int(layer.out_features), cols=cols)
    if isinstance(layer, _QUANT_LINEARS):
        layer.keep_inputs(cols, keep_bias=rank == 0)
        return RowParallelQuantLinear(layer), full
    layer.weight = nn.Parameter(layer.weight.data[:, cols].clone(), requires_grad=False)
    return RowParallelLinear(layer), full


def _quant_experts(
    module: W8A8DynamicExperts, rank: int, world: int, expert_parallel: bool
) -> ReducedExperts:
    if expert_parallel:
        keep = _split(module.num_experts, rank, world, "number of routed experts")
        module.keep_experts(keep)
        return ReducedExperts(module, keep.start, module.num_experts, remap=True)
    module.keep_intermediate(
        _split(module.intermediate_dim, rank, world, "expert intermediate size")
    )
    return ReducedExperts(module, 0, module.num_experts, remap=False)


def _experts(module: nn.Module, rank: int, world: int, expert_parallel: bool) -> ReducedExperts:
    if isinstance(module, W8A8DynamicExperts):
        return _quant_experts(module, rank, world, expert_parallel)
    gate_up, down = module.gate_up_proj.data, module.down_proj.data  # [E, 2I, H], [E, H, I]
    if expert_parallel:
        keep = _split(gate_up.shape[0], rank, world, "number of routed experts")
        module.gate_up_proj = nn.Parameter(gate_up[keep].clone(), requires_grad=False)
        module.down_proj = nn.Parameter(down[keep].clone(), requires_grad=False)
        module.num_experts = keep.stop - keep.start
        module._is_expert_parallel = True  # transformers' experts kernels then skip the sentinel
        return ReducedExperts(module, keep.start, module.num_experts, remap=True)
    inter = gate_up.shape[1] // 2
    s = _split(inter, rank, world, "expert intermediate size")
    gate, up = gate_up[:, :inter][:, s], gate_up[:, inter:][:, s]
    module.gate_up_proj = nn.Parameter(torch.cat([gate, up], dim=1).clone(), requires_grad=False)
    module.down_proj = nn.Parameter(down[:, :, s].clone(), requires_grad=False)
    if hasattr(module, "intermediate_dim"):
        module.intermediate_dim = s.stop - s.start
    return ReducedExperts(module, 0, module.num_experts, remap=False)


def _attention_attrs(module: nn.Module, config: PretrainedConfig, world: int) -> None:
    """Per-rank head counts on attention modules that read them in `forward`."""
    kv_local = kv_heads_per_rank(
        getattr(config, "num_key_value_heads", None) or config.num_attention_heads, world
    )
    if hasattr(module, "num_heads"):
        module.num_heads //= world
    if hasattr(module, "num_key_value_heads"):
        module.num_key_value_heads = kv_local
    if hasattr(module, "num_key_value_groups"):
        module.num_key_value_groups = config.num_attention_heads // world // kv_local
    if hasattr(module, "config"):
        local = copy.copy(config)
        local.num_attention_heads = config.num_attention_heads // world
        local.num_key_value_heads = kv_local
        module.config = local


def _v4_attention(
    attn: nn.Module,
    config: PretrainedConfig,
    rank: int,
    world: int,
    prefix: str,
    kept: dict[str, LinearShard],
) -> None:
    """Shard a DeepSeek-V4 attention module in place (see the module docstring)."""
    heads, groups = int(config.num_attention_heads), int(config.o_groups)
    if groups % world:
        raise ValueError(f"o_groups ({groups}) is not divisible by tensor_parallel_size {world}")
    mine = _split(heads, rank, world, "num_attention_heads")
    q_b = attn.q_b_proj
    kept[f"{prefix}.q_b_proj"] = _column(q_b, [q_b.out_features], rank, world, "q_b_proj")
    attn.sinks = nn.Parameter(attn.sinks.data[mine].clone(), requires_grad=False)
    o_a = attn.o_a_proj  # rows: one block of o_lora_rank per group; groups cover heads in order
    kept[f"{prefix}.o_a_proj"] = _column(o_a, [o_a.out_features], rank, world, "o_a_proj")
    o_a.n_groups = groups // world
    attn.o_b_proj, kept[f"{prefix}.o_b_proj"] = _row(attn.o_b_proj, rank, world, "o_b_proj")
    attn.num_heads = heads // world
    if hasattr(attn, "num_key_value_groups"):
        attn.num_key_value_groups = heads // world  # the one KV head, broadcast to local heads
    local = copy.copy(config)
    local.num_attention_heads = heads // world
    local.o_groups = groups // world
    attn.config = local


def shard_model(
    model: nn.Module,
    config: PretrainedConfig,
    rank: int,
    world: int,
    expert_parallel: bool,
    plan: dict[str, LinearShard] | None = None,
) -> nn.Module:
    """Turn a full model into rank `rank`'s shard in place (needs an initialised process group).

    Call it after the W8A8 modules are installed (`engine.quantization.apply_quantization`,
    which `load_model` runs) and before `use_fused_layers`.

    Args:
        model: the loaded HF model (its own `config` is used), float or with W8A8 layers.
        config: `model.config`.
        rank: this rank.
        world: tensor parallel size.
        expert_parallel: split routed experts instead of each expert's width.
        plan: if given, filled with what this rank kept of each sharded linear, by module name
            (replicated linears are not listed).

    Raises:
        ValueError: a head count, DeepSeek-V4's `o_groups`, an intermediate size or an expert
            count is not divisible by `world`.
    """
    if world == 1:
        return model
    heads = config.num_attention_heads
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    kept: dict[str, LinearShard] = {} if plan is None else plan
    done: tuple[str, ...] = ()  # subtrees sharded (or kept whole) already
    for parent_name, parent in list(model.named_modules()):
        if parent_name.startswith(done):
            continue
        if all(hasattr(parent, a) for a in ("o_a_proj", "o_b_proj", "sinks")):  # DeepSeek-V4
            _v4_attention(parent, config, rank, world, parent_name, kept)
            done += (f"{parent_name}.",)
            continue
        if hasattr(parent, "o_proj"):
            _attention_attrs(parent, config, world)
        for name, child in list(parent.named_children()):
            full_name = f"{parent_name}.{name}" if parent_name else name
            if name == "experts" and isinstance(getattr(child, "gate_up_proj", None), nn.Parameter):
                setattr(parent, name, _experts(child, rank, world, expert_parallel))
            elif not isinstance(child, _LINEARS):
                continue
            elif name in ("k_proj", "v_proj") and kv_heads % world:
                kv = _kv_rows(kv_heads, head_dim, rank, world)
                kept[full_name] = _column(child, [child.out_features], rank, world, name, {0: kv})
            elif name in _COLUMN:
                kept[full_name] = _column(child, [child.out_features], rank, world, name)
            elif name == "qkv_proj":
                parts = [heads * head_dim, kv_heads * head_dim, kv_heads * head_dim]
                kv = _kv_rows(kv_heads, head_dim, rank, world)
                kept[full_name] = _column(child, parts, rank, world, name, {1: kv, 2: kv})
            elif name == "gate_up_proj":
                parts = [child.out_features // 2] * 2
                kept[full_name] = _column(child, parts, rank, world, name)
            elif name in _ROW:
                layer, kept[full_name] = _row(child, rank, world, name)
                setattr(parent, name, layer)
    return model
