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

Names are resolved as transformers loaded the float tensors (`checkpoint_names`), so checkpoints
in DeepSeek-V4's own naming work too: the int8 per-expert weights that transformers merged into a
layer's 3-D `gate_up_proj` / `down_proj` become one `W8A8DynamicExperts` (`experts`). Tensors of
a multi-token-prediction layer (`mtp.*`) are quantised like the rest when the model has its MTP
layer attached (`load_model(..., mtp=True)`) as a `CheckpointMapped` module, which says where
each of them went, and left alone when it has none (the engine does not load them then). A
quantised linear whose class overrides `nn.Linear.forward` (DeepSeek-V4's grouped `o_a_proj`) is
refused: its int8 weight would be run as a plain linear.

Under tensor / expert parallel every rank runs this on the whole model it loaded (so each tensor
is checked against the whole layer's shape), then shards the W8A8 modules in their int8 form
(`engine.parallel.sharding`: the scales follow the output channels they belong to).
"""

from __future__ import annotations

import logging

import torch
from torch import nn

from engine.checkpoint_ref import CheckpointRef
from engine.quantization.checkpoint_names import CheckpointNames
from engine.quantization.description import (
    QUANT_DESCRIPTION_FILE,
    W8A8,
    W8A8_DYNAMIC,
    QuantDescription,
)
from engine.quantization.experts import EXPERT_INDEX, stack_experts
from engine.quantization.int8 import deq_scale_from_int64
from engine.quantization.linear import W8A8DynamicLinear, W8A8StaticLinear
from engine.quantization.tensor_files import (
    TensorFiles,
    check,
    dynamic_scale,
    int8_weight,
    per_channel,
    scalar,
)
from npu_ops.ops import active_ops
from npu_ops.ops.quant import QUANT_OUTPUT_DTYPES
from npu_ops.ops.registry import REFERENCE

logger = logging.getLogger(__name__)


def _static(files: TensorFiles, layer: str, linear: nn.Linear) -> W8A8StaticLinear:
    weight = int8_weight(files, layer, linear)
    n = linear.out_features
    deq = per_channel(files, f"{layer}.deq_scale", n)
    deq = deq_scale_from_int64(deq) if deq.dtype == torch.int64 else deq.float()
    bias = per_channel(files, f"{layer}.quant_bias", n)
    check(bias.dtype == torch.int32, files, f"{layer}.quant_bias", f"is {bias.dtype}, not int32")
    return W8A8StaticLinear(
        weight,
        scalar(files, f"{layer}.input_scale"),
        scalar(files, f"{layer}.input_offset"),
        deq,
        bias,
    )


def _dynamic(files: TensorFiles, layer: str, linear: nn.Linear) -> W8A8DynamicLinear:
    weight = int8_weight(files, layer, linear)
    scale = dynamic_scale(files, layer, linear.out_features)
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

MTP_PREFIX = "mtp."
"""DeepSeek-V4's naming of its multi-token-prediction layer's tensors (`mtp.0.*`)."""


def unloaded_mtp(name: str, model: nn.Module) -> bool:
    """A tensor of an MTP layer the model was loaded without (transformers ignores `mtp.*`)."""
    return name.startswith(MTP_PREFIX) and not hasattr(model, "mtp")


def _check_all_placed(
    desc: QuantDescription, model: nn.Module, names: CheckpointNames, owned: set[str]
) -> None:
    """Every described tensor is a model tensor or owned by a quantised layer.

    Anything else (a smooth-quant norm bias, a rotation matrix) would be silently dropped,
    leaving a model that computes something other than the quantised one.
    """
    for name, qtype in desc.tensor_types.items():
        if name in owned or ".kv_cache_" in name or unloaded_mtp(name, model):
            continue
        if names.resolve(name) is None:
            raise ValueError(
                f"{desc.path}: tensor {name} ({qtype}) has no place in this model; ModelSlim "
                "features beyond W8A8/W8A8_DYNAMIC linears (smooth-quant norm biases, rotations) "
                "are not supported"
            )


def _check_runnable(dtype: torch.dtype) -> None:
    if active_ops().impl_name("quant_matmul") != REFERENCE and dtype not in QUANT_OUTPUT_DTYPES:
        raise ValueError(f"W8A8 on this device needs dtype bfloat16 or float16, not {dtype}")


def apply_quantization(model: nn.Module, ref: CheckpointRef) -> int:
    """Replace the linears (and routed experts) `quant_model_description.json` marks W8A8 /
    W8A8_DYNAMIC.

    A no-op (returning 0) for checkpoints without the description file and for GGUF files.

    Args:
        model: the HF model just loaded from `ref` (float weights, any device), with its MTP
            layer as `model.mtp` if it is to be served.
        ref: the checkpoint.

    Returns:
        The number of modules replaced (a layer's routed experts count once).

    Raises:
        ValueError: one line naming the file or tensor: an unsupported quant type, a missing
            tensor, a wrong dtype or shape, a quantised entry that is not a linear layer (or is
            a grouped one), routed experts quantised partly or as static `W8A8`, a described
            tensor the model has no place for, or a dtype the device's `quant_matmul` cannot
            produce.
    """
    path = ref.directory / QUANT_DESCRIPTION_FILE
    if ref.gguf_file is not None or not path.is_file():
        return 0
    desc = QuantDescription.read(path)
    _check_runnable(next(model.parameters()).dtype)
    if desc.kv_cache_quant:
        logger.warning("%s: ignoring KV-cache quantisation %s", path, desc.kv_cache_quant)
    files = TensorFiles(ref.directory)
    names = CheckpointNames(model)
    owned: set[str] = set()
    experts: dict[str, dict[tuple[str, int, int], str]] = {}
    replaced = 0
    for layer, qtype in desc.quantised_layers().items():
        target = names.resolve(f"{layer}.weight")
        if target is None:
            if unloaded_mtp(layer, model):
                continue
            if layer.startswith(MTP_PREFIX) and not names.claimed(layer):
                raise ValueError(
                    f"{path}: {layer}.weight is the MTP layer's, whose module "
                    f"({type(model.mtp).__name__}) does not say where its checkpoint "
                    "tensors went (engine.quantization.checkpoint_names.CheckpointMapped)"
                )
            raise ValueError(f"{path}: {layer}.weight names no module of the model")
        module_name, _, param = target.key.rpartition(".")
        module = model.get_submodule(module_name)
        owned.update(f"{layer}.{suffix}" for suffix in _OWNED[qtype])
        if target.part is not None:  # a routed expert's weight, merged into a 3-D parameter
            expert = EXPERT_INDEX.search(layer)
            if qtype != W8A8_DYNAMIC or expert is None:
                raise ValueError(
                    f"{path}: {layer} is merged into {target.key} as {qtype}; only "
                    f"{W8A8_DYNAMIC} per-expert weights (`experts.<e>.`) are supported"
                )
            key = (param, target.part, int(expert.group(1)))
            experts.setdefault(module_name, {})[key] = layer
            continue
        if not isinstance(module, nn.Linear) or param != "weight":
            if files.get(f"{layer}.weight").is_floating_point():
                continue  # a float tensor ModelSlim tagged (smoothed norm); loaded as is
            raise ValueError(f"{path}: {layer} is a {type(module).__name__}, not a linear layer")
        if type(module).forward is not nn.Linear.forward:
            raise ValueError(
                f"{path}: {layer} is a {type(module).__name__}, whose forward is not a plain "
                "linear; keep it FLOAT (ModelSlim's DeepSeek-V4 layout keeps o_a_proj/wo_a float)"
            )
        build = _static if qtype == W8A8 else _dynamic
        model.set_submodule(module_name, build(files, layer, module).to(module.weight.device))
        replaced += 1
    for module_name, parts in experts.items():
        module = model.get_submodule(module_name)
        device = next(module.parameters()).device
        experts = stack_experts(files, module_name, module, parts)
        model.set_submodule(module_name, experts.to(device))
        replaced += 1
    _check_all_placed(desc, model, names, owned)
    logger.info("%s: %d modules run %s", ref.directory, replaced, desc.model_quant_type)
    return replaced
