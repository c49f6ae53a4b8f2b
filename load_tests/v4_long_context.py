r"""`python -m load_tests.v4_long_context`: DeepSeek-V4's decode time and KV bytes vs the context.

Issue 25, acceptance 4: on the tiny V4 model (`fixtures.tiny_checkpoints`, `deepseek_v4`: 4 layers
of which 2 compressed-sparse (CSA, ratio 4, indexer keeping 2 entries), 1 heavily-compressed
(HCA, ratio 16) and 1 sliding-window only; window 8), at each context length of `--lengths`
(default 4k, 16k and 64k tokens), one random prompt of exactly that many tokens is prefilled and
then `--decode-tokens` greedy tokens are decoded, one request at a time, in process. Reported per
length:

- **TPOT**: the mean wall time of the decode steps (each step computes one token of the one
  sequence), with their median and minimum (on a shared host another process slows a step,
  nothing speeds one up, so the minimum is the least disturbed figure);
- **KV bytes held** by the sequence once its prompt is computed: full-pool blocks held x
  `HybridKVSpec.bytes_per_block` + sliding-pool blocks held x `sliding_bytes_per_block`, read from
  the engine's `HybridBlockManager` pools, next to the formula
  `HybridKVSpec.bytes_per_sequence(L, block_size)` (checked again at the last decode step that
  still holds the sequence), and the growth per token between consecutive lengths, which must be
  `HybridKVSpec.bytes_per_token()`: the compressed rate (the sliding pool is a fixed cost);
- **where a decode step's time goes** (medians over the steps; timing wrappers this tool adds to
  the loaded engine, `StepTimer`, so the engine carries no profiling code):
  `indexer` (op `lightning_indexer`: every CSA layer scores all L/4 indexer keys),
  `hca_attention` (op `sparse_shared_kv_attention` of the HCA layer: its L/16 entries plus the
  window), `entry_index` (`HybridStep.ratio`: each query's visible entries' slots, L/4 + L/16),
  `tables` (the runner's `_metadata` and the block manager's `commit`: the step's block tables
  turned into tensors, L/block_size entries, and the sliding-block bookkeeping),
  `other_attention` (projections, compressors, the CSA and sliding layers' attention over a
  fixed number of keys) and `rest` (MoE, hyper-connections, sampling, scheduling). The claim
  checked: decode time grows with the context only by the compressed entries' share (the first
  three), plus the block-table handling, which is per block, not per entry; the last two stay
  flat.

Contrast, dense (`--dense-family`, default `deepseek_v3`: MLA, the model V4 follows; its tiny
checkpoint has hidden size 16 to V4's 32): the same measurement on the engine's one-kind paged
cache, whose KV grows at its full rate (`KVCacheSpec.from_config(...).bytes_per_token()` per token:
the MLA latent of every layer), and whose decode attention reads every cached token. Dense
prefill is quadratic in full, so by default it runs up to `--dense-max-len` (16k); beyond, only
its formula bytes are printed.

Peer (`--peer-max-len`, default 16k; 0: none): transformers' own `DeepseekV4ForCausalLM` on the
same checkpoint and dtype (eager attention, the model's default: its sinks need it), the prompt
fed through the model in `--chunk`-token forward passes into its own `DynamicCache`
(`DeepseekV4CSACache` / `DeepseekV4HCACache` layers; one pass of a 16k prompt would need the
eager attention's `[heads, L, L + L/4]` weights, gigabytes; chunked passes gave the same greedy
tokens as one pass on a 1,000-token prompt), then `generate(do_sample=False)` from that cache,
each token timed by a streamer. Its TPOT is the mean gap between consecutive generated tokens;
its KV bytes, the tensors its cache holds after `generate` (window K=V, compressed entries and
indexer keys, compressor buffers and overlap state). Ratios are ours / peer (TPOT < 1: ours
faster). The greedy tokens of both sides are compared (float32: they should agree).

Both sides decode on one intra-op thread (ours: `single_thread_max_tokens: 1`, as
`configs/local.yaml` serves; the peer: `torch.set_num_threads(1)` around `generate`) and prefill
on `--threads` (default: every core). The tiny checkpoints get `max_position_embeddings` raised
to fit the longest length (V4's YaRN `original_max_position_embeddings` scaled with it, keeping
the tiny config's factor 16), written to `--model-dir` (default: a temporary directory).

Runtime on 2 cores: about 3.5 minutes with the defaults on a quiet host, most of it our 64k
prefill (the reference `lightning_indexer` scores every visible key of every prompt token:
quadratic). `--peer-max-len 65536 --dense-max-len 65536` adds the peer and the dense model at
64k, about 7 and 8 more minutes (measured on a loaded host).

Example (the figures in docs/benchmarks.md):
    python -m load_tests.v4_long_context

Writes `load_tests/results/v4-long-context-<UTC timestamp>.json`.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
import transformers

from configs.engine_config import EngineConfig
from engine.llm_engine import LLMEngine
from fixtures.tiny_checkpoints import SMALL_VOCAB, make_tiny_checkpoint
from load_tests.report import ratio
from load_tests.results import RESULTS_DIR, new_document, result_path
from load_tests.v4_long_context_engine import StepTimer, formula_bytes, run_ours, spec_summary
from load_tests.v4_long_context_peer import load_peer, run_peer
from load_tests.v4_long_context_report import format_report, growth, tpot_growth

V4 = "deepseek_v4"


def build_parser() -> argparse.ArgumentParser:
    """The CLI flags."""
    p = argparse.ArgumentParser(
        prog="python -m load_tests.v4_long_context",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--lengths", type=int, nargs="+", default=[4096, 16384, 65536])
    p.add_argument("--decode-tokens", type=int, default=64, help="decode steps timed per length")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    p.add_argument("--block-size", type=int, default=16, help="a multiple of V4's ratios (4, 16)")
    p.add_argument("--chunk", type=int, default=1024, help="prefill tokens per step (both sides)")
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="prefill threads")
    p.add_argument("--dense-family", default="deepseek_v3", help="tiny dense contrast ('' none)")
    p.add_argument("--dense-max-len", type=int, default=16384, help="dense runs up to this")
    p.add_argument("--peer-max-len", type=int, default=16384, help="peer runs up to this (0 none)")
    p.add_argument("--seed", type=int, default=0, help="prompt seed")
    p.add_argument("--model-dir", type=Path, help="where the tiny checkpoints go (default: tmp)")
    p.add_argument("--results-dir", type=Path, default=RESULTS_DIR)
    return p


# ---- checkpoints ---------------------------------------------------------------------------


def context_limit(lengths: list[int], decode_tokens: int) -> int:
    """`max_position_embeddings` for the runs: the longest prompt plus its decode, rounded up to
    a multiple of 4096 (so that V4's YaRN original length, a 16th of it, is whole)."""
    need = max(lengths) + decode_tokens + 2
    return -(-need // 4096) * 4096


def tiny_checkpoint(family: str, out_dir: Path, max_positions: int) -> Path:
    """The family's tiny checkpoint (`make_tiny_checkpoint`, seed 0, small vocabulary) with
    `max_positions` positions; for V4, YaRN's original length scaled to keep its factor."""
    make_tiny_checkpoint(family, out_dir, real_vocab=False)
    path = out_dir / "config.json"
    config = json.loads(path.read_text())
    config["max_position_embeddings"] = max_positions
    rope = config.get("rope_parameters") or {}
    # V4's are keyed by rope type (`main`, `compress`), the others' flat
    for params in [rope, *(v for v in rope.values() if isinstance(v, dict))]:
        if "original_max_position_embeddings" in params and "factor" in params:
            params["original_max_position_embeddings"] = int(max_positions / params["factor"])
    path.write_text(json.dumps(config, indent=2) + "\n")
    return out_dir


def random_prompt(length: int, seed: int) -> list[int]:
    """`length` token ids drawn uniformly from the small vocabulary (special ids 0-2 left out)."""
    rng = random.Random(seed * 1_000_003 + length)
    return [rng.randrange(3, SMALL_VOCAB) for _ in range(length)]


# ---- the run -------------------------------------------------------------------------------


def engine_config(args: argparse.Namespace, max_model_len: int) -> EngineConfig:
    """One sequence of up to `max_model_len` tokens, no prefix caching (every run prefills)."""
    return EngineConfig(
        dtype=args.dtype,
        block_size=args.block_size,
        max_model_len=max_model_len,
        num_kv_blocks=-(-max_model_len // args.block_size) + 1,
        max_num_batched_tokens=args.chunk,
        max_num_seqs=1,
        enable_prefix_caching=False,
        num_threads=args.threads,
        single_thread_max_tokens=1,
    )


@contextmanager
def checkpoints_dir(path: Path | None) -> Iterator[Path]:
    """`path` (created) or a temporary directory removed afterwards."""
    if path is not None:
        path.mkdir(parents=True, exist_ok=True)
        yield path
        return
    with tempfile.TemporaryDirectory(prefix="v4-long-context-") as tmp:
        yield Path(tmp)


def measure_length(
    args: argparse.Namespace,
    length: int,
    ours: LLMEngine,
    timer: StepTimer,
    dense: LLMEngine | None,
    peer: Any,
    clock: Callable[[], float],
) -> dict[str, Any]:
    """One length on every side that runs it (ours, then the peer, then the dense contrast)."""
    prompt = random_prompt(length, args.seed)
    row: dict[str, Any] = {"length": length, "load_avg_before": os.getloadavg()}
    print(f"[{clock():6.0f} s] {length} tokens: ours", flush=True)
    row["ours"] = run_ours(ours, prompt, args.decode_tokens, f"v4-{length}", timer)
    if peer is not None and length <= args.peer_max_len:
        print(f"[{clock():6.0f} s] {length} tokens: peer", flush=True)
        row["peer"] = run_peer(peer, prompt, args.decode_tokens, args.chunk, args.threads)
        o, p = row["ours"], row["peer"]
        row["greedy_tokens_equal"] = o["tokens"] == p["tokens"]
        row["tpot_ratio"] = ratio(o["tpot_ms"], p["tpot_ms"])
        row["tpot_min_ratio"] = ratio(o["tpot_min_ms"], p["tpot_min_ms"])
        row["prefill_ratio"] = ratio(o["prefill_s"], p["prefill_s"])
        row["kv_ratio"] = ratio(o["kv"]["bytes"], p["kv_bytes_after_generate"])
    if dense is not None:
        if length <= args.dense_max_len:
            print(f"[{clock():6.0f} s] {length} tokens: dense", flush=True)
            row["dense"] = run_ours(dense, prompt, args.decode_tokens, f"dense-{length}")
        row["dense_formula_bytes"] = formula_bytes(dense.executor.spec, length, args.block_size)
    row["load_avg_after"] = os.getloadavg()
    return row


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Every side at every length; the result document."""
    lengths = sorted(args.lengths)
    limit = context_limit(lengths, args.decode_tokens)
    max_model_len = max(lengths) + args.decode_tokens + 1
    began = time.perf_counter()

    def clock() -> float:
        return time.perf_counter() - began

    rows: list[dict[str, Any]] = []
    specs: dict[str, Any] = {}
    peer = dense = None
    with checkpoints_dir(args.model_dir) as root:
        v4_dir = tiny_checkpoint(V4, root / "tiny-deepseek-v4", limit)
        ours = LLMEngine(str(v4_dir), engine_config(args, max_model_len))
        timer = StepTimer(ours)
        try:
            specs["ours"] = spec_summary(ours.executor.spec, args.block_size)
            if args.dense_family:
                dense_dir = root / f"tiny-{args.dense_family}"
                tiny_checkpoint(args.dense_family, dense_dir, limit)
                dense_len = min(max_model_len, args.dense_max_len + args.decode_tokens + 1)
                dense = LLMEngine(str(dense_dir), engine_config(args, dense_len))
                specs["dense"] = spec_summary(dense.executor.spec, args.block_size)
            if args.peer_max_len:
                peer = load_peer(v4_dir, getattr(torch, args.dtype))
            # warm-up: one short request per side (allocator, first-call costs)
            warm = random_prompt(64, args.seed + 1)
            run_ours(ours, warm, 4, "warm-v4")
            if dense is not None:
                run_ours(dense, warm, 4, "warm-dense")
            if peer is not None:
                run_peer(peer, warm, 4, args.chunk, args.threads)
            for length in lengths:
                rows.append(measure_length(args, length, ours, timer, dense, peer, clock))
        finally:
            timer.close()
            ours.shutdown()
            if dense is not None:
                dense.shutdown()
    measured_dense = [r for r in rows if "dense" in r]
    return new_document(
        "v4_long_context",
        {
            "lengths": lengths,
            "decode_tokens": args.decode_tokens,
            "dtype": args.dtype,
            "block_size": args.block_size,
            "chunk": args.chunk,
            "threads": args.threads,
            "seed": args.seed,
            "max_position_embeddings": limit,
        },
        model=f"tiny {V4} (fixtures.tiny_checkpoints, seed 0, {SMALL_VOCAB}-token vocabulary)",
        dense_family=args.dense_family or None,
        peer=peer_description(args, peer),
        torch=torch.__version__,
        host=platform.processor() or platform.machine(),
        host_cpus=os.cpu_count(),
        specs=specs,
        rows=rows,
        kv_growth={
            "ours": growth(rows, lambda r: r["ours"]["kv"]["bytes"]),
            "dense": growth(measured_dense, lambda r: r["dense"]["kv"]["bytes"]),
        },
        tpot_growth=tpot_growth(rows),
        duration_s=round(clock(), 1),
    )


def peer_description(args: argparse.Namespace, peer: Any) -> dict[str, Any] | None:
    """The peer's name, version and the exact calls made, for the result and the report."""
    if peer is None:
        return None
    return {
        "name": "transformers DeepseekV4ForCausalLM.generate, DynamicCache",
        "class": type(peer).__name__,
        "transformers": transformers.__version__,
        "attn_implementation": peer.config._attn_implementation,
        "max_len": args.peer_max_len,
        "command": (
            f"AutoModelForCausalLM.from_pretrained(ckpt, dtype=torch.{args.dtype}); "
            "cache = DynamicCache(config=model.config); model(input_ids=chunk, cache=cache) per "
            f"{args.chunk} prompt tokens on {args.threads} threads; torch.set_num_threads(1); "
            f"model.generate(prompt + [first], cache=cache, max_new_tokens="
            f"{args.decode_tokens + 1}, do_sample=False, streamer=...)"
        ),
    }


def main(argv: list[str] | None = None) -> int:
    """Measure, print the tables, write the JSON result."""
    args = build_parser().parse_args(argv)
    doc = run(args)
    print(format_report(doc))
    path = result_path("v4-long-context", "json", args.results_dir)
    path.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
