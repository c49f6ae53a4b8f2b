"""Load a checkpoint into its `transformers` model class, wired to paged attention.

Sources: a GGUF file (dequantised by transformers' GGUF loader, see "GGUF and interaction with
Transformers" in the transformers docs) or a Hugging Face checkpoint directory
(`config.json` plus safetensors shards).

A checkpoint that cannot be loaded is a one-line `ValueError` naming the file or tensor: a shard
listed in `model.safetensors.index.json` but missing, a `model_type` transformers does not know
or the engine does not serve (`engine.architectures`, checked before any weight loads),
`architectures` that contradict `model_type`, a tensor whose shape disagrees with `config.json`,
or a tensor the model needs and the checkpoint lacks (transformers would only warn and leave it
randomly initialised).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, cast

import torch
from huggingface_hub.errors import StrictDataclassError
from safetensors import SafetensorError, safe_open
from transformers import AutoConfig, AutoModelForCausalLM, GenerationConfig, PretrainedConfig
from transformers.models.auto.configuration_auto import CONFIG_MAPPING
from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

from engine.architectures import REFUSED_MODEL_TYPES, check_architecture
from engine.attention import ATTENTION_NAME
from engine.checkpoint_ref import SAFETENSORS_INDEX, CheckpointRef
from engine.fused_layers import use_fused_layers
from engine.json_file import read_json_object
from engine.multimodal.encoder_attention import ENCODER_ATTENTION_NAME
from engine.multimodal.families import FAMILIES
from engine.quantization import apply_quantization
from engine.quantization.fp8_config import Fp8CheckpointConfig, checkpoint_quantization
from engine.quantization.fp8_loader import apply_fp8_checkpoint, f4_key_mapping
from engine.quantization.int8_head import INT8_MAX_ROWS, Int8CopyOutputHead
from engine.quantization.weight_int4 import quantize_linears_int4
from engine.spec_decode.mtp_model import load_mtp
from engine.spec_decode.mtp_v4_weights import load_v4_mtp
from npu_ops.cpu_kernels import INT4_INT8_GEMM, INT8_INT8_GEMM, Kernel, load, unavailable
from npu_ops.platform import current_platform, is_ascend_950

logger = logging.getLogger(__name__)


def _one_line(exc: BaseException, limit: int = 300) -> str:
    """`exc`'s message on one line (at most `limit` characters)."""
    text = " ".join(line.strip() for line in str(exc).splitlines() if line.strip())
    text = text or type(exc).__name__
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _check_config_json(ref: CheckpointRef) -> None:
    """`model_type` is known to transformers and served by the engine, and `architectures` name
    its causal-LM class (a multimodal family's: its `ForConditionalGeneration` class)."""
    cfg = read_json_object(ref.config_file)
    model_type = cfg.get("model_type")
    # a named refusal (engine.architectures) says why, even for a type transformers lacks
    if not isinstance(model_type, str) or (
        model_type not in CONFIG_MAPPING and model_type not in REFUSED_MODEL_TYPES
    ):
        raise ValueError(
            f"{ref.config_file}: model_type {model_type!r} is not an architecture this "
            "transformers version knows; fix model_type or upgrade transformers"
        )
    expected = MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.get(model_type)
    if model_type in FAMILIES:
        expected = FAMILIES[model_type].model_class.__name__
    if expected is None and model_type not in REFUSED_MODEL_TYPES:
        raise ValueError(f"{ref.config_file}: model_type {model_type!r} has no causal-LM class")
    check_architecture(cfg, ref.config_file)
    checkpoint_quantization(cfg, ref.config_file)  # an unsupported quant_method fails here
    archs = cfg.get("architectures") or [expected]
    if expected not in archs:
        raise ValueError(
            f"{ref.config_file}: architectures {archs} do not match model_type {model_type!r} "
            f"(transformers class {expected}); fix one of them"
        )


def load_config(ref: CheckpointRef) -> PretrainedConfig:
    """The checkpoint's model config.

    Raises:
        ValueError: (one line, naming the file) `config.json` is not JSON, names an unknown
            `model_type` or one the engine does not serve (`engine.architectures`), or
            `architectures` that contradict it; or transformers rejects it.
    """
    if not ref.from_gguf:  # transformers wrote a converted GGUF's config.json itself
        _check_config_json(ref)
    try:
        config = AutoConfig.from_pretrained(ref.directory, **ref.kwargs())
    except (OSError, ValueError, KeyError, TypeError, StrictDataclassError) as exc:
        raise ValueError(f"{ref.config_file}: {_one_line(exc)}") from exc
    if ref.from_gguf:  # the GGUF's `general.architecture`, as transformers maps it
        check_architecture(config, ref.origin or ref.config_file)
    return config


def _check_shards(ref: CheckpointRef) -> None:
    """Every shard the safetensors index lists exists (before transformers opens any)."""
    index = ref.directory / SAFETENSORS_INDEX
    if ref.gguf_file is not None or not index.is_file():
        return
    shards = sorted(set(read_json_object(index).get("weight_map", {}).values()))
    missing = [s for s in shards if not (ref.directory / s).is_file()]
    if missing:
        raise ValueError(
            f"{ref.directory / missing[0]}: shard listed in {SAFETENSORS_INDEX} is missing "
            f"({len(missing)} of {len(shards)} shards missing)"
        )


def _unreadable_shard(ref: CheckpointRef) -> Path:
    """The first safetensors file of the checkpoint whose header cannot be read (else the dir)."""
    for path in sorted(ref.directory.glob("*.safetensors")):
        try:
            with safe_open(path, framework="pt"):
                pass
        except (SafetensorError, OSError):
            return path
    return ref.directory


def _check_loading_info(
    ref: CheckpointRef, info: dict[str, Any], model: torch.nn.Module | None = None
) -> None:
    """Every model tensor was in the checkpoint with the shape `config.json` implies.

    With `model` (an FP8 checkpoint's, its quantised layers replaced), a mismatch of a tensor
    the model no longer has is the quantised one's (MXFP4 packs two values per byte) and passes,
    as does a missing one (F4-stored codes, which transformers does not read: `f4_key_mapping`).
    """
    mismatched = sorted(info.get("mismatched_keys") or [], key=lambda m: m[0])
    if model is not None:
        kept = {name for name, _ in model.named_parameters()}
        mismatched = [m for m in mismatched if m[0] in kept]
    if mismatched:
        name, ckpt_shape, model_shape = mismatched[0]
        raise ValueError(
            f"{ref.weight_file(name)}: tensor {name} has shape {list(ckpt_shape)} but "
            f"{ref.config_file.name} implies {list(model_shape)} ({len(mismatched)} mismatched "
            "in all); the config does not describe these weights"
        )
    missing = sorted(info.get("missing_keys") or [])
    if model is not None:
        missing = [m for m in missing if m in kept]
    if missing:
        raise ValueError(
            f"{ref.directory}: tensor {missing[0]} is missing from the checkpoint "
            f"({len(missing)} missing in all)"
        )


def load_model(
    ref: CheckpointRef,
    dtype: torch.dtype,
    device: torch.device,
    weight_quantization: str = "none",
    output_quantization: str = "none",
    batch_invariant: bool = True,
    fused_layers: bool = True,
    activation_quantization: str = "none",
    mtp: bool = False,
) -> torch.nn.Module:
    """Instantiate the HF causal-LM class for the checkpoint with paged attention.

    A multimodal checkpoint (`engine.multimodal.families.FAMILIES`) loads into its family's
    class: its language model (`text_config`) gets paged attention, its vision or audio encoder
    the registry's encoder attention (`engine.multimodal.encoder_attention`); `use_fused_layers`
    swaps the encoders' norms too.

    With `weight_quantization="int4"` the weights are loaded in float32, the linears quantised
    (`engine.quantization.weight_int4`), and the rest cast to `dtype`. With
    `output_quantization="int8"` on CPU the output projection gets an int8 copy for small steps
    (`engine.quantization.int8_head`). `batch_invariant` and `activation_quantization` are
    `EngineConfig`'s (int8 activations for the int4 linears where `int4_int8_gemm` runs here).
    `fused_layers` swaps the HF norm, MLP and attention modules for ours
    (`engine.fused_layers`); tensor-parallel ranks pass False and swap after sharding. With
    `mtp` the checkpoint's multi-token-prediction layer is loaded too, as `model.mtp`
    (`engine.spec_decode.mtp_model.load_mtp`; DeepSeek-V4's `mtp.0.*`:
    `engine.spec_decode.mtp_v4_weights.load_v4_mtp`), and gets the fused layers with the model.

    Returns:
        The model in eval mode on `device`, with `config._attn_implementation` set to the
        paged-attention function registered in `engine.attention`.

    Raises:
        ValueError: one line naming the file or tensor: a missing shard, a tensor missing or of
            the wrong shape, or a file transformers cannot read; with `mtp`, a checkpoint
            without an MTP layer.
    """
    _check_shards(ref)
    exact_first = weight_quantization == "int4" or output_quantization == "int8"
    cfg = None if ref.from_gguf else read_json_object(ref.config_file)
    fp8 = None if cfg is None else checkpoint_quantization(cfg, ref.config_file)
    kwargs: dict[str, Any] = dict(ref.kwargs())
    if fp8 is not None:
        kwargs["config"] = _fp8_skeleton_config(ref, fp8, mtp)
        kwargs["key_mapping"] = f4_key_mapping(ref) or None
    family = None if cfg is None else FAMILIES.get(str(cfg.get("model_type")))
    model_class: Any = AutoModelForCausalLM if family is None else family.model_class
    attention: str | dict[str, str] = ATTENTION_NAME
    if family is not None:
        attention = {
            "": ATTENTION_NAME,
            "text_config": ATTENTION_NAME,
            family.encoder_config: ENCODER_ATTENTION_NAME,
        }
    try:
        # Mismatched shapes are collected (not raised as a multi-line report) and reported by
        # `_check_loading_info`, which never lets a re-initialised tensor through.
        loaded = model_class.from_pretrained(
            ref.directory,
            dtype=torch.float32 if exact_first else dtype,
            attn_implementation=attention,
            ignore_mismatched_sizes=True,
            output_loading_info=True,
            **kwargs,
        )
    except SafetensorError as exc:
        raise ValueError(f"{_unreadable_shard(ref)}: cannot read: {_one_line(exc)}") from exc
    except (OSError, RuntimeError, ValueError, KeyError) as exc:
        raise ValueError(f"{ref.directory}: cannot load weights: {_one_line(exc)}") from exc
    model, info = cast(tuple[torch.nn.Module, dict[str, Any]], loaded)
    if fp8 is not None:
        # codes + scales, not bf16 copies; Atlas A2/A3 (no FP8 matmul) convert them to W8A8
        a2_a3 = current_platform().kind.value == "npu" and not is_ascend_950()
        apply_fp8_checkpoint(model, ref, fp8, w8a8=a2_a3)
    _check_loading_info(ref, info, model if fp8 is not None else None)
    if mtp:  # DeepSeek-V4's MTP layer is ours (transformers does not build it)
        v4 = model.config.model_type == "deepseek_v4"
        model.mtp = load_v4_mtp(model, ref.directory) if v4 else load_mtp(model)
    apply_quantization(model, ref)  # W8A8 linears when quant_model_description.json says so
    if fused_layers:
        use_fused_layers(model)  # before int4: merged projections are quantised as one layer
    if weight_quantization == "int4":
        int8 = activation_quantization == "int8" and _cpu_kernel(device, INT4_INT8_GEMM)
        replaced = quantize_linears_int4(
            model, device, batch_invariant=batch_invariant, int8_activations=int8
        )
        logger.info(
            "int4 weight-only: %d linear layers quantised, decode activations %s",
            replaced,
            "int8 (int4_int8_gemm)" if int8 else "float",
        )
    if output_quantization == "int8" and device.type == "cpu":
        vnni = activation_quantization == "int8" and _cpu_kernel(device, INT8_INT8_GEMM)
        max_rows = None if batch_invariant or vnni else INT8_MAX_ROWS
        head = Int8CopyOutputHead(model.get_output_embeddings(), max_rows, int8_activations=vnni)
        model.set_output_embeddings(head)
        logger.info(
            "output projection: int8 copy for steps of %s rows, activations %s",
            max_rows or "all",
            "int8 (int8_int8_gemm)" if vnni else "float",
        )
    if exact_first:
        model.to(dtype=dtype)  # float32 so far; the int4/int8 codes are not floating point
    model.to(device).eval()
    n_bytes = weight_bytes(model)
    logger.info("loaded %s: %.1f MiB of weights, %s", type(model).__name__, n_bytes / 2**20, dtype)
    return model


def _fp8_skeleton_config(ref: CheckpointRef, fp8: Fp8CheckpointConfig, mtp: bool) -> Any:
    """The model config without `quantization_config`, so that transformers builds float layers
    and does not dequantise the FP8 weights itself (`engine.quantization.fp8_loader`).

    Raises:
        ValueError: `mtp` (the MTP layer of an FP8 checkpoint is not loaded quantised), or a
            tensor-parallel process group (the FP8 modules are not sharded).
    """
    if mtp:
        raise ValueError(
            f"{ref.config_file}: speculative MTP is not supported for FP8 checkpoints "
            f"(quant_method fp8, blocks {list(fp8.block_size)}); serve without `speculative`"
        )
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        raise ValueError(
            f"{ref.config_file}: FP8 checkpoints run with tensor_parallel_size 1 only; the FP8 "
            "layers are not sharded"
        )
    config = load_config(ref)
    del config.quantization_config
    return config


def _cpu_kernel(device: torch.device, kernel: Kernel) -> bool:
    """Load `kernel` for a CPU model; False (logged) where it cannot run."""
    reason = "the model is not on the CPU" if device.type != "cpu" else unavailable(kernel)
    if reason is not None:
        logger.warning(
            "activation_quantization int8 ignored for %s: %s; torch's kernel runs",
            kernel.op,
            reason,
        )
        return False
    load(kernel)
    return True


def weight_bytes(model: torch.nn.Module) -> int:
    """Bytes of the model's parameters and buffers (quantised layers keep codes as buffers)."""
    tensors = [*model.parameters(), *model.buffers()]
    return sum(t.numel() * t.element_size() for t in tensors)


def eos_token_ids(ref: CheckpointRef, config: PretrainedConfig) -> tuple[int, ...]:
    """End-of-sequence ids from the generation config, falling back to the model config."""
    try:
        eos = GenerationConfig.from_pretrained(ref.directory, **ref.kwargs()).eos_token_id
    except OSError:
        eos = None
    if eos is None:
        eos = getattr(config, "eos_token_id", None)
    if eos is None:
        return ()
    return tuple(eos) if isinstance(eos, (list, tuple)) else (int(eos),)
