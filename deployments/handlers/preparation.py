"""A request's CPU-heavy preparation (chat template, tokenisation, media, grammar compilation), run
off the replica's event loop and bounded in time, so one huge prompt or hostile schema cannot hold
up the other requests the replica is streaming."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from deployments.protocol.errors import REPLICA_BUSY, OpenAIError

T = TypeVar("T")

PREPARE_THREADS = 2
"""Worker threads: requests prepare two at a time; a timed-out one finishes in the background
(a thread cannot be stopped) while the other thread goes on."""


class Preparer:
    """Runs preparation functions on a small thread pool with a time bound.

    The bound counts from when a function starts on a thread, so a request is not blamed for
    the time it waited behind others; one that waits `timeout_s` for a thread is answered as an
    overloaded replica (retryable), and never runs.

    Args:
        timeout_s: seconds one preparation may take (`ModelDeploymentConfig.prepare_timeout_s`),
            and may wait for a thread.
    """

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self._pool = ThreadPoolExecutor(PREPARE_THREADS, thread_name_prefix="prepare")

    async def run(self, fn: Callable[[], T]) -> T:
        """`fn()` on the pool.

        Raises:
            OpenAIError: 429 `replica_busy` (with `Retry-After`) when no thread was free for
                `timeout_s`; 400 `request_too_complex` when `fn` ran `timeout_s`; whatever `fn`
                raised.
        """
        loop = asyncio.get_running_loop()
        started = loop.create_future()

        def timed() -> T:
            loop.call_soon_threadsafe(_settle, started)
            return fn()

        future = loop.run_in_executor(self._pool, timed)
        try:
            await asyncio.wait_for(asyncio.shield(started), self.timeout_s)
        except asyncio.TimeoutError:
            if future.cancel():  # still queued: it never runs
                raise OpenAIError(
                    f"the replica is busy preparing other requests (no preparation thread free "
                    f"for {self.timeout_s} s); retry shortly",
                    status_code=429,
                    code=REPLICA_BUSY,
                    retry_after_s=1,
                ) from None
        try:
            return await asyncio.wait_for(future, self.timeout_s)
        except asyncio.TimeoutError:
            raise OpenAIError(
                f"preparing this request (chat template, tokenisation, media decoding, grammar "
                f"compilation) took over {self.timeout_s} s: send a shorter prompt, fewer or "
                "smaller images and clips, or a simpler schema",
                code="request_too_complex",
            ) from None


def _settle(started: asyncio.Future[None]) -> None:
    if not started.done():
        started.set_result(None)
