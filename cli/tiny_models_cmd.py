"""`ascend-router make-tiny-models`: tiny random checkpoints with their families' real tokenizers.

Run before `serve run configs/families.yaml`, which serves them next to SmolLM2::

    ascend-router make-tiny-models        # .tiny_models/{qwen2,deepseek_v3,deepseek_v4}
    ascend-router make-tiny-models --out DIR --families qwen2,qwen3,deepseek_v3
    ascend-router make-tiny-models --families deepseek_v3_fp8,deepseek_v4_fp8
    ascend-router make-tiny-models --families qwen2_5_vl,qwen2_audio

Each family goes to `DIR/<family>` (replaced if present): safetensors shards with their index,
`config.json`, `generation_config.json` (`fixtures.tiny_checkpoints`), and `tokenizer.json` /
`tokenizer_config.json` / `chat_template.jinja` (`fixtures.family_tokenizers`). The weights
are random, so the answers are gibberish; the tokenizer, chat template, tool-call format and
model architecture are the real ones. Nothing is downloaded.

`deepseek_v3_fp8` and `deepseek_v4_fp8` are the same models in their official FP8 layouts
(`fixtures.fp8_checkpoints.make_fp8_checkpoint`: block-scaled e4m3 weights in 16 x 16 blocks, V4's
routed experts MXFP4), with `quantization_config` in `config.json`, so `serve run` loads them as
it loads DeepSeek's FP8 releases (docs/quantization.md).

`qwen2_5_vl` (Qwen2.5-VL: vision tower, M-RoPE language model) and `qwen2_audio` (Qwen2-Audio:
Whisper-style audio encoder) are written by `fixtures.tiny_multimodal.
make_tiny_multimodal_checkpoint`, with their `preprocessor_config.json` (the Qwen2-VL image
processor; the Whisper feature extractor, 16 kHz, 128 mel bins) beside the weights, and their
tokenizers carry the chat templates that place the image and audio placeholders.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

DEFAULT_OUT = Path(".tiny_models")
DEFAULT_FAMILIES = ("qwen2", "deepseek_v3", "deepseek_v4")
FAMILIES = (
    "deepseek_v3",
    "deepseek_v32",
    "deepseek_v4",
    "qwen2",
    "qwen2_5_vl",
    "qwen2_audio",
    "qwen3",
    "qwen3_moe",
)
"""The families with a shipped tokenizer (`fixtures.family_tokenizers.FAMILY_TOKENIZERS`, kept
equal by tests/cli/test_cli_startup.py), spelled here so that the CLI starts without importing
transformers."""
FP8_SUFFIX = "_fp8"
FP8_FAMILIES = ("deepseek_v3", "deepseek_v4")
"""Families also written in their FP8 layout as `<family>_fp8` (`fixtures.fp8_checkpoints.
FP8_FAMILIES`, kept equal by tests/cli/test_tiny_fp8_models.py)."""
MULTIMODAL_FAMILIES = ("qwen2_5_vl", "qwen2_audio")
"""Families with an image or audio encoder (`fixtures.tiny_multimodal.MULTIMODAL_FAMILIES`, kept
equal by tests/cli/test_tiny_multimodal_models.py)."""
CHOICES = (*FAMILIES, *(f + FP8_SUFFIX for f in FP8_FAMILIES))
"""Every family name `--families` takes."""


def make_tiny_models(out: Path, families: list[str], seed: int = 0) -> list[Path]:
    """Write one tiny checkpoint with its real tokenizer per family under `out`.

    Returns:
        The checkpoint directories, `out / family` each.

    Raises:
        ValueError: a family has no shipped tokenizer (the message lists those that do).
    """
    from fixtures.family_tokenizers import save_family_tokenizer
    from fixtures.fp8_checkpoints import make_fp8_checkpoint
    from fixtures.tiny_checkpoints import make_tiny_checkpoint
    from fixtures.tiny_multimodal import make_tiny_multimodal_checkpoint

    known = list(CHOICES)
    unknown = [f for f in families if f not in known]
    if unknown:
        raise ValueError(f"no tiny model with a tokenizer for {unknown}; choose from {known}")
    paths = []
    for family in families:
        final = out / family
        staging = out / f".{family}.partial"  # never leave a half-written checkpoint at `final`
        shutil.rmtree(staging, ignore_errors=True)
        base = family.removesuffix(FP8_SUFFIX)
        if base != family:
            make_fp8_checkpoint(base, staging, real_vocab=True, seed=seed)
        elif family in MULTIMODAL_FAMILIES:
            make_tiny_multimodal_checkpoint(family, staging, seed=seed)
        else:
            make_tiny_checkpoint(family, staging, real_vocab=True, seed=seed)
        save_family_tokenizer(base, staging)
        shutil.rmtree(final, ignore_errors=True)
        staging.rename(final)
        paths.append(final)
    return paths


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the `make-tiny-models` sub-command."""
    p = subparsers.add_parser(
        "make-tiny-models",
        help="write tiny random checkpoints with real tokenizers (for configs/families.yaml)",
        description="Write tiny random checkpoints of the given families, each with the "
        "family's real tokenizer and tool-capable chat template, for configs/families.yaml.",
    )
    p.add_argument(
        "--out", type=Path, default=DEFAULT_OUT, help=f"output folder (default {DEFAULT_OUT})"
    )
    p.add_argument(
        "--families",
        default=",".join(DEFAULT_FAMILIES),
        help=f"comma-separated, from {', '.join(CHOICES)} (default {','.join(DEFAULT_FAMILIES)})",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the random weights (default 0)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Print one line per checkpoint written; exit 2 on an unknown family."""
    families = [f.strip() for f in args.families.split(",") if f.strip()]
    try:
        paths = make_tiny_models(args.out, families, args.seed)
    except ValueError as exc:
        print(f"ascend-router make-tiny-models: error: {exc}", file=sys.stderr)
        return 2
    for path in paths:
        size = sum(f.stat().st_size for f in path.iterdir() if f.is_file())
        print(f"{path}: {size / 2**20:.1f} MiB")
    return 0
