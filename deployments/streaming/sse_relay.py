"""Ready SSE bytes for HTTP callers, batched, so the router relays a stream without decoding it.

A replica answering the router's HTTP path (`ModelServer.chat(..., sse=True)`) yields the first
stream item as the typed chunk (or `ErrorResponse`): the router inspects it for admission and
fallback. Every later item is `bytes` holding one or more complete SSE events, which the
router forwards untouched. Each Ray stream item costs serialisation in the replica and the
router and a message to the proxy, so chunks that are ready together travel together: each
batch takes every chunk already produced, and with `interval_s > 0` a batch is sent at most
every `interval_s`, collecting what arrives meanwhile (Ray Serve LLM's
`stream_batching_interval_ms`, ray-project/ray#52766). The first chunk is never held back
(that batching must not add to TTFT, ray-project/ray#59681), and an error item ends the stream.
With `timing`, each event of the bytes is led by the replica's timestamp comment
(`deployments.streaming.token_timing`).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator

from pydantic import BaseModel

from deployments.protocol.errors import ErrorResponse
from deployments.protocol.responses import RouterNotes
from deployments.protocol.sse import sse_event

_END = object()


async def sse_batches(
    items: AsyncIterator[BaseModel], interval_s: float, timing: bool = False
) -> AsyncIterator[BaseModel | bytes]:
    """The first item as is, then the rest as batched SSE bytes.

    Args:
        items: the typed stream (chunks, possibly ending with an `ErrorResponse`).
        interval_s: the least time between two batches after the first item (0: send whatever
            is ready whenever the consumer asks).
        timing: lead each stamped chunk's event with its timestamps (`RouterNotes.timing_comment`).

    Closing this generator (the client went away) closes `items`, so the engine request is
    aborted and its KV blocks freed.
    """
    queue: asyncio.Queue[object] = asyncio.Queue()

    async def pump() -> None:
        try:
            async for item in items:
                await queue.put(item)
        finally:
            await queue.put(_END)

    task = asyncio.create_task(pump())
    try:
        first = await queue.get()
        if first is _END:
            return
        yield first  # type: ignore[misc]
        if isinstance(first, ErrorResponse):
            return
        ended = False
        while not ended:
            batch = [await queue.get()]
            deadline = time.monotonic() + interval_s
            while True:
                while not queue.empty() and batch[-1] is not _END:
                    batch.append(queue.get_nowait())
                if batch[-1] is _END or (remaining := deadline - time.monotonic()) <= 0:
                    break
                with contextlib.suppress(asyncio.TimeoutError):
                    batch.append(await asyncio.wait_for(queue.get(), remaining))
            if batch[-1] is _END:
                batch.pop()
                ended = True
            events = [item for item in batch if isinstance(item, BaseModel)]
            failed = next((i for i, e in enumerate(events) if isinstance(e, ErrorResponse)), None)
            if failed is not None:
                events, ended = events[: failed + 1], True
            if events:
                yield "".join(_event(e, timing) for e in events).encode()
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
        aclose = getattr(items, "aclose", None)
        if aclose is not None:
            await aclose()


def _event(item: BaseModel, timing: bool) -> str:
    """One item's SSE event, led by its timestamps when `timing` and it has them."""
    comment = (
        item.timing_comment(time.monotonic()) if timing and isinstance(item, RouterNotes) else None
    )
    return sse_event(item) if comment is None else comment + sse_event(item)
