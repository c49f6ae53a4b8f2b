"""`config.json`'s `quantization_config`: which pre-quantised formats the engine loads.

Only `quant_method: fp8` is read from `config.json` (block-scaled FP8 as DeepSeek-V3, -V3.2 and
-V4 ship it, with DeepSeek-V4's MXFP4 routed experts); ModelSlim W8A8 checkpoints are described
by `quant_model_description.json` instead (`engine.quantization.description`). The fields and
their defaults are transformers' `FineGrainedFP8Config` (utils/quantization_config.py,
transformers 5.25): `weight_block_size` (default `[128, 128]`), `scale_fmt` (`float`: float32
`weight_scale_inv`, V3; `ue8m0`: one-byte power-of-two scales, V4), `expert_dtype` (`fp8`, or
`fp4` for MXFP4 routed experts; DeepSeek-V4 writes it at the top level of `config.json`, V4.1
inside `quantization_config`, as transformers' `DeepseekV4Config.__post_init__` notes),
`activation_scheme` (`dynamic`: activations are never quantised by a checkpoint field).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

SUPPORTED_QUANT_METHODS = ("fp8",)
"""`quantization_config.quant_method` values the engine loads."""


@dataclass(frozen=True)
class Fp8CheckpointConfig:
    """A block-scaled FP8 checkpoint's `quantization_config`.

    Attributes:
        block_size: `(block_n, block_k)`: output rows and input columns per scale.
        scale_fmt: `float` (float32 scales) or `ue8m0` (float8_e8m0fnu scales).
        expert_dtype: `fp8` (routed experts as the other linears) or `fp4` (MXFP4).
    """

    block_size: tuple[int, int]
    scale_fmt: str
    expert_dtype: str


def _field(qc: dict[str, Any], cfg: dict[str, Any], name: str, default: str) -> str:
    value = qc.get(name, cfg.get(name, default))
    return str(value).lower()


def checkpoint_quantization(cfg: dict[str, Any], path: Path) -> Fp8CheckpointConfig | None:
    """The FP8 format `config.json` declares, or None for an unquantised checkpoint.

    Args:
        cfg: `config.json` as parsed.
        path: the file (named in errors).

    Raises:
        ValueError: (naming the file and the value) a `quant_method` other than `fp8` (the
            message lists the supported ones), a `weight_block_size` that is not two positive
            integers, a `scale_fmt`, `expert_dtype`, `fmt` or `activation_scheme` the format
            does not have.
    """
    qc = cfg.get("quantization_config")
    if qc is None:
        return None
    if not isinstance(qc, dict):
        raise ValueError(f"{path}: quantization_config must be an object, got {qc!r}")
    method = qc.get("quant_method")
    if method not in SUPPORTED_QUANT_METHODS:
        raise ValueError(
            f"{path}: quantization_config.quant_method {method!r} is not supported; supported: "
            f"{', '.join(SUPPORTED_QUANT_METHODS)} (block-scaled FP8, with MXFP4 experts), and "
            "ModelSlim W8A8 through quant_model_description.json"
        )
    block = qc.get("weight_block_size", [128, 128])
    if not (
        isinstance(block, list | tuple)
        and len(block) == 2
        and all(isinstance(b, int) and b > 0 for b in block)
    ):
        raise ValueError(
            f"{path}: quantization_config.weight_block_size must be two positive integers, "
            f"got {block!r} (per-tensor FP8 is not supported)"
        )
    checks = {
        "fmt": ("e4m3",),
        "scale_fmt": ("float", "ue8m0"),
        "expert_dtype": ("fp8", "fp4"),
        "activation_scheme": ("dynamic",),
    }
    defaults = {"fmt": "e4m3", "scale_fmt": "float", "expert_dtype": "fp8"}
    values = {}
    for name, allowed in checks.items():
        value = _field(qc, cfg, name, defaults.get(name, "dynamic"))
        if value not in allowed:
            raise ValueError(
                f"{path}: quantization_config.{name} {value!r} is not supported; supported: "
                f"{', '.join(allowed)}"
            )
        values[name] = value
    return Fp8CheckpointConfig((block[0], block[1]), values["scale_fmt"], values["expert_dtype"])
