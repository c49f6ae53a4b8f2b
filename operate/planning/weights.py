"""Weight bytes of a model known only by its config: a meta-device model, sharded as the engine
shards it.

The model is built from the config by transformers on the `meta` device (shapes, no memory), the
class the engine loads the checkpoint into, so that the parameter count is the model's own
(DeepSeek-V4-Flash: 284.3B, the MTP layer not included: transformers does not build it, and the
engine loads it only for `speculative: {method: mtp}`, which runs on one rank). One rank's share
is what `engine.parallel.sharding.shard_model` keeps on rank 0 (heads and experts split,
embeddings, norms, routers, LM head and DeepSeek-V4's compressor, indexer and K=V head
replicated), not `total / tensor_parallel_size`.

Bytes per parameter: the engine's `dtype`, except for a ModelSlim W8A8 checkpoint (`w8a8`),
whose linear weights inside the decoder layers are int8, 1 byte (`nn.Linear` weights and the
routed experts' `gate_up_proj` / `down_proj`), the MoE routers (`mlp.gate`) excepted;
embeddings, LM head, norms, routers, hyper-connections, sinks and buffers stay as the model
class holds them (the dtype; float32 where transformers keeps a parameter so, e.g. DeepSeek-V4's
hyper-connection mixers and norms). The per-channel scales and offsets of the int8 weights (one
or two values per output row, < 0.1% of the bytes) are left out. Which layers a ModelSlim recipe
keeps in float varies; this is a planning estimate, the engine measures the loaded weights at
start-up.
"""

from __future__ import annotations

import copy
import functools
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn
from transformers import AutoModelForCausalLM

from engine.parallel.layers import RowParallelLinear
from operate.planning.hub_configs import HubCheckpoint


@dataclass(frozen=True)
class WeightBytes:
    """Weights of one replica and of one rank.

    Attributes:
        num_parameters: parameters of the model (every expert included).
        total: bytes of one replica's weights.
        per_rank: bytes rank 0 holds.
        int8_parameters: parameters held as int8 (W8A8), else 0.
    """

    num_parameters: int
    total: int
    per_rank: int
    int8_parameters: int


def _int8_names(model: nn.Module) -> set[str]:
    """Parameters a W8A8 checkpoint holds as int8 (see the module docstring)."""
    names = set()
    for module_name, module in model.named_modules():
        if ".layers." not in f".{module_name}." or module_name.endswith("mlp.gate"):
            continue
        if isinstance(module, nn.Linear | RowParallelLinear):
            names.add(f"{module_name}.weight")
        for attr in ("gate_up_proj", "down_proj"):
            if isinstance(getattr(module, attr, None), nn.Parameter):  # routed experts
                names.add(f"{module_name}.{attr}")
    return names


def _bytes(model: nn.Module, int8: bool) -> tuple[int, int, int]:
    """(parameters, bytes, int8 parameters) of `model`, buffers included in the bytes."""
    quantised = _int8_names(model) if int8 else set()
    params = total = in_int8 = 0
    for name, p in model.named_parameters():
        params += p.numel()
        if name in quantised:
            in_int8 += p.numel()
            total += p.numel()
        else:
            total += p.numel() * p.element_size()
    total += sum(b.numel() * b.element_size() for b in model.buffers())
    return params, total, in_int8


_STORED_BYTES = {"F8_E4M3": 1, "F8_E8M0": 1, "I8": 1, "U8": 1, "F4": 0.5, "F32": 4}
"""Bytes per stored element of the dtypes an FP8/MXFP4 checkpoint's quantised tensors use
(safetensors' dtype names; an `F4` header counts 4-bit values: a float4_e2m1fn_x2 `[N, K / 2]`
is stored with shape `[N, K]`)."""


def fp8_checkpoint_weight_bytes(
    directory: Path, dtype: torch.dtype, tensor_parallel_size: int
) -> WeightBytes:
    """Weights of a local block-scaled FP8 / MXFP4 checkpoint (`quantization_config: {quant_method:
    fp8}`) as the engine holds them (`engine.quantization.fp8_loader`): each quantised weight
    (one with a `weight_scale_inv` / `scale` tensor beside it) and its scales in their stored
    bytes, every other tensor in `dtype`. Read from the safetensors headers, no weights loaded.

    The few layers the engine dequantises at load (DeepSeek MLA's query and latent projections,
    grouped linears) are counted at their stored bytes too, which undercounts them by
    `dtype`'s size over one byte (DeepSeek-V3: about 0.6% of the parameters). FP8 checkpoints run
    on one rank, so `per_rank` is `total` split evenly over `tensor_parallel_size`.

    Returns:
        `WeightBytes` with `int8_parameters` = the parameters held as 1-byte FP8 or packed FP4
        codes (packed values counted two per byte).
    """
    from safetensors import safe_open

    headers: dict[str, tuple[str, int]] = {}
    for path in sorted(directory.glob("*.safetensors")):
        with safe_open(str(path), framework="pt") as f:
            for name in f.keys():
                sl = f.get_slice(name)
                headers[name] = (sl.get_dtype(), int(np.prod(sl.get_shape(), dtype=np.int64)))
    scales = {
        n for n in headers if n.endswith((".weight_scale_inv", ".scale"))
        and f"{n.rsplit('.', 1)[0]}.weight" in headers
    }  # fmt: skip
    quantised = {f"{n.rsplit('.', 1)[0]}.weight" for n in scales}
    elem = torch.tensor([], dtype=dtype).element_size()
    params = total = coded = 0
    for name, (kind, numel) in headers.items():
        if name in scales:
            total += int(numel * _STORED_BYTES.get(kind, elem))
            continue
        if name in quantised:
            values = numel * (2 if kind in ("I8", "U8") else 1)  # packed e2m1: 2 per byte
            params += values
            coded += values
            total += int(numel * _STORED_BYTES.get(kind, elem))
        else:
            params += numel
            total += numel * elem
    return WeightBytes(params, total, -(-total // tensor_parallel_size), coded)


@functools.lru_cache(maxsize=16)
def hub_weight_bytes(
    hub: HubCheckpoint, dtype: torch.dtype, tensor_parallel_size: int, expert_parallel: bool
) -> WeightBytes:
    """Weights of a stored hub checkpoint (`operate.planning.hub_configs`) in `dtype` (int8
    where its `weights` is `w8a8`), whole and on rank 0 of `tensor_parallel_size`. Cached per
    process: building DeepSeek-V4-Flash on the meta device takes a few seconds.

    Raises:
        ValueError: a head count, `o_groups`, an intermediate size or an expert count that
            `tensor_parallel_size` does not divide (the engine's own sharding message).
    """
    from engine.parallel.sharding import shard_model

    config = hub.load_config()
    w8a8 = hub.weights == "w8a8"
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(copy.deepcopy(config), dtype=dtype)
    params, total, in_int8 = _bytes(model, w8a8)
    shard_model(model, config, 0, tensor_parallel_size, expert_parallel)
    _, per_rank, _ = _bytes(model, w8a8)
    return WeightBytes(params, total, per_rank, in_int8)
