"""Peer: transformers' own continuous batching (`ContinuousBatchingManager`, transformers 5.x).

The same GGUF checkpoint is loaded with `AutoModelForCausalLM.from_pretrained(gguf_file=...)`
(dequantised, same dtype as our engine). Requests are added one by one through the manager so
each keeps its own `max_new_tokens`; EOS is disabled with `eos_token_id=-1` (the CB manager's
"no EOS" value), which matches `ignore_eos` on our side. Greedy decoding (`do_sample=False`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from load_tests.offline_result import OfflineResult
from load_tests.workload import Prompt

logger = logging.getLogger(__name__)


def kv_bytes_per_token(config: Any, dtype: torch.dtype) -> int:
    """K and V bytes per token over all layers (for sizing the peer's cache like ours)."""
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    kv_heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
    elem = torch.tensor([], dtype=dtype).element_size()
    return 2 * config.num_hidden_layers * kv_heads * head_dim * elem


def _load(checkpoint: str, dtype: torch.dtype) -> Any:
    from transformers import AutoModelForCausalLM

    path = Path(checkpoint)
    kwargs = {"gguf_file": path.name} if path.suffix == ".gguf" else {}
    directory = path.parent if path.suffix == ".gguf" else path
    model = AutoModelForCausalLM.from_pretrained(
        directory, dtype=dtype, attn_implementation="sdpa", **kwargs
    )
    return model.eval()


def run_transformers_cb(
    checkpoint: str,
    prompts: Sequence[Prompt],
    *,
    dtype: torch.dtype,
    kv_cache_bytes: int,
    max_batch_tokens: int,
    max_requests_per_batch: int,
    page_size: int,
    timeout_s: float,
) -> OfflineResult:
    """Time the workload on transformers' continuous batching.

    Args:
        checkpoint: `.gguf` file or checkpoint directory.
        prompts: the workload (all submitted at once).
        dtype: model dtype (use our engine's).
        kv_cache_bytes: KV budget; converted to `num_blocks` of `page_size` tokens.
        max_batch_tokens: tokens per forward pass (our `max_num_batched_tokens`).
        max_requests_per_batch: sequences per batch (our `max_num_seqs`).
        page_size: tokens per cache page.
        timeout_s: wall-clock bound of the result loop.
    """
    from transformers import GenerationConfig
    from transformers.generation import ContinuousBatchingConfig
    from transformers.generation.continuous_batching.utils import WorkloadHints

    model = _load(checkpoint, dtype)
    per_token = kv_bytes_per_token(model.config, dtype)
    num_blocks = max(1, kv_cache_bytes // (per_token * page_size))
    cb_config = ContinuousBatchingConfig(
        page_size=page_size,
        num_blocks=num_blocks,
        max_batch_tokens=max_batch_tokens,
        max_requests_per_batch=max_requests_per_batch,
    )
    gen_config = GenerationConfig(do_sample=False, eos_token_id=-1, max_new_tokens=16)
    hints = WorkloadHints(
        max_prompt_length=max(p.input_len for p in prompts),
        max_generated_length=max(p.output_len for p in prompts),
        num_requests=len(prompts),
    )
    results: dict[str, Any] = {}
    with (
        torch.inference_mode(),
        model.continuous_batching_context_manager(
            generation_config=gen_config,
            continuous_batching_config=cb_config,
            block=True,
            timeout=10,
            workload_hints=hints,
        ) as manager,
    ):
        _collect(manager, {"warmup": prompts[0]}, 4, time.perf_counter() + timeout_s)
        start = time.perf_counter()
        ids = {f"r{i}": p for i, p in enumerate(prompts)}
        results = _collect(manager, ids, None, start + timeout_s)
        duration = time.perf_counter() - start
    outputs = [list(results[k].generated_tokens) if k in results else [] for k in ids]
    errors = sum(1 for k in ids if k not in results or results[k].error is not None)
    return OfflineResult(
        name="transformers-cb",
        num_requests=len(prompts),
        total_output_tokens=sum(len(o) for o in outputs),
        duration_s=duration,
        mean_step_ms=None,
        num_steps=None,
        length_mismatches=sum(len(o) != p.output_len for o, p in zip(outputs, prompts)),
        errors=errors,
        outputs=outputs,
        extra={
            "num_blocks": num_blocks,
            "page_size": page_size,
            "max_batch_tokens": max_batch_tokens,
            "max_requests_per_batch": max_requests_per_batch,
        },
    )


def _collect(
    manager: Any, requests: dict[str, Prompt], max_tokens: int | None, deadline: float
) -> dict[str, Any]:
    """Add `requests` and wait until all finish or `deadline` passes; finished outputs by id."""
    for rid, p in requests.items():
        manager.add_request(
            p.token_ids,
            request_id=rid,
            max_new_tokens=max_tokens or p.output_len,
            eos_token_id=-1,
        )
    done: dict[str, Any] = {}
    while len(done) < len(requests) and time.perf_counter() < deadline:
        result = manager.get_result(timeout=1)
        if result is None:
            if not manager.is_running():
                logger.error(
                    "transformers CB thread stopped with %d/%d done", len(done), len(requests)
                )
                break
            continue
        if result.is_finished():
            done[result.request_id] = result
    return done
