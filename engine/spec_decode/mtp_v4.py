"""DeepSeek-V4's multi-token-prediction (MTP) layer, the draft model of `method: mtp` for
`deepseek_v4` checkpoints.

transformers 5.24 does not build it (`DeepseekV4PreTrainedModel._keys_to_ignore_on_load_unexpected
= [r"(^|\\.)mtp\\..*"]`), so it is assembled here from the checkpoint's `mtp.0.*` tensors and
transformers' own V4 modules. Layout and math follow DeepSeek's reference `inference/model.py`
(`MTPBlock(Block)`, as quoted by ports of it) and vLLM's port
(`vllm/models/deepseek_v4/nvidia/mtp.py`, `DeepSeekV4MultiTokenPredictorLayer` and its
`load_weights`). With `D` = `hidden_size`, `n` = `hc_mult`, the layer's tensors are:

| tensor | shape | here |
|---|---|---|
| `mtp.0.e_proj.weight`, `mtp.0.h_proj.weight` | `[D, D]` | `e_proj`, `h_proj` |
| `mtp.0.enorm.weight`, `mtp.0.hnorm.weight`, `mtp.0.norm.weight` | `[D]` | RMSNorms |
| `mtp.0.hc_head_{fn,base,scale}` | `[n, n * D]`, `[n]`, `[1]` | `hc_head` (HyperHead) |
| every other `mtp.0.<name>` | as `layers.{i}.<name>` | `block`, a `DeepseekV4DecoderLayer` |

The block's names are those of a decoder layer in DeepSeek's layout (`attn_norm`, `ffn_norm`,
`hc_attn_*`, `hc_ffn_*`, `attn.{wq_a,q_norm,wq_b,wkv,kv_norm,wo_a,wo_b,attn_sink}`,
`ffn.gate.{weight,bias}`, `ffn.experts.{e}.w{1,2,3}.weight`, `ffn.shared_experts.w{1,2,3}.weight`),
mapped onto transformers' modules as its `conversion_mapping.py` maps `deepseek_v4`'s. The
block's attention type is the checkpoint's `compress_ratios[num_hidden_layers]` (the entry after
the decoder layers; 0, sliding-window only, in V4-Flash's and V4-Pro's published
`config.json`); its MoE routes by learned top-k (hash routing covers layers below
`num_hash_layers` only, and the MTP layer's index is `num_hidden_layers`).

At position `p` the layer takes the token `t_{p+1}` and the target's hidden *streams* at `p`
(`[n, D]`: the last decoder layer's output, before the model's `hc_head` collapses them):

    e = enorm(embed(t_{p+1}))                       [D]
    x = h_proj(hnorm(h_p)) + e_proj(e)              [n, D]  (hnorm per stream, e on every stream)
    x = block(x)                                    [n, D]  (own attention and KV, MoE, mHC)
    logits_{p+2} = head(norm(hc_head(x)))           (its own hc_head; the target's embed and head)

and `x`, its output streams, is what a further draft step takes in place of `h` (vLLM feeds it
back alike). vLLM also zeroes the embedding at position 0; the reference does not, nor does this.

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

The block's KV lives in a `HybridKVSpec` of one layer (`mtp_kv_spec`) whose sliding kinds are
addressed through the target's sliding-window table (`engine.spec_decode.model_proposer`).
Only a sliding-window MTP layer is taken: the drafter follows a step after the target's
`HybridBlockManager.commit` has released the sliding blocks behind the target's span, and a
compressed layer would pool its entries from compressor state in those blocks.
"""

from __future__ import annotations

import copy
import json
import logging
import re
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open
from torch import nn
from transformers import PretrainedConfig, PreTrainedModel
from transformers.modeling_outputs import BaseModelOutput
from transformers.models.deepseek_v4.modeling_deepseek_v4 import (
    DeepseekV4DecoderLayer,
    DeepseekV4HyperHead,
    DeepseekV4RMSNorm,
)

from engine.deepseek_v4.cache import SLIDING, HybridKVSpec
from engine.quantization.description import LINEAR_TYPES, QUANT_DESCRIPTION_FILE, QuantDescription
from engine.spec_decode.mtp_model import num_mtp_layers

logger = logging.getLogger(__name__)

PREFIX = "mtp.0."
"""The checkpoint's first MTP layer (the one drafted with; later ones are not loaded)."""

_EXTRAS = {
    "e_proj.weight": "e_proj.weight",
    "h_proj.weight": "h_proj.weight",
    "enorm.weight": "enorm.weight",
    "hnorm.weight": "hnorm.weight",
    "norm.weight": "norm.weight",
    "hc_head_fn": "hc_head.hc_fn",
    "hc_head_base": "hc_head.hc_base",
    "hc_head_scale": "hc_head.hc_scale",
}
"""The MTP layer's own tensors (after `PREFIX`) -> parameters of `V4MtpLayer`."""

_BLOCK = {
    "attn_norm.weight": "input_layernorm.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "hc_attn_fn": "attn_hc.fn",
    "hc_attn_base": "attn_hc.base",
    "hc_attn_scale": "attn_hc.scale",
    "hc_ffn_fn": "ffn_hc.fn",
    "hc_ffn_base": "ffn_hc.base",
    "hc_ffn_scale": "ffn_hc.scale",
    "attn.attn_sink": "self_attn.sinks",
    "attn.wq_a.weight": "self_attn.q_a_proj.weight",
    "attn.q_norm.weight": "self_attn.q_a_norm.weight",
    "attn.wq_b.weight": "self_attn.q_b_proj.weight",
    "attn.wkv.weight": "self_attn.kv_proj.weight",
    "attn.kv_norm.weight": "self_attn.kv_norm.weight",
    "attn.wo_a.weight": "self_attn.o_a_proj.weight",
    "attn.wo_b.weight": "self_attn.o_b_proj.weight",
    "ffn.gate.weight": "mlp.gate.weight",
    "ffn.gate.bias": "mlp.gate.e_score_correction_bias",
    "ffn.shared_experts.w1.weight": "mlp.shared_experts.gate_proj.weight",
    "ffn.shared_experts.w2.weight": "mlp.shared_experts.down_proj.weight",
    "ffn.shared_experts.w3.weight": "mlp.shared_experts.up_proj.weight",
}
"""A sliding-window decoder block's tensors in DeepSeek's layout -> `DeepseekV4DecoderLayer`'s
parameters (transformers' `conversion_mapping.py`, `"deepseek_v4"`); routed experts are merged
separately (`_EXPERT`)."""

_EXPERT = re.compile(r"ffn\.experts\.(\d+)\.(w[123])\.weight")

_EXPERT_TARGETS = {
    "w1": ("block.mlp.experts.gate_up_proj", 0),
    "w3": ("block.mlp.experts.gate_up_proj", 1),
    "w2": ("block.mlp.experts.down_proj", 0),
}
"""A routed expert's weight -> the merged parameter of `V4MtpLayer` it is part of, and which
part (`gate_up_proj[e] = [w1; w3]`, `down_proj[e] = w2`, as transformers merges them)."""

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


def mtp_layer_type(raw: dict[str, Any], config: PretrainedConfig) -> str:
    """The attention type of the first MTP layer, from the checkpoint's raw `config.json`.

    transformers truncates `compress_ratios` / `layer_types` to the decoder layers, so the raw
    file is read: `compress_ratios[num_hidden_layers]` (0: `sliding_attention`; else the
    layer type of that ratio in `config.compress_rates`), else `layer_types[num_hidden_layers]`,
    else `sliding_attention` (V4-Flash's and V4-Pro's), logged.

    Raises:
        ValueError: the ratio is not one of the config's compress rates.
    """
    n = int(config.num_hidden_layers)
    ratios, types = raw.get("compress_ratios"), raw.get("layer_types")
    if isinstance(ratios, list) and len(ratios) > n:
        ratio = int(ratios[n])
        if ratio == 0:
            return SLIDING
        by_rate = {int(r): kind for kind, r in dict(config.compress_rates).items()}
        if ratio not in by_rate:
            raise ValueError(
                f"compress_ratios[{n}] (the MTP layer's) is {ratio}, none of the compress rates "
                f"{dict(config.compress_rates)}"
            )
        return by_rate[ratio]
    if isinstance(types, list) and len(types) > n:
        return str(types[n])
    logger.info("config.json gives the MTP layer no attention type; taking sliding_attention")
    return SLIDING


def block_config(config: PretrainedConfig, layer_type: str) -> PretrainedConfig:
    """A copy of the target's config describing the MTP block alone: one layer of
    `layer_type` with learned top-k MoE routing."""
    block = copy.deepcopy(config)
    block.num_hidden_layers = 1
    block.layer_types = [layer_type]
    block.mlp_layer_types = ["moe"]
    return block


class V4MtpLayer(nn.Module):
    """The MTP layer (module docstring); embedding and rotary embedding are the target's.

    Args:
        config: `block_config`'s one-layer config.
        embed_tokens: the target's token embedding.
        rotary_emb: the target's `DeepseekV4RotaryEmbedding` (`main` and `compress` tables).

    Attributes:
        checkpoint_prefix: `PREFIX`; with `checkpoint_target` the layer is
            `engine.quantization.checkpoint_names.CheckpointMapped`, so the W8A8 loader finds
            where each `mtp.0.*` tensor went.
    """

    checkpoint_prefix = PREFIX

    def __init__(self, config: PretrainedConfig, embed_tokens: nn.Module, rotary_emb: nn.Module):
        super().__init__()
        d, eps = int(config.hidden_size), float(config.rms_norm_eps)
        self.config = config
        self.hc_mult = int(config.hc_mult)
        self.e_proj = nn.Linear(d, d, bias=False)
        self.h_proj = nn.Linear(d, d, bias=False)
        self.enorm = DeepseekV4RMSNorm(d, eps)
        self.hnorm = DeepseekV4RMSNorm(d, eps)
        self.norm = DeepseekV4RMSNorm(d, eps)
        self.hc_head = DeepseekV4HyperHead(config)
        self.block = DeepseekV4DecoderLayer(config, 0)
        self.embed_tokens = embed_tokens
        self.rotary_emb = rotary_emb

    def checkpoint_target(self, name: str) -> tuple[str, int | None] | None:
        """Where checkpoint tensor `mtp.0.<name>` (DeepSeek's layout) went: this layer's
        parameter name and, for a routed expert's weight, its part of the merged parameter
        (`w1` part 0 and `w3` part 1 of `block.mlp.experts.gate_up_proj`, `w2` part 0 of
        `block.mlp.experts.down_proj`); None for any other name (quantisation companions
        included)."""
        if name in _EXTRAS:
            return _EXTRAS[name], None
        if name in _BLOCK:
            return f"block.{_BLOCK[name]}", None
        if match := _EXPERT.fullmatch(name):
            return _EXPERT_TARGETS[match.group(2)]
        return None

    def forward(
        self,
        input_ids: torch.Tensor,
        previous: torch.Tensor,
        position_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """`[1, T]` next tokens and `[T, n * D]` hidden streams -> `[1, T, n * D]` output streams.

        Args:
            input_ids: row j's token `t_{p+1}` (position `p` = `position_ids[0, j]`).
            previous: row j's streams `h_p` (the target's, or this layer's own output).
            position_ids: `[1, T]`.
            attention_mask: for transformers' attention (references); the engine's
                `V4Attention` reads the step's `HybridStep` and ignores it.
        """
        tokens = input_ids.shape[1]
        e = self.enorm(self.embed_tokens(input_ids))  # [1, T, D]
        h = self.hnorm(previous.reshape(1, tokens, self.hc_mult, -1).to(e.dtype))
        x = self.h_proj(h) + self.e_proj(e).unsqueeze(-2)  # [1, T, n, D]
        rope = {
            kind: self.rotary_emb(e, position_ids=position_ids, layer_type=kind)
            for kind in ("main", "compress")
        }
        x = self.block(
            x,
            input_ids=input_ids,
            position_embeddings=rope,
            position_ids=position_ids,
            attention_mask=attention_mask,
        )
        return x.flatten(2)

    def final_hidden(self, streams: torch.Tensor) -> torch.Tensor:
        """`[..., n * D]` output streams -> `[..., D]`: `norm(hc_head(streams))`, the input of
        the LM head."""
        lead, width = streams.shape[:-1], streams.shape[-1] // self.hc_mult
        x = streams.reshape(1, -1, self.hc_mult, width)
        return self.norm(self.hc_head(x)).reshape(*lead, width)


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
        if match := _EXPERT.fullmatch(key):
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


def mtp_kv_spec(layer: V4MtpLayer, dtype: torch.dtype) -> HybridKVSpec:
    """The MTP block's cache: a one-layer hybrid spec (its `sliding_blocks` are the target's,
    set by `engine.spec_decode.build.fit_hybrid_drafter`)."""
    return HybridKVSpec.from_config(layer.config, dtype)


class V4MtpDecoder(nn.Module):
    """The MTP layer as a decoder `engine.model_runner.ModelRunner` can run:
    `forward(input_ids [1, T], position_ids [1, T], previous_hidden_states [T, n * D])` ->
    `last_hidden_state` `[1, T, n * D]`, the output streams (chained into the next draft step)."""

    def __init__(self, mtp: V4MtpLayer) -> None:
        super().__init__()
        self.mtp = mtp

    def forward(
        self,
        input_ids: torch.Tensor,
        position_ids: torch.Tensor,
        previous_hidden_states: torch.Tensor,
        use_cache: bool = False,
    ) -> BaseModelOutput:
        return BaseModelOutput(
            last_hidden_state=self.mtp(input_ids, previous_hidden_states, position_ids)
        )


class V4MtpHead(nn.Module):
    """`[R, n * D]` output streams -> `[R, vocab]` logits: the MTP layer's `hc_head` and `norm`,
    then the target's LM head."""

    def __init__(self, mtp: V4MtpLayer, lm_head: nn.Module) -> None:
        super().__init__()
        self.mtp = mtp
        self.lm_head = lm_head

    def forward(self, streams: torch.Tensor) -> torch.Tensor:
        return self.lm_head(self.mtp.final_hidden(streams))


class V4MtpDraftModel(nn.Module):
    """`V4MtpDecoder` and `V4MtpHead` in the shape of a causal LM for `ModelRunner`, plus the
    target's hidden streams of its latest forward pass (`conditioning`).

    The engine hands a proposer the target's final hidden states (after `hc_head` and the
    final norm); the MTP layer takes the streams before `hc_head`, which a forward pre-hook on
    the target's `hc_head` keeps until `conditioning` takes them.

    Args:
        mtp: the loaded layer (`load_v4_mtp`, attached to the target as `target.mtp`).
        target: the target model (its decoder's `hc_head` and its LM head).
    """

    def __init__(self, mtp: V4MtpLayer, target: nn.Module) -> None:
        super().__init__()
        self.decoder = V4MtpDecoder(mtp)
        self.head = V4MtpHead(mtp, target.get_output_embeddings())
        self._streams: torch.Tensor | None = None
        self._hook = target.get_decoder().hc_head.register_forward_pre_hook(self._keep)

    def _keep(self, module: nn.Module, args: tuple[torch.Tensor, ...]) -> None:
        self._streams = args[0]

    def conditioning(self, hidden: torch.Tensor) -> torch.Tensor:
        """The target's hidden streams `[T, n * D]` of the forward pass that gave `hidden`
        (`[T, D]`, its final hidden states); taken once.

        Raises:
            RuntimeError: no forward pass of `T` tokens ran since the last call.
        """
        streams, self._streams = self._streams, None
        if streams is None or streams.shape[:2] != (1, hidden.shape[0]):
            raise RuntimeError(
                "the MTP layer needs the target's hidden streams of the step just run; got "
                f"{None if streams is None else tuple(streams.shape)} for {hidden.shape[0]} tokens"
            )
        return streams[0].flatten(1)

    def get_decoder(self) -> nn.Module:
        """The layer as a decoder."""
        return self.decoder

    def get_output_embeddings(self) -> nn.Module:
        """`hc_head`, `norm` and the target's LM head."""
        return self.head
