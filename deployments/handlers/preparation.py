"""A request's CPU-heavy preparation (chat template, tokenisation, grammar compilation), run off
the replica's event loop and bounded in time, so one huge prompt or hostile schema cannot hold
up the other requests the replica is streaming."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from deployments.protocol.errors import OpenAIError

T = TypeVar("T")

PREPARE_THREADS = 2
"""Worker threads: requests prepare two at a time; a timed-out one finishes in the background
(a thread cannot be stopped) while the other thread goes on."""


class Preparer:
    """Runs preparation functions on a small thread pool with a time bound.

    Args:
        timeout_s: seconds one preparation may take (`ModelDeploymentConfig.prepare_timeout_s`).
    """

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self._pool = ThreadPoolExecutor(PREPARE_THREADS, thread_name_prefix="prepare")

    async def run(self, fn: Callable[[], T]) -> T:
        """`fn()` on the pool.

        Raises:
            OpenAIError: 400 `request_too_complex` after `timeout_s`; whatever `fn` raised.
        """
        future = asyncio.get_running_loop().run_in_executor(self._pool, fn)
        try:
            return await asyncio.wait_for(future, self.timeout_s)
        except asyncio.TimeoutError:
            raise OpenAIError(
                f"preparing this request (chat template, tokenisation, media, grammar compilation) "
                f"took over {self.timeout_s} s: send a shorter prompt or a simpler schema",
                code="request_too_complex",
            ) from None
