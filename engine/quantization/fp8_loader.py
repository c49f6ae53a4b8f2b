"""Load a block-scaled FP8 / MXFP4 checkpoint (`quantization_config: {quant_method: fp8}`) with
its codes resident, without an offline conversion step.

`engine.model_loader.load_model` builds the float skeleton with transformers *without* its FP8
quantizer (which, without a GPU, dequantises every weight to bfloat16: "Using FP8 quantized
models requires a GPU or XPU, we will default to dequantizing the model to bf16"), so each FP8
weight first lands in its float layer as its bare codes. `apply_fp8_checkpoint` then reads the
quantised tensors from the safetensors files and replaces the layers:

- a tensor is quantised when the checkpoint stores a scale next to it: `<layer>.weight_scale_inv`
  (DeepSeek-V3, transformers' name) or `<layer>.scale` (DeepSeek-V4's, which transformers'
  `FineGrainedFP8HfQuantizer.update_weight_conversions` renames to `weight_scale_inv`);
- float8_e4m3fn weights are FP8 in tiles of the config's `weight_block_size`; packed e2m1
  weights (`float4_e2m1fn_x2`, or int8 as transformers' `_unpack_fp4` also reads them) are MXFP4
  with one UE8M0 scale per 32 values along K (V4's routed experts, `expert_dtype: fp4`);
- names resolve as transformers loaded the float tensors (`checkpoint_names`), so DeepSeek-V4's
  own naming and the per-expert weights merged into 3-D `gate_up_proj` / `down_proj` work;
- plain linears become `BlockScaledLinear`s, routed experts one `BlockScaledExperts` per layer;
- layers whose weight the engine reads as a float matrix are dequantised once, at load, into the
  model's dtype (resident as floats, logged): DeepSeek MLA's query and latent projections, which
  `engine.mla_attention` folds into its absorbed kernels, and grouped linears with their own
  `forward` (DeepSeek-V4's `o_a_proj`).

On an NPU (Atlas A2/A3, no FP8/FP4 GEMM) every replaced layer is converted at load to the
W8A8_DYNAMIC modules the ModelSlim path runs (`npu_quant_matmul`): the dequantised weight
re-quantised per output channel (`engine.quantization.int8.quantize_weight`), with the largest
relative rounding error logged and returned (`convert_to_w8a8`, `W8A8Conversion`). Ascend 950
keeps the codes: its FP8 / MX matmuls run them (`npu_ops.ops.npu.fp8`).

Not supported (start-up errors): tensor parallel (the FP8 modules are not sharded), the MTP layer
of an FP8 checkpoint, FP8 weights without scales, experts quantised partly.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass

import torch
from safetensors import safe_open
from torch import nn

from engine.checkpoint_ref import CheckpointRef
from engine.mla_attention import MLA_ATTENTIONS
from engine.quantization.checkpoint_names import CheckpointNames
from engine.quantization.experts import EXPERT_INDEX, W8A8DynamicExperts
from engine.quantization.fp8_config import Fp8CheckpointConfig
from engine.quantization.fp8_experts import PROJECTIONS, BlockScaledExperts
from engine.quantization.fp8_linear import BlockScaledLinear, Packed
from engine.quantization.int8 import quantize_weight
from engine.quantization.linear import W8A8DynamicLinear
from engine.quantization.loader import unloaded_mtp
from engine.quantization.tensor_files import TensorFiles
from npu_ops.ops.quant import (
    FP4_CODE_DTYPES,
    FP8_CODE_DTYPE,
    dequantize_fp8_block,
    dequantize_mxfp4,
)

logger = logging.getLogger(__name__)

SCALE_SUFFIXES = ("weight_scale_inv", "scale")
"""Names of a quantised weight's scales: `<layer>.weight_scale_inv` (V3), `<layer>.scale` (V4)."""

MLA_FLOAT_PROJECTIONS = frozenset(
    {"q_proj", "q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj"}
)
"""Projections of an MLA attention that `engine.mla_attention` reads as float matrices."""

F4_DTYPE = "F4"
"""safetensors' dtype name of `float4_e2m1fn_x2` (two e2m1 values a byte)."""
UNLOADED_KEY = "ascend_router.f4_codes_read_by_the_fp8_loader"
"""The name `f4_key_mapping` gives F4 tensors for transformers: no model parameter, so its loader
leaves them unread (they are `unexpected` keys)."""

_EXPERT_PROJECTION = {
    ("gate_up_proj", 0): "gate",
    ("gate_up_proj", 1): "up",
    ("down_proj", 0): "down",
}
"""(transformers' merged parameter, part) -> the projection of `BlockScaledExperts`."""


@dataclass(frozen=True)
class QuantTensor:
    """One quantised weight of the checkpoint.

    Attributes:
        name: the weight's checkpoint name (`layers.0.attn.wq_a.weight`).
        codes: float8_e4m3fn `[N, K]`, or packed e2m1 `[N, K / 2]`.
        scale: its scales (see `npu_ops.ops.quant.fp8_block_matmul` / `mxfp4_matmul`).
        block_size: FP8 `(bn, bk)`, or None for MXFP4.
    """

    name: str
    codes: torch.Tensor
    scale: torch.Tensor
    block_size: tuple[int, int] | None

    def dequantize(self) -> torch.Tensor:
        """float32 `[N, K]`."""
        if self.block_size is None:
            return dequantize_mxfp4(self.codes, self.scale)
        return dequantize_fp8_block(self.codes, self.scale, self.block_size)


def _read(files: TensorFiles, name: str, fmt: Fp8CheckpointConfig) -> QuantTensor | None:
    """`name` with its scales, or None for a tensor stored unquantised.

    Raises:
        ValueError: an FP8/FP4 weight without scales, or codes of another dtype next to scales.
    """
    base = name.removesuffix(".weight")
    scale_name = next((f"{base}.{s}" for s in SCALE_SUFFIXES if f"{base}.{s}" in files), None)
    if scale_name is None:
        codes = files.get(name)
        if codes.dtype == FP8_CODE_DTYPE or codes.dtype == torch.float4_e2m1fn_x2:
            raise ValueError(
                f"{files.directory}: tensor {name} is {codes.dtype} but has no "
                f"{base}.weight_scale_inv / {base}.scale"
            )
        return None
    codes, scale = files.get(name), files.get(scale_name)
    if codes.dtype == FP8_CODE_DTYPE:
        block: tuple[int, int] | None = fmt.block_size
    elif codes.dtype in FP4_CODE_DTYPES:
        block = None
    else:
        raise ValueError(
            f"{files.directory}: tensor {name} has scales ({scale_name}) but is {codes.dtype}; "
            f"expected {FP8_CODE_DTYPE} (FP8) or packed e2m1 (MXFP4)"
        )
    tensor = QuantTensor(name, codes, scale, block)
    try:
        tensor.dequantize()  # checks the dtypes and the scale grid
    except ValueError as exc:
        raise ValueError(f"{files.directory}: tensor {name}: {exc}") from exc
    return tensor


def quantised_weights(ref: CheckpointRef, fmt: Fp8CheckpointConfig) -> list[QuantTensor]:
    """Every quantised weight of the checkpoint (see `_read`), in the files' order."""
    files = TensorFiles(ref.directory)
    found = (_read(files, n, fmt) for n in files.names() if n.endswith(".weight"))
    return [t for t in found if t is not None]


def f4_key_mapping(ref: CheckpointRef) -> dict[str, str]:
    """transformers `key_mapping` that keeps F4-stored tensors out of its skeleton load.

    transformers 5.25 cannot materialise a safetensors `F4` tensor (its slice reports the shape
    in 4-bit values, the data holds bytes: "shape '[N, K]' is invalid for input of size N*K/2"),
    so MXFP4 codes stored as `float4_e2m1fn_x2` are renamed to `UNLOADED_KEY` and
    `apply_fp8_checkpoint` reads them itself. One anchored pattern per name shape (every run of
    digits generalised), or the exact names where such a pattern would catch another tensor.

    Returns:
        `{pattern: UNLOADED_KEY}`, empty when no tensor is stored as F4.
    """
    names: list[str] = []
    f4: set[str] = set()
    for shard in sorted(ref.directory.glob("*.safetensors")):
        with safe_open(str(shard), framework="pt") as f:
            for name in f.keys():
                names.append(name)
                if f.get_slice(name).get_dtype() == F4_DTYPE:
                    f4.add(name)
    groups: dict[str, list[str]] = {}
    for name in sorted(f4):
        groups.setdefault(re.sub(r"\d+", r"\\d+", re.escape(name)), []).append(name)
    patterns: list[str] = []
    for general, members in groups.items():
        if any(re.fullmatch(general, n) and n not in f4 for n in names):
            patterns.extend(re.escape(n) for n in members)
        else:
            patterns.append(general)
    return {f"^{p}$": UNLOADED_KEY for p in patterns}


def _reads_float_matrix(model: nn.Module, module_name: str, module: nn.Module) -> bool:
    """Whether the engine reads this linear's weight as a float matrix (see the module doc)."""
    parent, _, child = module_name.rpartition(".")
    if child in MLA_FLOAT_PROJECTIONS and type(model.get_submodule(parent)).__name__ in (
        MLA_ATTENTIONS
    ):
        return True
    return type(module).forward is not nn.Linear.forward


def _stack_experts(
    module_name: str, module: nn.Module, parts: dict[tuple[str, int], QuantTensor]
) -> BlockScaledExperts:
    """One `BlockScaledExperts` from the per-expert tensors transformers merged into `module`."""
    act_fn = getattr(module, "act_fn", None)
    num_experts = getattr(module, "num_experts", None)
    if not isinstance(act_fn, nn.Module) or not isinstance(num_experts, int):
        raise ValueError(f"{module_name} ({type(module).__name__}) is not a gated experts module")
    stacks: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
    blocks = set()
    for proj in PROJECTIONS:
        tensors = []
        for e in range(num_experts):
            tensor = parts.get((proj, e))
            if tensor is None:
                raise ValueError(
                    f"{module_name}: expert {e}'s {proj} projection is not quantised while others "
                    "are; quantise all routed experts of a layer alike"
                )
            tensors.append(tensor)
            blocks.add(tensor.block_size)
        stacks[proj] = (
            torch.stack([t.codes for t in tensors]),
            torch.stack([t.scale for t in tensors]),
        )
    if len(blocks) != 1:
        raise ValueError(f"{module_name}: routed experts mix FP8 and MXFP4 weights")
    down = getattr(module, "down_proj", None)
    assert isinstance(down, torch.Tensor), f"{module_name} has no 3-D down_proj"
    hidden = int(down.shape[1])
    return BlockScaledExperts(stacks, blocks.pop(), hidden, act_fn, getattr(module, "limit", None))


def to_w8a8(module: nn.Module) -> tuple[nn.Module, float]:
    """An Atlas A2/A3 stand-in for `module`: W8A8_DYNAMIC from its dequantised weights, and the
    largest relative rounding error (max |w8a8 - dequantised| / max |dequantised|)."""

    def requant(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, float]:
        q, scale = quantize_weight(w)
        err = float((q.float() * scale[:, None] - w).abs().max() / w.abs().max().clamp(min=1e-30))
        return q, scale, err

    if isinstance(module, BlockScaledLinear):
        linear = QuantTensor(
            "", module.weight.get(), module.weight_scale_inv.get(), module.block_size
        )
        q, scale, err = requant(linear.dequantize())
        return W8A8DynamicLinear(q, scale, module.bias), err
    assert isinstance(module, BlockScaledExperts), type(module).__name__
    stacks: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
    worst = 0.0
    for proj in PROJECTIONS:
        codes, scales = module.codes[proj], module.scales[proj]
        assert isinstance(codes, Packed) and isinstance(scales, Packed)
        qs, ss = [], []
        for e in range(module.num_experts):
            expert = QuantTensor("", codes.get()[e], scales.get()[e], module.block_size)
            q, scale, err = requant(expert.dequantize())
            qs.append(q)
            ss.append(scale)
            worst = max(worst, err)
        stacks[proj] = (torch.stack(qs), torch.stack(ss))
    gate_up = torch.cat([stacks["gate"][0], stacks["up"][0]], dim=1)
    gate_up_scale = torch.cat([stacks["gate"][1], stacks["up"][1]], dim=1)
    experts = W8A8DynamicExperts(
        gate_up, gate_up_scale, *stacks["down"], act_fn=module.act_fn, limit=module.limit
    )
    return experts, worst


def apply_fp8_checkpoint(
    model: nn.Module, ref: CheckpointRef, fmt: Fp8CheckpointConfig, w8a8: bool = False
) -> dict[str, int]:
    """Replace the layers whose checkpoint weights are FP8 / MXFP4 (see the module doc).

    Args:
        model: the float skeleton just loaded from `ref` by transformers without its quantizer.
        ref: the checkpoint.
        fmt: its `quantization_config`.
        w8a8: convert every replaced layer to W8A8_DYNAMIC (Atlas A2/A3).

    Returns:
        How many layers went which way: `linear`, `experts` (one per MoE layer), `float`
        (dequantised at load), `w8a8` (converted).

    Raises:
        ValueError: (naming the file or tensor) a quantised tensor the model has no place for,
            an FP8 weight without scales, a wrong scale grid, experts quantised partly or mixing
            formats.
    """
    names = CheckpointNames(model)
    counts = {"linear": 0, "experts": 0, "float": 0, "w8a8": 0}
    experts: dict[str, dict[tuple[str, int], QuantTensor]] = {}
    for tensor in quantised_weights(ref, fmt):
        target = names.resolve(tensor.name)
        if target is None:
            if unloaded_mtp(tensor.name, model):
                continue
            raise ValueError(
                f"{ref.directory}: quantised tensor {tensor.name} has no place in the model"
            )
        module_name, _, param = target.key.rpartition(".")
        module = model.get_submodule(module_name)
        if target.part is not None:
            expert = EXPERT_INDEX.search(tensor.name)
            proj = _EXPERT_PROJECTION.get((param, target.part))
            if expert is None or proj is None:
                raise ValueError(
                    f"{ref.directory}: {tensor.name} is merged into {target.key}, not an expert"
                )
            experts.setdefault(module_name, {})[(proj, int(expert.group(1)))] = tensor
            continue
        if not isinstance(module, nn.Linear) or param != "weight":
            raise ValueError(
                f"{ref.directory}: {tensor.name} is a {type(module).__name__}, not a linear layer"
            )
        if _reads_float_matrix(model, module_name, module):
            with torch.no_grad():
                module.weight.copy_(tensor.dequantize().view_as(module.weight))
            counts["float"] += 1
            continue
        bias = None if module.bias is None else module.bias.detach()
        new = BlockScaledLinear(
            tensor.codes, tensor.scale, tensor.block_size, module.in_features, bias
        )
        model.set_submodule(module_name, new.to(module.weight.device))
        counts["linear"] += 1
    for module_name, parts in experts.items():
        module = model.get_submodule(module_name)
        device = next(module.parameters()).device
        model.set_submodule(module_name, _stack_experts(module_name, module, parts).to(device))
        counts["experts"] += 1
    if w8a8:
        counts["w8a8"] = convert_to_w8a8(model).modules
    logger.info("%s: FP8/MXFP4 checkpoint: %s", ref.directory, counts)
    return counts


@dataclass(frozen=True)
class W8A8Conversion:
    """What `convert_to_w8a8` did.

    Attributes:
        modules: FP8/MXFP4 modules converted.
        max_weight_error: the largest relative rounding error of a converted weight
            (max |w8a8 - dequantised| / max |dequantised|, per weight; `to_w8a8`), 0 for none.
    """

    modules: int
    max_weight_error: float


def convert_to_w8a8(model: nn.Module) -> W8A8Conversion:
    """Replace every `BlockScaledLinear` / `BlockScaledExperts` of `model` by its W8A8_DYNAMIC
    stand-in (`to_w8a8`, the Atlas A2/A3 path), logging the largest weight rounding error."""
    modules, worst = 0, 0.0
    for name, module in list(model.named_modules()):
        if isinstance(module, BlockScaledLinear | BlockScaledExperts):
            new, err = to_w8a8(module)
            model.set_submodule(name, new)
            worst = max(worst, err)
            modules += 1
    logger.info(
        "FP8/MXFP4 -> W8A8_DYNAMIC at load: %d modules, largest relative weight error %.4f",
        modules,
        worst,
    )
    return W8A8Conversion(modules, worst)
