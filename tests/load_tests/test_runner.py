"""Bounded concurrency and the level deadline, against an async scripted transport."""

from __future__ import annotations

import asyncio
import time

import httpx
from load_test_helpers import FakeTokenizer

from load_tests.client import RequestRecord, Target
from load_tests.runner import RunOptions, _send_all
from load_tests.workload import WorkloadSpec, build_prompts

TARGET = Target("http://127.0.0.1:9/v1", "m", "t")
BODY = b'data: {"choices": [{"text": "a"}]}\n\ndata: [DONE]\n\n'


def send(handler: object, n: int, concurrency: int, budget_s: float) -> list[RequestRecord]:
    prompts = build_prompts(WorkloadSpec(num_requests=n, input_len=4), FakeTokenizer())

    async def go() -> list[RequestRecord]:
        transport = httpx.MockTransport(handler)  # type: ignore[arg-type]
        async with httpx.AsyncClient(transport=transport) as client:
            deadline = time.perf_counter() + budget_s
            return await _send_all(client, TARGET, prompts, concurrency, RunOptions(), deadline)

    return asyncio.run(go())


def test_concurrency_is_bounded() -> None:
    state = {"now": 0, "max": 0}

    async def handler(request: httpx.Request) -> httpx.Response:
        state["now"] += 1
        state["max"] = max(state["max"], state["now"])
        await asyncio.sleep(0.01)
        state["now"] -= 1
        return httpx.Response(200, content=BODY)

    records = send(handler, n=12, concurrency=3, budget_s=10.0)
    assert all(r.ok for r in records) and len(records) == 12
    assert state["max"] == 3


def test_requests_past_the_deadline_count_as_timeouts() -> None:
    async def handler(request: httpx.Request) -> httpx.Response:
        await asyncio.sleep(30)  # far past the 0.2 s budget
        return httpx.Response(200, content=BODY)

    start = time.perf_counter()
    records = send(handler, n=4, concurrency=4, budget_s=0.2)
    assert time.perf_counter() - start < 5
    assert [r.error for r in records] == ["timeout"] * 4


def test_server_snapshot_is_none_without_vllm_metrics() -> None:
    from load_tests.server_metrics import metrics_url, snapshot

    assert metrics_url("http://127.0.0.1:8090/v1") == "http://127.0.0.1:8090/metrics"

    async def go(status: int, text: str) -> dict[str, float] | None:
        def handler(request: httpx.Request) -> httpx.Response:
            assert request.url.path == "/metrics"
            return httpx.Response(status, text=text)

        async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
            return await snapshot(client, TARGET.base_url, TARGET.model)

    assert asyncio.run(go(404, "")) is None  # e.g. llama-server without --metrics
    other = 'llamacpp:requests_processing 0\nvllm:num_requests_running{model_name="x"} 1\n'
    assert asyncio.run(go(200, other)) is None  # nothing for this model
    mine = (
        "# TYPE vllm:num_preemptions counter\n"
        'vllm:num_preemptions_total{model_name="m"} 3\n'
        'vllm:num_preemptions_created{model_name="m"} 1.7e9\n'
        "# TYPE vllm:kv_cache_usage_perc gauge\n"
        'vllm:kv_cache_usage_perc{model_name="m"} 0.0\n'
    )
    assert asyncio.run(go(200, mine)) == {"num_preemptions_total": 3.0, "kv_cache_usage_perc": 0.0}
    replicas = (
        "# TYPE vllm:num_requests_running gauge\n"
        'vllm:num_requests_running{model_name="m",replica="a"} 2\n'
        'vllm:num_requests_running{model_name="m",replica="b"} 3\n'
        "# TYPE vllm:kv_cache_usage_perc gauge\n"
        'vllm:kv_cache_usage_perc{model_name="m",replica="a"} 0.5\n'
        'vllm:kv_cache_usage_perc{model_name="m",replica="b"} 0.25\n'
    )
    summed = {"num_requests_running": 5.0, "kv_cache_usage_perc": 0.5}
    assert asyncio.run(go(200, replicas)) == summed  # counts add up, KV usage is the fullest
