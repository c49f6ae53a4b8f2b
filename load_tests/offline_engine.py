"""Offline throughput of our `LLMEngine`: every prompt queued at once, stepped to completion."""

from __future__ import annotations

import time
from collections.abc import Sequence

from configs.engine_config import EngineConfig
from engine.llm_engine import LLMEngine
from engine.sampling_params import SamplingParams
from load_tests.offline_result import OfflineResult
from load_tests.workload import Prompt


def _params(max_tokens: int) -> SamplingParams:
    return SamplingParams(max_tokens=max_tokens, temperature=0.0, ignore_eos=True)


def run_engine(
    checkpoint: str, config: EngineConfig, prompts: Sequence[Prompt], timeout_s: float
) -> OfflineResult:
    """Load the engine, warm it up with one short request, then time the whole workload.

    The step loop is bounded by `sum(output_len + input_len) + 1000` steps and by `timeout_s`;
    requests still unfinished then count as errors.
    """
    engine = LLMEngine(checkpoint, config)
    engine.add_request("warmup", prompts[0].token_ids, _params(4))
    while engine.has_unfinished():
        engine.step()
    outputs: dict[str, list[int]] = {str(i): [] for i in range(len(prompts))}
    failed: set[str] = set()
    finished: set[str] = set()
    max_steps = sum(p.output_len + p.input_len for p in prompts) + 1000
    step_times: list[float] = []
    start = time.perf_counter()
    for i, p in enumerate(prompts):
        engine.add_request(str(i), p.token_ids, _params(p.output_len))
    deadline = start + timeout_s
    while engine.has_unfinished() and len(step_times) < max_steps:
        if time.perf_counter() > deadline:
            break
        t0 = time.perf_counter()
        for out in engine.step():
            outputs[out.request_id].extend(out.new_token_ids)
            if out.finished:
                finished.add(out.request_id)
            if out.finish_reason == "error":
                failed.add(out.request_id)
        step_times.append(time.perf_counter() - t0)
    duration = time.perf_counter() - start
    unfinished = [rid for rid in outputs if rid not in finished]
    failed.update(unfinished)
    for rid in unfinished:
        engine.abort(rid)
    stats = engine.stats()
    ordered = [outputs[str(i)] for i in range(len(prompts))]
    return OfflineResult(
        name="ascend-router",
        num_requests=len(prompts),
        total_output_tokens=sum(len(o) for o in ordered),
        duration_s=duration,
        mean_step_ms=1000.0 * sum(step_times) / len(step_times) if step_times else None,
        num_steps=len(step_times),
        length_mismatches=sum(len(o) != p.output_len for o, p in zip(ordered, prompts)),
        errors=len(failed),
        outputs=ordered,
        extra={
            "num_preemptions": stats.num_preemptions,
            "num_kv_blocks": stats.num_blocks,
            "block_size": config.block_size,
            "max_num_seqs": config.max_num_seqs,
            "max_num_batched_tokens": config.max_num_batched_tokens,
        },
    )
