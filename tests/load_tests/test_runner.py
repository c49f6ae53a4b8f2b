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
