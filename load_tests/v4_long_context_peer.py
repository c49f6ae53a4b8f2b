"""The peer of `load_tests.v4_long_context`: transformers' DeepSeek-V4 on the same tiny
checkpoint, prefilled in chunks into a `DynamicCache` and decoded by `generate`."""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Any

import torch


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
