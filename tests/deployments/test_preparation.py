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
