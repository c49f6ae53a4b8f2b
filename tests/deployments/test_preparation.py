"""Request preparation runs off the event loop, bounded in time."""

from __future__ import annotations

import asyncio
import time

import pytest

from deployments.handlers.preparation import Preparer
from deployments.protocol.errors import OpenAIError


def test_slow_preparation_is_a_400_and_the_loop_keeps_running() -> None:
    async def run() -> tuple[OpenAIError, int]:
        preparer = Preparer(timeout_s=0.3)
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.01)
                ticks += 1

        task = asyncio.ensure_future(ticker())
        with pytest.raises(OpenAIError) as info:
            await preparer.run(lambda: time.sleep(1.0))
        task.cancel()
        return info.value, ticks

    err, ticks = asyncio.run(run())
    assert err.status_code == 400 and err.code == "request_too_complex"
    assert ticks >= 10, "the event loop was blocked while the request prepared"


def test_preparation_errors_reach_the_caller() -> None:
    def bad() -> None:
        raise OpenAIError("bad template", param="messages")

    with pytest.raises(OpenAIError, match="bad template"):
        asyncio.run(Preparer(timeout_s=5).run(bad))


def test_the_bound_counts_from_the_start_not_the_wait() -> None:
    """A request that waited for a thread has its whole bound once it runs: 0.3 s of waiting
    plus 0.3 s of work under a 0.4 s bound is served, not a 400."""

    async def run() -> tuple[list[object], list[str]]:
        preparer = Preparer(timeout_s=0.4)
        ran: list[str] = []

        def work(name: str, seconds: float) -> str:
            ran.append(name)
            time.sleep(seconds)
            return name

        calls = [preparer.run(lambda n=n: work(n, 0.3)) for n in ("a", "b", "queued")]
        results = await asyncio.gather(*calls, return_exceptions=True)
        return results, ran

    results, ran = asyncio.run(run())
    assert results == ["a", "b", "queued"] and ran[-1] == "queued"


def test_a_request_queued_past_the_bound_is_a_429() -> None:
    async def run() -> tuple[OpenAIError, list[str]]:
        preparer = Preparer(timeout_s=0.2)
        ran: list[str] = []
        slow = [asyncio.ensure_future(preparer.run(lambda: time.sleep(0.6))) for _ in range(2)]
        await asyncio.sleep(0.05)  # both threads taken
        with pytest.raises(OpenAIError) as info:
            await preparer.run(lambda: ran.append("queued"))
        await asyncio.gather(*slow, return_exceptions=True)
        return info.value, ran

    err, ran = asyncio.run(run())
    assert (err.status_code, err.code, err.retry_after_s) == (429, "replica_busy", 1)
    assert ran == []  # refused before it ran
