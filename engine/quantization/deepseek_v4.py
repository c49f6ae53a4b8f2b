"""ModelSlim's W8A8 layout of DeepSeek-V4, the one Ascend serves V4-Flash in
(`Eco-Tech/DeepSeek-V4-Flash-w8a8-mtp` on ModelScope, `--quantization ascend`).

Names: DeepSeek's own (`embed.weight`, `layers.{i}.attn.wq_a.weight`,
`layers.{i}.ffn.experts.{e}.w1.weight`, `hc_head_fn`, `head.weight`, the MTP layer as
`mtp.0.*`), without transformers' renaming; the routed experts stay separate 2-D tensors. int8
(`W8A8_DYNAMIC`: int8 weight, per-output-channel `weight_scale` and zero `weight_offset`
`[out, 1]`; activations quantised per token at run time), in every decoder layer and in the MTP
layer's block:

- attention `attn.wq_a`, `attn.wq_b`, `attn.wkv` (the K=V projection), `attn.wo_b`, and the
  indexer's query projection `attn.indexer.wq_b`;
- the shared expert's and every routed expert's `w1` (gate), `w3` (up), `w2` (down).

Everything else is `FLOAT`, as stored: embedding, LM head, norms, hyper-connection tensors
(`hc_*`), the routers (`ffn.gate.weight`, `ffn.gate.bias`, the hash table `tid2eid`), attention
sinks, the grouped output projection `attn.wo_a`, the compressors' `wkv` / `wgate` / `ape` /
`norm` (the indexer's too), the indexer's `weights_proj`, and the MTP layer's `e_proj`, `h_proj`,
`enorm`, `hnorm`, `norm` and `hc_head_*`.

Sources (vllm-ascend at 182b75e, the engine the ModelScope checkpoint's tutorial
`docs/source/tutorials/models/DeepSeek-V4-Flash.md` serves it with): `quantization/
modelslim_config.py` recognises a V4 description by its top-level `hc_head_fn` key and maps
DeepSeek's names (`_apply_extra_quant_adaptations`, `QUANT_MODEL_PREFIX_MAPPINGS` /
`QUANT_MODEL_SUBSTR_MAPPINGS["deepseek_v4"]`); `attention/dsa_v1.py` runs `wq_a`, `wkv` and
`wq_b` through `npu_quant_matmul` with their `weight_scale` when they are W8A8_DYNAMIC and `wo_a`
(off Ascend 950) through `npu_transpose_batchmatmul` on its float weight with no scale, which
`ops/linear.py` reshapes per group at load; `models/deepseek_v4/compressor.py` hands the
compressors' `wkv` / `wgate` weights as they are to the fused `compressor` op; `indexer.py` has a
W8A8_DYNAMIC path for `wq_b` and builds `weights_proj` without quantisation; `model.py` builds the
router without quantisation and the shared and routed experts with it (the per-expert
`[out, 1]` scales of `methods/w8a8_dynamic.py`); `mtp.py` builds the MTP block like a decoder
layer (its linears looked up in the description as `mtp.0.*`) and `e_proj` / `h_proj` without a
prefix, which the ModelSlim config resolves to unquantised.

Assumed where no source shows it: `W8A8_DYNAMIC` rather than static `W8A8` for the attention
projections (the fused V4 attention paths exist only for W8A8_DYNAMIC; the engine's loader runs
either), float32 scales (vllm-ascend loads either dtype), and a description entry for every
tensor. Checked by `tests/engine/test_w8a8_deepseek_v4.py` against the engine's loader and the
float model.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import torch

from engine.quantization.description import FLOAT, W8A8_DYNAMIC
from engine.quantization.int8 import dynamic_tensors
from engine.quantization.tensor_files import TensorFiles

INT8_LINEARS = re.compile(
    r"(?:^|\.)(?:attn\.(?:wq_a|wq_b|wkv|wo_b|indexer\.wq_b)"
    r"|ffn\.(?:shared_experts|experts\.\d+)\.w[123])\.weight$"
)
"""Weights (DeepSeek's names) that the layout holds as int8."""

_TOP_LEVEL = {
    "embed_tokens.weight": "embed.weight",
    "lm_head.weight": "head.weight",
    "hc_head.hc_fn": "hc_head_fn",
    "hc_head.hc_base": "hc_head_base",
    "hc_head.hc_scale": "hc_head_scale",
}
"""Names transformers saves without turning them back into DeepSeek's (its renaming of these is
anchored at the start of the key, which its own `model.` prefix hides)."""

_ATTN_NORM = re.compile(r"(^|\.)attn\.norm\.weight$")
"""The attention's K=V norm as transformers saves it; DeepSeek's (and vllm-ascend's) name is
`attn.kv_norm` (transformers' `.norm.` -> `.kv_norm.` renaming is for the compressors' `norm`)."""


def deepseek_name(name: str) -> str:
    """A V4 tensor name as stored by `save_pretrained` (`model.layers.0.attn.wq_a.weight`,
    `model.embed_tokens.weight`, `model.layers.0.attn.norm.weight`) -> DeepSeek's
    (`layers.0.attn.wq_a.weight`, `embed.weight`, `layers.0.attn.kv_norm.weight`); names already
    in DeepSeek's form are returned as they are."""
    short = name.removeprefix("model.")
    return _ATTN_NORM.sub(r"\1attn.kv_norm.weight", _TOP_LEVEL.get(short, short))


@dataclass(frozen=True)
class QuantisedV4:
    """A V4 checkpoint in the layout above.

    Attributes:
        tensors: every tensor, by DeepSeek name.
        types: each name's description type (`W8A8_DYNAMIC` or `FLOAT`).
        num_layers: linears quantised.
        source_bytes: tensor bytes of the float checkpoint.
    """

    tensors: dict[str, torch.Tensor]
    types: dict[str, str]
    num_layers: int
    source_bytes: int


def quantize_v4(files: TensorFiles) -> QuantisedV4:
    """Every tensor of a float V4 checkpoint, in the layout above.

    Args:
        files: the float checkpoint's tensors (DeepSeek's names, or as `save_pretrained` writes
            them: per-expert 2-D weights either way).

    Raises:
        ValueError: the routed experts are stored merged (3-D), not per expert.
    """
    tensors: dict[str, torch.Tensor] = {}
    types: dict[str, str] = {}
    layers = source_bytes = 0
    for stored in files.names():
        name = deepseek_name(stored)
        tensor = files.get(stored)
        source_bytes += tensor.numel() * tensor.element_size()
        if ".experts." in name and tensor.dim() == 3:
            raise ValueError(
                f"{files.directory}: tensor {stored} holds merged experts; ModelSlim's layout "
                "needs them per expert (`experts.<e>.w1|w2|w3.weight`, as DeepSeek ships them)"
            )
        if INT8_LINEARS.search(name):
            with torch.no_grad():
                new = dynamic_tensors(name.removesuffix(".weight"), tensor)
            tensors.update(new)
            types.update(dict.fromkeys(new, W8A8_DYNAMIC))
            layers += 1
        else:
            tensors[name] = tensor.contiguous()
            types[name] = FLOAT
    return QuantisedV4(tensors, types, layers, source_bytes)
