"""A small W8A8 quantiser writing ModelSlim's layout, so the quantised path is testable end to end.

It is not ModelSlim: no outlier suppression, no accuracy tuning, calibration on whatever token
sequences it is given (seeded random tokens by default). What it writes is the layout ModelSlim
writes for dense models (msModelSlim docs/en/feature_guide/quick_quantization_v1/
quantization_result.md): every linear of the decoder layers quantised, everything else `FLOAT`,

- `w8a8_dynamic`: `weight` int8 `[out, in]` (symmetric per output channel), `weight_scale` and
  `weight_offset` (zeros) float32 `[out, 1]`, the float `bias` kept;
- `w8a8`: the same weight, `input_scale` / `input_offset` `[1]` (asymmetric per tensor, from the
  calibration range), `deq_scale = input_scale * weight_scale` `[out]` (float32; the int64 bit
  pattern for float16 models), `quant_bias = round(bias / deq_scale) - input_offset *
  sum(weight, in)` int32; the float `bias` is written too (transformers expects it) but runs
  folded into `quant_bias`;

plus `quant_model_description.json`, the tensors in `quant_model_weights.safetensors` with a
`model.safetensors.index.json` (so `from_pretrained` finds them), and the source directory's
other files (config, generation config, tokenizer) copied.

DeepSeek-V4 (`w8a8_dynamic` only) gets the layout of the Ascend V4-Flash W8A8 checkpoints
instead, in DeepSeek's tensor names with per-expert weights and the MTP layer's tensors kept
(`engine.quantization.deepseek_v4`); it needs no calibration and no model, only the tensors.
"""

from __future__ import annotations

import json
import logging
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import torch
from safetensors.torch import save_file
from torch import nn
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel

from engine.checkpoint_ref import CheckpointRef
from engine.model_loader import load_config
from engine.quantization.deepseek_v4 import quantize_v4
from engine.quantization.description import FLOAT, QUANT_DESCRIPTION_FILE, W8A8, W8A8_DYNAMIC
from engine.quantization.int8 import (
    activation_params,
    deq_scale_to_int64,
    dynamic_tensors,
    quantize_weight,
)
from engine.quantization.tensor_files import SAFETENSORS_INDEX, TensorFiles

logger = logging.getLogger(__name__)

QuantMode = Literal["w8a8", "w8a8_dynamic"]
MODES: dict[str, str] = {"w8a8": W8A8, "w8a8_dynamic": W8A8_DYNAMIC}
"""CLI mode -> description type."""

DENSE_FAMILIES = ("llama", "qwen2", "qwen3", "phi3")
"""`model_type`s whose decoder layers are plain `nn.Linear`s (attention + MLP)."""

DEEPSEEK_V4 = "deepseek_v4"
"""Quantised in ModelSlim's DeepSeek-V4 layout, `w8a8_dynamic` only."""

CALIB_SAMPLES = 8
CALIB_LEN = 64
"""Default calibration: sequences and tokens per sequence."""

WEIGHTS_FILE = "quant_model_weights.safetensors"
_SKIPPED_FILES = (SAFETENSORS_INDEX, QUANT_DESCRIPTION_FILE)
_HALF = (torch.float16, torch.bfloat16)


@dataclass(frozen=True)
class QuantizeResult:
    """What `quantize_checkpoint` wrote.

    Attributes:
        out_dir: the quantised checkpoint.
        num_layers: linear layers quantised.
        bytes_before: tensor bytes of the source model.
        bytes_after: tensor bytes written.
    """

    out_dir: Path
    num_layers: int
    bytes_before: int
    bytes_after: int


def random_calibration(
    vocab_size: int, num_samples: int = CALIB_SAMPLES, length: int = CALIB_LEN, seed: int = 0
) -> list[list[int]]:
    """Seeded uniformly random token sequences (a stand-in for a calibration data set)."""
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab_size, (num_samples, length), generator=g).tolist()


def _decoder_linears(model: PreTrainedModel) -> dict[str, nn.Linear]:
    """Name -> module of every `nn.Linear` inside the decoder layers (the LM head excluded)."""
    layers = model.get_decoder().layers
    prefix = next(name for name, m in model.named_modules() if m is layers)
    return {
        name: m
        for name, m in model.named_modules()
        if isinstance(m, nn.Linear) and name.startswith(prefix + ".")
    }


@torch.inference_mode()
def _activation_ranges(
    model: nn.Module, linears: dict[str, nn.Linear], samples: list[list[int]]
) -> dict[str, tuple[float, float]]:
    """Min and max of every linear's input over the calibration samples."""
    ranges: dict[str, tuple[float, float]] = {}

    def hook(name: str) -> Callable[[nn.Module, tuple[torch.Tensor, ...]], None]:
        def record(_: nn.Module, args: tuple[torch.Tensor, ...]) -> None:
            lo, hi = float(args[0].min()), float(args[0].max())
            old = ranges.get(name, (lo, hi))
            ranges[name] = (min(lo, old[0]), max(hi, old[1]))

        return record

    handles = [m.register_forward_pre_hook(hook(n)) for n, m in linears.items()]
    try:
        for ids in samples:
            model(torch.tensor([ids]))
    finally:
        for h in handles:
            h.remove()
    return ranges


def _static_tensors(
    name: str, linear: nn.Linear, lo_hi: tuple[float, float], act_dtype: torch.dtype
) -> dict[str, torch.Tensor]:
    q, w_scale = quantize_weight(linear.weight)
    scale, offset = activation_params(*lo_hi)
    input_scale = torch.tensor([scale], dtype=act_dtype)
    input_offset = torch.tensor([offset], dtype=act_dtype)
    deq = input_scale.float() * w_scale  # from the stored (rounded) input scale
    folded = torch.zeros_like(deq, dtype=torch.float64)
    if linear.bias is not None:
        folded = torch.round(linear.bias.double() / deq.double())
    quant_bias = folded - input_offset.double() * q.double().sum(dim=1)
    assert quant_bias.abs().max() < 2**31, f"{name}: quant_bias overflows int32"
    return {
        f"{name}.weight": q,
        f"{name}.input_scale": input_scale,
        f"{name}.input_offset": input_offset,
        f"{name}.deq_scale": deq_scale_to_int64(deq) if act_dtype == torch.float16 else deq,
        f"{name}.quant_bias": quant_bias.to(torch.int32),
    }


def quantize_checkpoint(
    src: str | Path,
    dst: str | Path,
    mode: QuantMode,
    calibration: list[list[int]] | None = None,
) -> QuantizeResult:
    """Quantise the checkpoint at `src` to W8A8 in ModelSlim's layout at `dst`.

    Args:
        src: a float checkpoint directory or `.gguf` file of a dense family, or a DeepSeek-V4
            checkpoint directory.
        dst: output directory; must not exist or be empty.
        mode: `w8a8` (static per-tensor activations, calibrated) or `w8a8_dynamic` (the only
            one for DeepSeek-V4).
        calibration: token sequences for the static activation ranges (`w8a8` only);
            default `random_calibration(vocab_size)`.

    Raises:
        ValueError: unknown mode, a family other than `DENSE_FAMILIES` and DeepSeek-V4 (or V4
            with `w8a8`, or as GGUF, or with merged experts), a non-empty `dst`, or a checkpoint
            that cannot be loaded.
    """
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; choose one of {', '.join(MODES)}")
    out = Path(dst)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ValueError(f"output directory {str(out)!r} is not empty")
    ref = CheckpointRef.from_path(src)
    config = load_config(ref)
    if config.model_type == DEEPSEEK_V4:
        return _quantize_v4(ref, out, mode)
    if config.model_type not in DENSE_FAMILIES:
        raise ValueError(
            f"{ref.config_file}: model_type {config.model_type!r} is not a dense family this "
            f"quantiser handles ({', '.join(DENSE_FAMILIES)})"
        )
    model: PreTrainedModel = AutoModelForCausalLM.from_pretrained(
        ref.directory, dtype="auto", **ref.kwargs()
    )
    model.eval()
    qtype = MODES[mode]
    linears = _decoder_linears(model)
    ranges: dict[str, tuple[float, float]] = {}
    if qtype == W8A8:
        samples = calibration or random_calibration(int(config.vocab_size))
        ranges = _activation_ranges(model, linears, samples)
    weight_dtype = next(model.parameters()).dtype
    act_dtype = weight_dtype if weight_dtype in _HALF else torch.float32
    tensors = {k: v.contiguous() for k, v in model.state_dict().items()}
    if getattr(config, "tie_word_embeddings", False):
        tensors.pop("lm_head.weight", None)  # tied: transformers re-ties it on load
    bytes_before = sum(t.numel() * t.element_size() for t in tensors.values())
    types = dict.fromkeys(tensors, FLOAT)
    for name, linear in linears.items():
        with torch.no_grad():
            new = (
                _static_tensors(name, linear, ranges[name], act_dtype)
                if qtype == W8A8
                else dynamic_tensors(name, linear.weight)
            )
        tensors.update(new)
        types.update(dict.fromkeys(new, qtype))
        if f"{name}.bias" in types:
            types[f"{name}.bias"] = qtype
    _write(ref, out, tensors, {"model_quant_type": qtype, **types}, model)
    bytes_after = sum(t.numel() * t.element_size() for t in tensors.values())
    logger.info("%s: %d linear layers quantised (%s)", out, len(linears), qtype)
    return QuantizeResult(out, len(linears), bytes_before, bytes_after)


def _quantize_v4(ref: CheckpointRef, out: Path, mode: QuantMode) -> QuantizeResult:
    """DeepSeek-V4 in its ModelSlim layout (`engine.quantization.deepseek_v4`)."""
    if mode != "w8a8_dynamic" or ref.gguf_file is not None:
        raise ValueError(
            f"{ref.config_file}: DeepSeek-V4 is quantised from a checkpoint directory with "
            "--mode w8a8_dynamic, the layout Ascend serves it in"
        )
    v4 = quantize_v4(TensorFiles(ref.directory))
    _write(ref, out, v4.tensors, {"model_quant_type": W8A8_DYNAMIC, **v4.types}, None)
    bytes_after = sum(t.numel() * t.element_size() for t in v4.tensors.values())
    logger.info("%s: %d linear layers quantised (%s)", out, v4.num_layers, W8A8_DYNAMIC)
    return QuantizeResult(out, v4.num_layers, v4.source_bytes, bytes_after)


def _write(
    ref: CheckpointRef,
    out: Path,
    tensors: dict[str, torch.Tensor],
    description: dict[str, str],
    model: PreTrainedModel | None,
) -> None:
    """Weights, index, description and the source's other files into `out`."""
    out.mkdir(parents=True, exist_ok=True)
    if ref.gguf_file is None:
        for f in ref.directory.iterdir():
            if (
                f.is_file()
                and f.suffix not in (".safetensors", ".bin")
                and (f.name not in _SKIPPED_FILES)
            ):
                shutil.copy2(f, out / f.name)
    else:  # a GGUF file carries config and tokenizer inside
        assert model is not None, "a GGUF source is written from its loaded model"
        model.config.save_pretrained(out)
        if model.generation_config is not None:
            model.generation_config.save_pretrained(out)
        AutoTokenizer.from_pretrained(ref.directory, **ref.kwargs()).save_pretrained(out)
    save_file(tensors, out / WEIGHTS_FILE, metadata={"format": "pt"})
    total = sum(t.numel() * t.element_size() for t in tensors.values())
    index = {"metadata": {"total_size": total}, "weight_map": dict.fromkeys(tensors, WEIGHTS_FILE)}
    (out / SAFETENSORS_INDEX).write_text(json.dumps(index, indent=2, sort_keys=True) + "\n")
    (out / QUANT_DESCRIPTION_FILE).write_text(json.dumps(description, indent=2) + "\n")
