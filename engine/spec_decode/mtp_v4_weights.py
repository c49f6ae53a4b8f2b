"""Reading DeepSeek-V4's MTP layer (`engine.spec_decode.mtp_v4.V4MtpLayer`) from a checkpoint's
`mtp.0.*` tensors.

Quantised checkpoints. In msModelSlim's W8A8 layout of V4 (`engine.quantization.deepseek_v4`, the
Ascend `…-w8a8-mtp` checkpoints) the block's linears and experts are int8 `weight`s with
companions (`weight_scale`, `weight_offset`; static W8A8 also `input_scale`, `input_offset`,
`deq_scale`, `quant_bias`), typed `W8A8` / `W8A8_DYNAMIC` in `quant_model_description.json`.
`load_v4_mtp` loads such a weight cast into its float parameter, as transformers loads the
decoder layers' int8 weights, and leaves the companions to the W8A8 loader
(`engine.quantization.loader.apply_quantization`), which then swaps the block's linears and
experts for int8 ones exactly as the decoder layers', finding each `mtp.0.*` tensor's place
through `V4MtpLayer.checkpoint_target` (`CheckpointMapped`). DeepSeek's own FP8/FP4 layout
(block `.scale` companions, float8 weights) is refused.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors import safe_open
from transformers import PreTrainedModel

from engine.deepseek_v4.cache import SLIDING
from engine.quantization.description import LINEAR_TYPES, QUANT_DESCRIPTION_FILE, QuantDescription
from engine.spec_decode.mtp_model import num_mtp_layers
from engine.spec_decode.mtp_v4 import (
    EXPERT_WEIGHT,
    PREFIX,
    V4MtpLayer,
    block_config,
    mtp_layer_type,
)

W8A8_COMPANIONS = frozenset(
    {"weight_scale", "weight_offset", "input_scale", "input_offset", "deq_scale", "quant_bias"}
)
"""msModelSlim's tensors beside a W8A8 / W8A8_DYNAMIC int8 weight, read by the W8A8 loader."""
_BLOCK_SCALE = "scale"
"""DeepSeek's FP8/FP4 block scales (`<layer>.scale`), refused."""
_READ_DTYPES = frozenset({torch.float32, torch.bfloat16, torch.float16, torch.int64})
"""Tensor dtypes read as they are (int64: a hash-routing table, which the MTP layer has none
of); besides these only int8 weights the quant description types W8A8 / W8A8_DYNAMIC are
taken."""


def load_v4_mtp(model: PreTrainedModel, directory: Path) -> V4MtpLayer:
    """The checkpoint's first MTP layer, built for and sharing embedding and rotary embedding
    with `model` (a `DeepseekV4ForCausalLM` as transformers loaded it, before our fused layers),
    with each parameter in the dtype and on the device of the target's counterpart.

    In a W8A8 checkpoint (a `quant_model_description.json`) the int8 weights it types `W8A8` /
    `W8A8_DYNAMIC` are loaded cast into the float parameters and their companions skipped; the
    W8A8 loader (`engine.quantization.apply_quantization`, which `load_model` runs after this)
    replaces those linears and experts with int8 ones.

    Args:
        directory: the checkpoint folder (`config.json`, safetensors shards and their index).

    Raises:
        ValueError: the config declares no MTP layer; the MTP layer is not sliding-window only;
            its tensors are missing, of the wrong shape, unknown, FP8/FP4-quantised (DeepSeek's
            `.scale` companions or float8 weights), or int8 / W8A8 companions the quant
            description does not type W8A8 / W8A8_DYNAMIC.
    """
    config = model.config
    name = str(config.name_or_path or directory)
    if num_mtp_layers(config) < 1:
        raise ValueError(
            f"{name}: the checkpoint has no multi-token-prediction layer "
            "(num_nextn_predict_layers is 0); speculative method 'mtp' needs one"
        )
    raw = json.loads((directory / "config.json").read_text())
    layer_type = mtp_layer_type(raw, config)
    if layer_type != SLIDING:
        raise ValueError(
            f"{name}: the MTP layer's attention is {layer_type}; speculative method 'mtp' takes "
            "a sliding-window MTP layer only (compress ratio 0, as in DeepSeek-V4-Flash and -Pro)"
        )
    decoder = model.get_decoder()
    layer = V4MtpLayer(block_config(config, layer_type), decoder.embed_tokens, decoder.rotary_emb)
    description = directory / QUANT_DESCRIPTION_FILE
    types = QuantDescription.read(description).tensor_types if description.is_file() else {}
    state = _state_dict(_read_tensors(directory, name), layer, name, types)
    own = {
        k: v
        for k, v in layer.state_dict().items()
        if not k.startswith(("embed_tokens.", "rotary_emb."))
    }
    missing = sorted(set(own) - set(state))
    if missing:
        raise ValueError(
            f"{name}: MTP tensor for {missing[0]} is missing from the checkpoint "
            f"({len(missing)} missing in all)"
        )
    for key, value in state.items():
        if tuple(value.shape) != tuple(own[key].shape):
            raise ValueError(
                f"{name}: MTP tensor for {key} has shape {tuple(value.shape)}, expected "
                f"{tuple(own[key].shape)}"
            )
    layer.load_state_dict(state, strict=False)
    _mirror_dtypes(layer, model)
    return layer.eval()


def _read_tensors(directory: Path, name: str) -> dict[str, torch.Tensor]:
    """The checkpoint's `PREFIX` tensors, keyed without the prefix."""
    index = directory / "model.safetensors.index.json"
    if index.is_file():
        weight_map = json.loads(index.read_text()).get("weight_map", {})
        shards: dict[Path, list[str]] = {}
        for key, shard in weight_map.items():
            if key.startswith(PREFIX):
                shards.setdefault(directory / shard, []).append(key)
    else:
        shards = {}
        for path in sorted(directory.glob("*.safetensors")):
            with safe_open(path, framework="pt") as f:
                keys = [k for k in f.keys() if k.startswith(PREFIX)]
            if keys:
                shards[path] = keys
    tensors = {}
    for path, keys in shards.items():
        if not path.is_file():
            raise ValueError(f"{name}: shard {path.name} of the MTP layer is missing")
        with safe_open(path, framework="pt") as f:
            for key in keys:
                tensors[key[len(PREFIX) :]] = f.get_tensor(key)
    if not tensors:
        raise ValueError(
            f"{name}: the config declares an MTP layer but the checkpoint has no {PREFIX}* tensors"
        )
    return tensors


def _state_dict(
    tensors: dict[str, torch.Tensor], layer: V4MtpLayer, name: str, types: dict[str, str]
) -> dict[str, torch.Tensor]:
    """`V4MtpLayer` parameter name -> tensor (routed experts merged as transformers stores them:
    `gate_up_proj[e] = [w1; w3]`, `down_proj[e] = w2`); `types` is the quant description's
    tensor name -> type (empty for a float checkpoint)."""
    for key, value in tensors.items():  # first, so that an FP4 weight packed as int8 says so
        stem, _, suffix = key.rpartition(".")
        if suffix == _BLOCK_SCALE or str(value.dtype).startswith(("torch.float8", "torch.float4")):
            weight = tensors.get(f"{stem}.weight", value) if suffix == _BLOCK_SCALE else value
            raise ValueError(
                f"{name}: MTP tensor {PREFIX}{key} is FP8/FP4-quantised ({weight.dtype} weight, "
                "DeepSeek's block-scaled layout), which is not supported; use a float or "
                "msModelSlim W8A8 checkpoint"
            )
    state: dict[str, torch.Tensor] = {}
    experts: dict[int, dict[str, torch.Tensor]] = {}
    for key, value in tensors.items():
        full = f"{PREFIX}{key}"
        stem, _, suffix = key.rpartition(".")
        w8a8 = types.get(full) in LINEAR_TYPES
        if suffix in W8A8_COMPANIONS:
            if w8a8 and types.get(f"{PREFIX}{stem}.weight") in LINEAR_TYPES:
                continue  # read by the W8A8 loader
            raise ValueError(
                f"{name}: MTP tensor {full} is a W8A8 companion of a weight that "
                f"{QUANT_DESCRIPTION_FILE} does not type W8A8 / W8A8_DYNAMIC"
            )
        if value.dtype == torch.int8 and not (w8a8 and suffix == "weight"):
            raise ValueError(
                f"{name}: MTP tensor {full} is int8 but {QUANT_DESCRIPTION_FILE} does not type "
                f"it W8A8 / W8A8_DYNAMIC (it says {types.get(full, 'nothing')})"
            )
        if value.dtype != torch.int8 and value.dtype not in _READ_DTYPES:
            raise ValueError(
                f"{name}: MTP tensor {full} has dtype {value.dtype}; the MTP layer reads "
                "bfloat16, float16 or float32 weights, or msModelSlim W8A8 int8 ones"
            )
        target = layer.checkpoint_target(key)
        if target is None:
            raise ValueError(
                f"{name}: unknown MTP tensor {full} (a sliding-window MTP layer has none of "
                "that name)"
            )
        if match := EXPERT_WEIGHT.fullmatch(key):
            experts.setdefault(int(match.group(1)), {})[match.group(2)] = value
        else:
            state[target[0]] = value  # int8: cast on loading, replaced by the W8A8 loader
    n = int(layer.config.n_routed_experts)
    if experts:
        if sorted(experts) != list(range(n)) or any(len(w) != 3 for w in experts.values()):
            raise ValueError(
                f"{name}: the MTP layer's routed experts are incomplete: expected w1, w2, w3 of "
                f"experts 0..{n - 1}"
            )
        dtypes = {w.dtype for ws in experts.values() for w in ws.values()}
        if len(dtypes) > 1:
            raise ValueError(
                f"{name}: the MTP layer's routed experts mix dtypes {sorted(map(str, dtypes))}; "
                "ModelSlim quantises all experts of a layer"
            )
        state["block.mlp.experts.gate_up_proj"] = torch.stack(
            [torch.cat([experts[e]["w1"], experts[e]["w3"]], dim=0) for e in range(n)]
        )
        state["block.mlp.experts.down_proj"] = torch.stack([experts[e]["w2"] for e in range(n)])
    return state


def _mirror_dtypes(layer: V4MtpLayer, model: PreTrainedModel) -> None:
    """Give each tensor of `layer` the dtype and device of its counterpart in the target: the
    block's those of the target's last decoder layer (the same module class and names), the
    norms the final norm's, `hc_head` the target's `hc_head`'s, the projections the LM
    head's (transformers keeps V4's norms and hyper-connections in float32)."""
    decoder = model.get_decoder()
    last = dict(decoder.layers[-1].named_parameters())
    last.update(dict(decoder.layers[-1].named_buffers()))
    head = model.get_output_embeddings().weight
    for module_name, module in layer.named_children():
        if module_name in ("embed_tokens", "rotary_emb"):
            continue
        for key, tensor in [*module.named_parameters(), *module.named_buffers()]:
            if module_name == "block":
                like = last.get(key, head)
            elif module_name in ("enorm", "hnorm", "norm"):
                like = decoder.norm.weight
            elif module_name == "hc_head":
                like = decoder.hc_head.hc_fn
            else:
                like = head
            dtype = like.dtype if tensor.is_floating_point() else tensor.dtype
            tensor.data = tensor.data.to(device=like.device, dtype=dtype)
