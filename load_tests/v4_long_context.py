r"""`python -m load_tests.v4_long_context`: DeepSeek-V4's decode time and KV bytes vs the context.

Issue 25, acceptance 4: on the tiny V4 model (`engine.tiny_checkpoints`, `deepseek_v4`: 4 layers
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

Example (the figures in the README):
    python -m load_tests.v4_long_context

Writes `load_tests/results/v4-long-context-<UTC timestamp>.json`.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
import transformers

from configs.engine_config import EngineConfig
from engine.deepseek_v4.attention import V4Attention
from engine.deepseek_v4.cache import HybridKVSpec
from engine.deepseek_v4.step_indices import HybridStep
from engine.hybrid_block_manager import HybridBlockManager
from engine.llm_engine import LLMEngine
from engine.sampling_params import SamplingParams
from engine.tiny_checkpoints import SMALL_VOCAB, make_tiny_checkpoint
from load_tests.report import ratio
from load_tests.results import RESULTS_DIR, new_document, result_path

V4 = "deepseek_v4"
TIMED_OPS = ("lightning_indexer", "sparse_shared_kv_attention")
"""V4 attention ops timed per call (the two whose work grows with the context)."""
BUCKETS = ("indexer", "hca_attention", "entry_index", "tables", "other_attention", "rest")
"""Where a V4 decode step's time goes (see the module docstring)."""


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


# ---- our engine ----------------------------------------------------------------------------


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


class StepTimer:
    """A V4 engine's decode-step time per bucket (`BUCKETS`), from timing wrappers this tool adds
    to the loaded engine (removed by `close`):

    - forward hooks on every `V4Attention` (the modules' whole time);
    - a proxy in place of each one's op table (`V4Attention._ops`) timing `TIMED_OPS`: the
      indexer, and the attention op of the HCA layers;
    - `HybridStep.ratio` (class-wide): each query's visible compressed entries, built once per
      step and ratio (`entry_index`);
    - the runner's `_metadata` and the block manager's `commit` (this engine's only): the step's
      positions and block tables as tensors, and the block bookkeeping after it (`tables`).
    """

    def __init__(self, engine: LLMEngine) -> None:
        self.totals: dict[str, float] = defaultdict(float)
        self._starts: dict[int, float] = {}
        self._hooks = []
        self._layers = [m for m in engine.executor.model.modules() if isinstance(m, V4Attention)]
        for module in self._layers:
            self._hooks.append(module.register_forward_pre_hook(self._pre))
            self._hooks.append(module.register_forward_hook(self._post))
            module._ops = _TimedOps(module._ops, module.layer_type, self.totals)
        self._ratio = HybridStep.ratio
        HybridStep.ratio = self._timed(self._ratio, "entry_index")  # type: ignore[method-assign]
        self._runner = engine.executor.runner
        self._runner._metadata = self._timed(self._runner._metadata, "tables")
        self._block_manager = engine.block_manager
        self._block_manager.commit = self._timed(self._block_manager.commit, "tables")

    def _timed(self, fn: Callable[..., Any], key: str) -> Callable[..., Any]:
        totals = self.totals

        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                totals[key] += time.perf_counter() - start

        return timed

    def _pre(self, module: torch.nn.Module, args: Any) -> None:
        self._starts[id(module)] = time.perf_counter()

    def _post(self, module: torch.nn.Module, args: Any, output: Any) -> None:
        self.totals["attention"] += time.perf_counter() - self._starts.pop(id(module))

    def reset(self) -> None:
        """Start a step."""
        self.totals.clear()

    def split(self, step_s: float) -> dict[str, float]:
        """The step's `BUCKETS` in ms (they add up to `step_s`)."""
        t = self.totals
        timed = t["op:lightning_indexer"]
        timed += t["op:sparse_shared_kv_attention:heavily_compressed_attention"]
        timed += t["entry_index"]
        return {
            "indexer": 1000 * t["op:lightning_indexer"],
            "hca_attention": 1000 * t["op:sparse_shared_kv_attention:heavily_compressed_attention"],
            "entry_index": 1000 * t["entry_index"],
            "tables": 1000 * t["tables"],
            "other_attention": 1000 * (t["attention"] - timed),
            "rest": 1000 * (step_s - t["attention"] - t["tables"]),
        }

    def close(self) -> None:
        """Remove every wrapper."""
        for hook in self._hooks:
            hook.remove()
        for module in self._layers:
            module._ops = module._ops._ops
        HybridStep.ratio = self._ratio  # type: ignore[method-assign]
        del self._runner._metadata
        del self._block_manager.commit


class _TimedOps:
    """An op table whose `TIMED_OPS` add their wall time to `totals` (keys `op:<name>` and, for
    the attention op, `op:<name>:<layer type>`); every other op is the table's own."""

    def __init__(self, ops: Any, layer_type: str, totals: dict[str, float]) -> None:
        self._ops = ops
        self._layer_type = layer_type
        self._totals = totals

    def __getattr__(self, name: str) -> Callable[..., Any]:
        fn = getattr(self._ops, name)
        if name not in TIMED_OPS:
            return fn
        key = f"op:{name}" + (f":{self._layer_type}" if name != "lightning_indexer" else "")

        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self._totals[key] += time.perf_counter() - start

        return timed


def held_blocks(engine: LLMEngine) -> tuple[int, int]:
    """(full-pool, sliding-pool) blocks referenced (sliding 0 for a one-kind cache)."""
    bm = engine.block_manager
    full = bm.pool.num_blocks - bm.pool.num_free
    if isinstance(bm, HybridBlockManager):
        return full, bm.sliding.num_blocks - bm.sliding.num_free
    return full, 0


def held_bytes(engine: LLMEngine) -> dict[str, int]:
    """The bytes behind `held_blocks`, per pool, from the engine's KV spec."""
    spec = engine.executor.spec
    bs = engine.config.block_size
    full, sliding = held_blocks(engine)
    if isinstance(spec, HybridKVSpec):
        full_b = full * spec.bytes_per_block(bs)
        sliding_b = sliding * spec.sliding_bytes_per_block(bs)
    else:
        full_b, sliding_b = full * spec.bytes_per_block(bs), 0
    return {
        "full_blocks": full,
        "sliding_blocks": sliding,
        "full_bytes": full_b,
        "sliding_bytes": sliding_b,
        "bytes": full_b + sliding_b,
    }


def formula_bytes(spec: Any, num_tokens: int, block_size: int) -> int:
    """Bytes a sequence of `num_tokens` computed tokens holds, by the spec's formula."""
    if isinstance(spec, HybridKVSpec):
        return spec.bytes_per_sequence(num_tokens, block_size)
    return -(-num_tokens // block_size) * spec.bytes_per_block(block_size)


def run_ours(
    engine: LLMEngine,
    prompt: list[int],
    decode_tokens: int,
    request_id: str,
    timer: StepTimer | None = None,
) -> dict[str, Any]:
    """Prefill `prompt`, then decode `decode_tokens` tokens, one step each; the timings, the
    KV held after the prefill and at the last decode step still holding the sequence, and the
    tokens."""
    spec, bs, n = engine.executor.spec, engine.config.block_size, len(prompt)
    params = SamplingParams(max_tokens=decode_tokens + 1, temperature=0.0, ignore_eos=True)
    engine.add_request(request_id, prompt, params)
    tokens: list[int] = []
    start = time.perf_counter()
    while not tokens:
        for out in engine.step():
            tokens.extend(out.new_token_ids)
    prefill_s = time.perf_counter() - start
    after_prefill = held_bytes(engine)
    steps: list[float] = []
    splits: list[dict[str, float]] = []
    last_live = after_prefill
    while engine.has_unfinished():
        if timer is not None:
            timer.reset()
        began = time.perf_counter()
        outs = engine.step()
        took = time.perf_counter() - began
        new = [t for out in outs for t in out.new_token_ids]
        assert len(new) == 1, f"a decode step gave {len(new)} tokens"
        tokens.extend(new)
        steps.append(took)
        if timer is not None:
            splits.append(timer.split(took))
        if engine.has_unfinished():
            last_live = held_bytes(engine)
    assert len(steps) == decode_tokens, (len(steps), decode_tokens)
    live_tokens = n + decode_tokens - 1
    result: dict[str, Any] = {
        "prefill_s": round(prefill_s, 3),
        "tpot_ms": round(1000 * statistics.mean(steps), 3),
        "tpot_median_ms": round(1000 * statistics.median(steps), 3),
        "tpot_min_ms": round(1000 * min(steps), 3),
        "kv": after_prefill,
        "kv_formula_bytes": formula_bytes(spec, n, bs),
        "kv_last_decode": {**last_live, "tokens": live_tokens},
        "kv_last_decode_formula_bytes": formula_bytes(spec, live_tokens, bs),
        "tokens": tokens,
    }
    result["kv_matches_formula"] = (
        after_prefill["bytes"] == result["kv_formula_bytes"]
        and last_live["bytes"] == result["kv_last_decode_formula_bytes"]
    )
    if splits:
        result["step_split_ms"] = {
            b: round(statistics.median(s[b] for s in splits), 3) for b in BUCKETS
        }
    return result


# ---- the peer: transformers ----------------------------------------------------------------


def load_peer(checkpoint: Path, dtype: torch.dtype) -> Any:
    """transformers' `DeepseekV4ForCausalLM` (via `AutoModelForCausalLM`), eager attention."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(checkpoint, dtype=dtype)
    return model.eval()


def cache_bytes(cache: Any) -> int:
    """Bytes of the distinct tensors a transformers cache holds (V4's K=V counted once): every
    tensor attribute of each layer and the tensors of its dict attributes (compressed entries,
    compressor buffers, overlap state)."""
    seen: set[int] = set()
    total = 0

    def add(t: Any) -> None:
        nonlocal total
        if isinstance(t, torch.Tensor) and t.numel() and t.data_ptr() not in seen:
            seen.add(t.data_ptr())
            total += t.numel() * t.element_size()

    for layer in cache.layers:
        for value in vars(layer).values():
            if isinstance(value, dict):
                for item in value.values():
                    add(item)
            else:
                add(value)
    return total


def run_peer(
    model: Any, prompt: list[int], decode_tokens: int, chunk: int, threads: int
) -> dict[str, Any]:
    """The prompt through the model in `chunk`-token passes into a `DynamicCache` (on
    `threads` threads), the first token its greedy pick, then `generate` from that cache on
    one thread: `decode_tokens` more, each timed by a streamer."""
    from transformers import DynamicCache
    from transformers.generation.streamers import BaseStreamer

    class Stamps(BaseStreamer):
        def __init__(self) -> None:
            self.times: list[float] = []

        def put(self, value: torch.Tensor) -> None:
            self.times.append(time.perf_counter())

        def end(self) -> None:
            pass

    ids = torch.tensor([prompt])
    cache = DynamicCache(config=model.config)
    torch.set_num_threads(threads)
    start = time.perf_counter()
    with torch.no_grad():
        for lo in range(0, len(prompt), chunk):
            logits = model(input_ids=ids[:, lo : lo + chunk], cache=cache, use_cache=True).logits
    first = int(logits[0, -1].argmax())
    prefill_s = time.perf_counter() - start
    stamps = Stamps()
    torch.set_num_threads(1)
    try:
        out = model.generate(
            torch.tensor([prompt + [first]]),
            cache=cache,
            max_new_tokens=decode_tokens + 1,
            min_new_tokens=decode_tokens + 1,
            do_sample=False,
            eos_token_id=None,
            pad_token_id=0,
            streamer=stamps,
        )
    finally:
        torch.set_num_threads(threads)
    # stamps: the prompt, then one per generated token; the gaps between generated tokens are
    # decode steps (the first generated token's pass is the prompt's last token)
    gaps = [b - a for a, b in zip(stamps.times[1:], stamps.times[2:])]
    assert len(gaps) == decode_tokens, (len(gaps), decode_tokens)
    generated = out[0, len(prompt) + 1 :].tolist()
    return {
        "prefill_s": round(prefill_s, 3),
        "tpot_ms": round(1000 * statistics.mean(gaps), 3),
        "tpot_median_ms": round(1000 * statistics.median(gaps), 3),
        "tpot_min_ms": round(1000 * min(gaps), 3),
        "kv_bytes_after_generate": cache_bytes(cache),
        "kv_tokens_after_generate": len(prompt) + decode_tokens + 1,
        "tokens": [first, *generated[:decode_tokens]],
    }


# ---- the run -------------------------------------------------------------------------------


@contextmanager
def checkpoints_dir(path: Path | None) -> Iterator[Path]:
    """`path` (created) or a temporary directory removed afterwards."""
    if path is not None:
        path.mkdir(parents=True, exist_ok=True)
        yield path
        return
    with tempfile.TemporaryDirectory(prefix="v4-long-context-") as tmp:
        yield Path(tmp)


def growth(rows: list[dict[str, Any]], key: Callable[[dict[str, Any]], int]) -> list[dict]:
    """Bytes per token between consecutive lengths."""
    out = []
    for a, b in zip(rows, rows[1:]):
        out.append(
            {
                "from": a["length"],
                "to": b["length"],
                "bytes_per_token": (key(b) - key(a)) / (b["length"] - a["length"]),
            }
        )
    return out


def spec_summary(spec: Any, block_size: int) -> dict[str, Any]:
    """The KV geometry's figures the report quotes."""
    summary: dict[str, Any] = {
        "describe": spec.describe(),
        "bytes_per_token": spec.bytes_per_token(),
        "bytes_per_block": spec.bytes_per_block(block_size),
    }
    if isinstance(spec, HybridKVSpec):
        elem = torch.tensor([], dtype=spec.dtype).element_size()
        summary.update(
            sliding_bytes_per_block=spec.sliding_bytes_per_block(block_size),
            sliding_blocks_per_sequence=spec.sliding_blocks_per_sequence(block_size),
            span=spec.span,
            # the same layers each caching every token's one K=V vector (no compression)
            uncompressed_bytes_per_token=len(spec.layer_types) * spec.head_dim * elem,
        )
    return summary


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
        model=f"tiny {V4} (engine.tiny_checkpoints, seed 0, {SMALL_VOCAB}-token vocabulary)",
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


def tpot_growth(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Ours: each length's decode-step growth over the first length's, per bucket (medians),
    and the share of it that grows with the compressed entries (indexer, HCA attention, entry
    index) and with the block count (tables)."""
    base = rows[0]["ours"].get("step_split_ms") if rows else None
    out = []
    for row in rows[1:]:
        split = row["ours"].get("step_split_ms")
        if base is None or split is None:
            continue
        delta = {b: round(split[b] - base[b], 3) for b in BUCKETS}
        out.append(
            {
                "from": rows[0]["length"],
                "to": row["length"],
                "tpot_ms": round(row["ours"]["tpot_ms"] - rows[0]["ours"]["tpot_ms"], 3),
                "split_sum_ms": round(sum(delta.values()), 3),
                "buckets_ms": delta,
                "compressed_entries_ms": round(
                    delta["indexer"] + delta["hca_attention"] + delta["entry_index"], 3
                ),
                "tables_ms": delta["tables"],
                "fixed_ms": round(delta["other_attention"] + delta["rest"], 3),
            }
        )
    return out


def _mib(n: float) -> str:
    return f"{n / (1 << 20):.2f} MiB"


def _r(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def format_report(doc: dict[str, Any]) -> str:
    """The tables printed to stdout."""
    w, specs = doc["workload"], doc["specs"]
    v4 = specs["ours"]
    lines = [
        f"tiny DeepSeek-V4, {w['dtype']}, block {w['block_size']}, prefill chunk {w['chunk']}, "
        f"{w['decode_tokens']} decode tokens per length ({doc['duration_s']} s in all)",
        f"ours KV: {v4['describe']}",
        f"  full pool {v4['bytes_per_token']:g} B/token ({v4['bytes_per_block']} B/block); "
        f"sliding pool {v4['sliding_bytes_per_block']} B/block, at most "
        f"{v4['sliding_blocks_per_sequence']} per sequence; every layer's K=V uncompressed "
        f"would be {v4['uncompressed_bytes_per_token']} B/token",
    ]
    if "dense" in specs:
        d = specs["dense"]
        lines.append(
            f"dense {doc['dense_family']} KV: {d['describe']}, {d['bytes_per_token']} B/token"
        )
    if doc["peer"]:
        lines.append(f"peer: {doc['peer']['command']} (transformers {doc['peer']['transformers']})")
    lines.append("")
    lines.append(
        f"{'L':>6} | {'prefill s':>9} | {'TPOT mean/min ms':>16} | {'KV held':>11} | "
        f"{'= formula':>9} | {'peer prefill':>12} | {'peer TPOT':>9} | {'x peer':>6} | "
        f"{'peer KV':>11} | {'tokens =':>8} | {'dense TPOT':>10} | {'dense KV':>11}"
    )
    for row in doc["rows"]:
        o, p, d = row["ours"], row.get("peer"), row.get("dense")
        dense_kv = d["kv"]["bytes"] if d else row.get("dense_formula_bytes")
        lines.append(
            f"{row['length']:>6} | {o['prefill_s']:>9.1f} | "
            f"{o['tpot_ms']:>8.2f}/{o['tpot_min_ms']:<7.2f} | {_mib(o['kv']['bytes']):>11} | "
            f"{str(o['kv_matches_formula']):>9} | "
            f"{(format(p['prefill_s'], '.1f') if p else '-'):>12} | "
            f"{(format(p['tpot_ms'], '.2f') if p else '-'):>9} | "
            f"{(_r(row['tpot_ratio']) if p else '-'):>6} | "
            f"{(_mib(p['kv_bytes_after_generate']) if p else '-'):>11} | "
            f"{(str(row['greedy_tokens_equal']) if p else '-'):>8} | "
            f"{(format(d['tpot_ms'], '.2f') if d else '-'):>10} | "
            f"{(_mib(dense_kv) if dense_kv is not None else '-'):>11}"
            + ("" if d or dense_kv is None else " (formula)")
        )
    first = doc["rows"][0] if doc["rows"] else None
    if first is not None:
        peer = first.get("peer")
        lines.append(
            f"single stream at {first['length']} tokens: ours "
            f"{1000 / first['ours']['tpot_ms']:.1f} tok/s decode"
            + (f", peer {1000 / peer['tpot_ms']:.1f} tok/s" if peer else "")
        )
    lines.append("")
    for name, rates in doc["kv_growth"].items():
        expected = specs.get(name, {}).get("bytes_per_token")
        for g in rates:
            lines.append(
                f"{name} KV growth {g['from']} -> {g['to']}: {g['bytes_per_token']:g} B/token "
                f"(bytes_per_token() = {expected:g})"
            )
    lines.append("")
    lines.append("ours, median decode step split (ms; change from the first length):")
    base = doc["rows"][0]["ours"].get("step_split_ms") if doc["rows"] else None
    for row in doc["rows"]:
        split = row["ours"].get("step_split_ms")
        if split is None or base is None:
            continue
        cells = ", ".join(f"{b} {split[b]:.2f} ({split[b] - base[b]:+.2f})" for b in BUCKETS)
        lines.append(f"{row['length']:>6}: {cells}")
    for g in doc["tpot_growth"]:
        lines.append(
            f"TPOT {g['from']} -> {g['to']}: {g['tpot_ms']:+.2f} ms mean; median split "
            f"{g['split_sum_ms']:+.2f} ms = compressed entries (indexer, HCA attention, entry "
            f"index) {g['compressed_entries_ms']:+.2f} + block tables {g['tables_ms']:+.2f} + "
            f"the rest {g['fixed_ms']:+.2f}"
        )
    return "\n".join(lines)


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
