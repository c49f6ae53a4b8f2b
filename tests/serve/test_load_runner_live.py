"""The load-test runner against the real served app: every request of a level completes and the
server's own figures, read back from `/metrics`, show nothing left running or holding KV."""

from __future__ import annotations

import asyncio

from serve_helpers import MODEL

from load_tests.client import Target
from load_tests.runner import RunOptions, run_level
from load_tests.workload import WorkloadSpec, build_prompts, default_tokenizer


def test_level_completes_and_server_is_idle_after(serve_url: str) -> None:
    prompts = build_prompts(
        WorkloadSpec(num_requests=6, input_len=24, output_len=8, seed=5), default_tokenizer()
    )
    target = Target(f"{serve_url}/v1", MODEL, "ours")
    level = asyncio.run(run_level(target, prompts, 6, RunOptions(level_timeout_s=300)))
    assert level.completed == 6 and level.errors == 0, level.error_samples
    assert level.total_output_tokens == 6 * 8
    after = level.server_after
    assert after is not None
    assert after["num_requests_running"] == 0
    assert after["num_requests_waiting"] == 0
    assert after["kv_cache_usage_perc"] == 0
    assert "num_preemptions_total" in after
