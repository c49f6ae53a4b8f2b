"""Helpers for engine tests: run an engine dry, greedy parameters, HF reference tokens, the
CPU kernels' activation rounding."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
import torch

from engine.llm_engine import LLMEngine
from engine.sampling_params import SamplingParams


def run_to_completion(
    engine: LLMEngine, out: dict[str, list[int]] | None = None
) -> dict[str, list[int]]:
    """Step until idle; generated tokens per request id (added to `out` if given)."""
    out = {} if out is None else out
    while engine.has_unfinished():
        step(engine, out)
    return out


def step(engine: LLMEngine, out: dict[str, list[int]]) -> None:
    """One engine step, recording its tokens in `out`."""
    for o in engine.step():
        out.setdefault(o.request_id, []).extend(o.new_token_ids)


def greedy(max_tokens: int, **kw: Any) -> SamplingParams:
    """Greedy sampling parameters."""
    return SamplingParams(max_tokens=max_tokens, temperature=0.0, **kw)


def hf_greedy(model: torch.nn.Module, prompt: list[int], max_new_tokens: int) -> list[int]:
    """Reference greedy tokens from transformers' own `generate` (SDPA attention, fp32)."""
    ids = torch.tensor([prompt])
    out = model.generate(
        ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new_tokens, do_sample=False
    )
    return out[0, len(prompt) :].tolist()


def hf_greedy_uncached(model: torch.nn.Module, prompt: list[int], max_new_tokens: int) -> list[int]:
    """Reference greedy tokens from transformers' full forward over the whole sequence, without
    a cache, one token at a time: the reference for models whose cached `generate` depends on
    how the sequence is split into forward calls (DeepSeek-V4, whose indexer picks its top-k
    entries from those a call can see; transformers marks such models `_is_stateful`)."""
    ids = list(prompt)
    with torch.no_grad():
        for _ in range(max_new_tokens):
            ids.append(int(model(torch.tensor([ids]), use_cache=False).logits[0, -1].argmax()))
    return ids[len(prompt) :]


def hf_reference(model: torch.nn.Module, prompt: list[int], max_new_tokens: int) -> list[int]:
    """`hf_greedy_uncached` for `_is_stateful` models, else `hf_greedy`."""
    if getattr(model, "_is_stateful", False):
        return hf_greedy_uncached(model, prompt, max_new_tokens)
    return hf_greedy(model, prompt, max_new_tokens)


def hf_top2_gap(model: torch.nn.Module, tokens: list[int]) -> list[float]:
    """Gap between the top-2 logits at every position of `tokens` (for near-tie handling)."""
    with torch.no_grad():
        logits = model(torch.tensor([tokens]), use_cache=False).logits[0]
    top2 = logits.topk(2, dim=-1).values
    return (top2[:, 0] - top2[:, 1]).tolist()


def assert_same_until_tie(
    ours: list[int], ref: list[int], prompt: list[int], model: torch.nn.Module
) -> None:
    """Equal tokens; a divergence is accepted only at a reference near-tie (top-2 < 1e-4)."""
    for i, (a, b) in enumerate(zip(ours, ref)):
        if a != b:
            gap = hf_top2_gap(model, prompt + ref[:i])[-1]
            assert gap < 1e-4, f"token {i}: engine {a} != transformers {b} (top-2 gap {gap})"
            return
    assert len(ours) == len(ref)


def q8_activations(x: torch.Tensor) -> torch.Tensor:
    """`[M, K]` float32 rounded as our CPU kernels quantise activations: int8 per 32 values,
    scale max|x| / 127 (ggml Q8_0, `npu_ops/cpu_kernels/q8_0.h`)."""
    blocks = x.view(x.shape[0], -1, 32)
    d = blocks.abs().amax(-1, keepdim=True) / 127
    q = torch.round(blocks / torch.where(d > 0, d, torch.ones_like(d))).clamp(-127, 127)
    return (q * d).view_as(x)


class AnyToken:
    """A grammar constraint that allows every token (a request under it must not speculate)."""

    def mask_logits(self, logits: torch.Tensor) -> None: ...

    def accept(self, token_id: int) -> None: ...

    def is_terminated(self) -> bool:
        return False


def chat(tokenizer: Any, text: str) -> list[int]:
    """One user turn through the tokenizer's chat template, with the generation prompt."""
    return tokenizer.apply_chat_template(
        [{"role": "user", "content": text}], add_generation_prompt=True, tokenize=True
    )["input_ids"]


def assert_blocks_free(engine: LLMEngine) -> None:
    """Every KV block is back in the pool (no request left any behind)."""
    bm = engine.block_manager
    assert bm.num_free_blocks == bm.num_blocks, "blocks left after the requests ended"
    sliding = getattr(bm, "sliding", None)  # a hybrid cache's second pool (DeepSeek-V4)
    if sliding is not None:
        assert sliding.num_free == sliding.num_blocks, "sliding blocks left after the requests"


def run_staggered(
    engine: LLMEngine, requests: list[tuple[str, list[int], SamplingParams]], join_every: int
) -> dict[str, list[int]]:
    """Add the requests `join_every` steps apart, run until idle; tokens per request id. No
    request may end in an error, and every block must be free at the end."""
    out: dict[str, list[int]] = {}
    for rid, prompt, params in requests:
        engine.add_request(rid, prompt, params)
        for _ in range(join_every):
            for o in engine.step():
                out.setdefault(o.request_id, []).extend(o.new_token_ids)
    while engine.has_unfinished():
        for o in engine.step():
            assert o.finish_reason != "error", o.error
            out.setdefault(o.request_id, []).extend(o.new_token_ids)
    assert_blocks_free(engine)
    return out


def assert_dead_rank_stops_the_engine(engine: Callable[[], LLMEngine], reason: str) -> None:
    """Kill rank 1's actor of a multi-rank engine between two requests: the next request ends
    with `error_kind="dead"`, the engine reports why (`reason` in it: what `check_health`
    raises, so Serve replaces the replica) and refuses later requests with `EngineDead`.

    Args:
        engine: builds the engine (`tensor_parallel_size` or `pipeline_parallel_size` > 1).
        reason: a part of the expected dead reason.
    """
    import ray

    from engine.async_engine import AsyncEngine
    from engine.request_stream import EngineDead

    front = AsyncEngine(engine)
    try:

        async def run(rid: str) -> list[Any]:
            return [out async for out in await front.add(rid, [1, 2, 3, 4, 5], greedy(4))]

        assert asyncio.run(run("before"))[-1].finish_reason == "length"
        ray.kill(front.engine.executor.workers[1])
        last = asyncio.run(run("after"))[-1]
        assert (last.finish_reason, last.error_kind) == ("error", "dead"), last
        dead = front.dead_reason()
        assert dead is not None and reason in dead, dead
        with pytest.raises(EngineDead):
            asyncio.run(run("later"))
    finally:
        front.shutdown()
