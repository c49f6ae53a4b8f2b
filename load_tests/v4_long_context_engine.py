"""Our engine's side of `load_tests.v4_long_context`: one request prefilled and decoded step by
step, the KV bytes it holds against the KV spec's formula, and where a V4 decode step's time goes
(`StepTimer`)."""

from __future__ import annotations

import statistics
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import torch

from engine.deepseek_v4.attention import V4Attention
from engine.deepseek_v4.cache import HybridKVSpec
from engine.deepseek_v4.step_indices import HybridStep
from engine.hybrid_block_manager import HybridBlockManager
from engine.llm_engine import LLMEngine
from engine.sampling_params import SamplingParams

TIMED_OPS = ("lightning_indexer", "sparse_shared_kv_attention")
"""V4 attention ops timed per call (the two whose work grows with the context)."""
BUCKETS = ("indexer", "hca_attention", "entry_index", "tables", "other_attention", "rest")
"""Where a V4 decode step's time goes (see `load_tests.v4_long_context`'s docstring)."""


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
