"""A stream from one model whose first item has arrived: the rest of its items, bounded by the
inter-token timeout, and its end.

A stream that yields nothing for `inter_token_timeout_s` is cancelled (the replica aborts the
engine request and frees its KV blocks) and ends with an error item, as does one whose call
breaks (`deployments.protocol.error_stream`). No other model can take over: tokens have gone to
the client.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable

from pydantic import BaseModel
from ray.serve.handle import DeploymentResponseGenerator

from deployments.protocol.error_stream import end_on_failure
from deployments.protocol.errors import ErrorResponse
from deployments.protocol.request_id import current_request_id
from deployments.streaming.token_timing import relay_comment
from router.http_errors import mid_stream_error


class ModelStream:
    """A started stream from one model.

    Args:
        model: The model id the request named (a served model or a LoRA adapter).
        first: The first item (a chunk, or an `ErrorResponse`).
        response: The handle's stream, for the remaining items.
        done: Called once when the stream ends, fails or is closed.
        inter_token_timeout_s: Seconds the stream may go without an item.
        timing: The caller asked for per-token timestamps: `relay_comment` stamps each item
            (`deployments.streaming.token_timing`).
    """

    def __init__(
        self,
        model: str,
        first: BaseModel,
        response: DeploymentResponseGenerator,
        done: Callable[[], None],
        inter_token_timeout_s: float,
        timing: bool = False,
    ) -> None:
        self.model = model
        self.first = first
        self._response = response
        self._done: Callable[[], None] | None = done
        self._timeout_s = inter_token_timeout_s
        self.timing = timing
        self._received = 0.0

    async def items(self) -> AsyncGenerator[BaseModel | bytes, None]:
        """The first item, then the rest; a failure or a stall mid-stream becomes a final
        error item (and the model's request is cancelled)."""
        try:
            where = f"the stream from {self.model}"
            async for item in end_on_failure(self._all(), where, self._failure):
                yield item
        finally:
            self.close()

    def close(self) -> None:
        """Stop the stream (the model replica aborts the request) and stop counting it."""
        if self._done is not None:
            # cancelling reaches the model replica, which aborts and frees the KV blocks
            self._response.cancel()
            self._done()
            self._done = None

    async def _all(self) -> AsyncIterator[BaseModel | bytes]:
        yield self.first
        while True:
            try:
                item = await asyncio.wait_for(anext(self._response), self._timeout_s)
            except StopAsyncIteration:
                return
            self._received = time.monotonic()
            yield item

    def relay_comment(self) -> bytes:
        """The router's timestamp comment for the item taken last, sent now."""
        return relay_comment(self._received)

    def _failure(self, exc: Exception) -> ErrorResponse:
        if isinstance(exc, asyncio.TimeoutError):
            return mid_stream_error(self.model, f"no output for {self._timeout_s} s")
        return mid_stream_error(self.model, f"the stream broke (request {current_request_id()})")
