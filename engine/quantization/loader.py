"""Swap a loaded model's linear layers for W8A8 ones, per the checkpoint's quant description.

`transformers` loads a ModelSlim checkpoint like a float one: each quantised `<layer>.weight`
(int8, the float layer's shape) lands, cast, in the float `nn.Linear`, and the extra tensors
are unexpected keys it skips. `apply_quantization` then reads the quantised tensors from the
safetensors files themselves and replaces each layer. Tensor names, dtypes and shapes follow
msModelSlim docs/en/feature_guide/quick_quantization_v1/quantization_result.md ("W8A8 (Static
Quantization)", "W8A8_DYNAMIC (Dynamic Quantization)") and the parameters vllm-ascend creates
for them (`get_weight`, `get_pertensor_param`, `get_perchannel_param` in
vllm_ascend/quantization/w8a8.py and methods/w8a8_dynamic.py):

- `W8A8`: `weight` int8 `[out, in]`; `input_scale`, `input_offset` `[1]` float16/bfloat16
  (vllm-ascend: int8 offset); `deq_scale` `[out]` float32, or int64 for float16 models;
  `quant_bias` `[out]` int32 (the float bias folded in).
- `W8A8_DYNAMIC`: `weight` int8 `[out, in]`; `weight_scale`, `weight_offset` `[out]` or
  `[out, 1]`; the float `bias`, if any, as in the float model.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING

import torch
import torch.distributed as dist
from safetensors import safe_open
from torch import nn

from engine.quantization.description import (
    QUANT_DESCRIPTION_FILE,
    W8A8,
    W8A8_DYNAMIC,
    QuantDescription,
)
from engine.quantization.int8 import deq_scale_from_int64
from engine.quantization.linear import W8A8DynamicLinear, W8A8StaticLinear
from npu_ops.ops import active_ops
from npu_ops.ops.quant import QUANT_OUTPUT_DTYPES
from npu_ops.ops.registry import REFERENCE

if TYPE_CHECKING:
    from engine.model_loader import CheckpointRef

logger = logging.getLogger(__name__)

SAFETENSORS_INDEX = "model.safetensors.index.json"


class TensorFiles:
    """Reads single tensors of a checkpoint directory by name.

    The safetensors index says which shard holds a tensor; without one every `*.safetensors`
    file in the directory is searched (ModelSlim names its single file
    `quant_model_weight(s)*.safetensors`).
    """

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._where: dict[str, Path] = {}
        index = directory / SAFETENSORS_INDEX
        if index.is_file():
            weight_map = json.loads(index.read_text()).get("weight_map", {})
            self._where = {name: directory / shard for name, shard in weight_map.items()}
        else:
            for path in sorted(directory.glob("*.safetensors")):
                with safe_open(path, framework="pt") as f:
                    self._where.update(dict.fromkeys(f.keys(), path))

    def __contains__(self, name: str) -> bool:
        return name in self._where

    def get(self, name: str) -> torch.Tensor:
        """The tensor called `name`.

        Raises:
            ValueError: no file of the checkpoint holds it.
        """
        path = self._where.get(name)
        if path is None:
            raise ValueError(f"{self.directory}: quantised tensor {name} is missing")
        with safe_open(path, framework="pt") as f:
            return f.get_tensor(name)


def _check(cond: bool, files: TensorFiles, name: str, what: str) -> None:
    if not cond:
        raise ValueError(f"{files.directory}: tensor {name} {what}")


def _int8_weight(files: TensorFiles, layer: str, linear: nn.Linear) -> torch.Tensor:
    name = f"{layer}.weight"
    weight = files.get(name)
    _check(weight.dtype == torch.int8, files, name, f"is {weight.dtype}, expected int8")
    want = (linear.out_features, linear.in_features)
    _check(tuple(weight.shape) == want, files, name, f"has shape {list(weight.shape)}, not {want}")
    return weight


def _per_channel(files: TensorFiles, name: str, n: int) -> torch.Tensor:
    t = files.get(name)
    _check(t.numel() == n and t.shape[0] == n, files, name, f"has shape {list(t.shape)}, not [{n}]")
    return t.reshape(n)


def _scalar(files: TensorFiles, name: str) -> torch.Tensor:
    t = files.get(name)
    _check(t.numel() == 1, files, name, f"has shape {list(t.shape)}, expected [1]")
    return t.float()


def _static(files: TensorFiles, layer: str, linear: nn.Linear) -> W8A8StaticLinear:
    weight = _int8_weight(files, layer, linear)
    n = linear.out_features
    deq = _per_channel(files, f"{layer}.deq_scale", n)
    deq = deq_scale_from_int64(deq) if deq.dtype == torch.int64 else deq.float()
    bias = _per_channel(files, f"{layer}.quant_bias", n)
    _check(bias.dtype == torch.int32, files, f"{layer}.quant_bias", f"is {bias.dtype}, not int32")
    return W8A8StaticLinear(
        weight,
        _scalar(files, f"{layer}.input_scale"),
        _scalar(files, f"{layer}.input_offset"),
        deq,
        bias,
    )


def _dynamic(files: TensorFiles, layer: str, linear: nn.Linear) -> W8A8DynamicLinear:
    weight = _int8_weight(files, layer, linear)
    n = linear.out_features
    scale = _per_channel(files, f"{layer}.weight_scale", n)
    offset_name = f"{layer}.weight_offset"
    if offset_name in files:
        offset = _per_channel(files, offset_name, n)
        _check(not offset.any(), files, offset_name, "is not zero (asymmetric weights)")
    bias = None
    if linear.bias is not None:
        bias = linear.bias.detach()  # the float bias, loaded by transformers
    return W8A8DynamicLinear(weight, scale, bias)


_OWNED = {
    W8A8: ("input_scale", "input_offset", "deq_scale", "quant_bias", "weight_scale",
           "weight_offset", "bias"),  # the float bias is folded into quant_bias
    W8A8_DYNAMIC: ("weight_scale", "weight_offset"),
}  # fmt: skip
"""Tensor suffixes of a quantised layer that are not parameters of the float model."""


def _check_all_placed(desc: QuantDescription, model: nn.Module, owned: set[str]) -> None:
    """Every described tensor is a model tensor or owned by a quantised layer.

    Anything else (a smooth-quant norm bias, a rotation matrix) would be silently dropped,
    leaving a model that computes something other than the quantised one.
    """
    known = {name for name, _ in model.named_parameters(remove_duplicate=False)}
    known |= {name for name, _ in model.named_buffers()}
    for name, qtype in desc.tensor_types.items():
        if name in known or name in owned or ".kv_cache_" in name:
            continue
        raise ValueError(
            f"{desc.path}: tensor {name} ({qtype}) has no place in this model; ModelSlim "
            "features beyond W8A8/W8A8_DYNAMIC linears (smooth-quant norm biases, rotations) "
            "are not supported"
        )


def _check_runnable(dtype: torch.dtype) -> None:
    if dist.is_initialized() and dist.get_world_size() > 1:
        raise ValueError("W8A8 checkpoints run with tensor_parallel_size 1 only")
    if active_ops().impl_name("quant_matmul") != REFERENCE and dtype not in QUANT_OUTPUT_DTYPES:
        raise ValueError(f"W8A8 on this device needs dtype bfloat16 or float16, not {dtype}")


def apply_quantization(model: nn.Module, ref: CheckpointRef) -> int:
    """Replace the linears that `quant_model_description.json` marks W8A8 / W8A8_DYNAMIC.

    A no-op (returning 0) for checkpoints without the description file and for GGUF files.

    Args:
        model: the HF model just loaded from `ref` (float weights, any device).
        ref: the checkpoint.

    Returns:
        The number of layers replaced.

    Raises:
        ValueError: one line naming the file or tensor: an unsupported quant type, a missing
            tensor, a wrong dtype or shape, a quantised entry that is not a linear layer, a
            described tensor the model has no place for, tensor parallelism, or a dtype the
            device's `quant_matmul` cannot produce.
    """
    path = ref.directory / QUANT_DESCRIPTION_FILE
    if ref.gguf_file is not None or not path.is_file():
        return 0
    desc = QuantDescription.read(path)
    _check_runnable(next(model.parameters()).dtype)
    if desc.kv_cache_quant:
        logger.warning("%s: ignoring KV-cache quantisation %s", path, desc.kv_cache_quant)
    files = TensorFiles(ref.directory)
    owned: set[str] = set()
    replaced = 0
    for layer, qtype in desc.quantised_layers().items():
        try:
            module = model.get_submodule(layer)
        except AttributeError:
            raise ValueError(f"{path}: {layer}.weight names no module of the model") from None
        if not isinstance(module, nn.Linear):
            if files.get(f"{layer}.weight").is_floating_point():
                continue  # a float tensor ModelSlim tagged (smoothed norm); loaded as is
            raise ValueError(f"{path}: {layer} is a {type(module).__name__}, not a linear layer")
        build = _static if qtype == W8A8 else _dynamic
        quantised = build(files, layer, module).to(module.weight.device)
        parent, _, child = layer.rpartition(".")
        setattr(model.get_submodule(parent), child, quantised)
        owned.update(f"{layer}.{suffix}" for suffix in _OWNED[qtype])
        replaced += 1
    _check_all_placed(desc, model, owned)
    logger.info("%s: %d linear layers run %s", ref.directory, replaced, desc.model_quant_type)
    return replaced
