"""`ascend-router quantize SRC DST --mode w8a8|w8a8_dynamic`: ModelSlim's W8A8 layout.

    ascend-router quantize .tiny_models/qwen2 /tmp/qwen2-w8a8 --mode w8a8_dynamic
    ascend-router quantize CKPT_DIR OUT --mode w8a8 --calib-samples 16 --calib-len 128
    ascend-router quantize .tiny_models/deepseek_v4 /tmp/v4-w8a8 --mode w8a8_dynamic

The output loads like any checkpoint (`LLMEngine(OUT, ...)`, `source.path: OUT`); the engine
reads `quant_model_description.json` and runs the quantised linears as W8A8. Static `w8a8`
calibrates activation ranges on seeded random tokens: good enough to test the path, not a
substitute for ModelSlim with a real calibration set. DeepSeek-V4 takes `w8a8_dynamic` only and
gets the layout of Ascend's V4-Flash W8A8 checkpoints (DeepSeek's tensor names, per-expert int8
weights, the MTP layer's tensors kept; `engine.quantization.deepseek_v4`). Logic:
`engine.quantization.quantizer`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

# The quantizer's modes and calibration defaults (`engine.quantization.quantizer`, kept equal by
# tests/cli/test_cli_startup.py), spelled here so that the CLI starts without importing torch.
MODES = ("w8a8", "w8a8_dynamic")
CALIB_SAMPLES = 8
CALIB_LEN = 64


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the `quantize` sub-command."""
    p = subparsers.add_parser(
        "quantize",
        help="write a W8A8 / W8A8_DYNAMIC checkpoint in ModelSlim's layout",
        description="Quantise a dense float checkpoint (Llama, Qwen2, Qwen3, Phi-3) or a "
        "DeepSeek-V4 one (w8a8_dynamic) to int8 weights and activations in msModelSlim's layout, "
        "loadable by the engine.",
    )
    p.add_argument("src", type=Path, help="float checkpoint directory or .gguf file")
    p.add_argument("dst", type=Path, help="output directory (must not exist or be empty)")
    p.add_argument("--mode", choices=sorted(MODES), required=True, help="quantisation scheme")
    p.add_argument(
        "--calib-samples",
        type=int,
        default=CALIB_SAMPLES,
        help=f"w8a8: random calibration sequences ({CALIB_SAMPLES})",
    )
    p.add_argument(
        "--calib-len", type=int, default=CALIB_LEN, help=f"w8a8: tokens per sequence ({CALIB_LEN})"
    )
    p.add_argument("--seed", type=int, default=0, help="w8a8: calibration seed (0)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Print what was written; exit 2 on a bad source, destination or mode."""
    from engine.checkpoint_ref import CheckpointRef
    from engine.model_loader import load_config
    from engine.quantization import quantizer

    try:
        calibration = None
        if args.mode == "w8a8":
            vocab = int(load_config(CheckpointRef.from_path(args.src)).vocab_size)
            calibration = quantizer.random_calibration(
                vocab, args.calib_samples, args.calib_len, args.seed
            )
        result = quantizer.quantize_checkpoint(args.src, args.dst, args.mode, calibration)
    except ValueError as exc:
        print(f"ascend-router quantize: error: {exc}", file=sys.stderr)
        return 2
    kind = quantizer.MODES[args.mode]
    print(
        f"{result.out_dir}: {result.num_layers} linear layers {kind}, tensors "
        f"{result.bytes_before / 2**20:.1f} MiB -> {result.bytes_after / 2**20:.1f} MiB"
    )
    return 0
