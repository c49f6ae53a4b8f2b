"""A stream's items with a beat (`None`) each time an interval passes without one, so a relay
can keep its connection visibly alive (Anthropic's `ping` events) while a model holds output
back (a tool call that its parser buffers, a long pause between steps).

Each read of the source runs as its own task, which `asyncio.wait` watches with a timeout. A
pending read is never cancelled: cancelling an async generator's `__anext__` throws into it
mid-step and ends it. When the consumer stops early, the source is closed once no read is
pending (right away, or when the pending read completes).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any, TypeVar

T = TypeVar("T")

_END = object()
"""What a read returns at the end of the source."""

_ABANDONED: set[asyncio.Task[Any]] = set()
"""Reads whose consumer has stopped: held here until they complete, as the event loop keeps
only weak references to tasks."""


async def with_beats(items: AsyncIterator[T], interval_s: float) -> AsyncGenerator[T | None, None]:
    """Relay `items`, yielding None whenever `interval_s` passes with no item.

    Args:
        items: the source; closed (its `aclose`, when it has one) when this stream ends or is
            closed.
        interval_s: seconds between beats while waiting.

    Yields:
        The items, with None between them for each interval waited.
    """
    stopped = asyncio.Event()
    read: asyncio.Task[Any] | None = None
    try:
        while True:
            read = asyncio.ensure_future(_read(items, stopped))
            while not (await asyncio.wait({read}, timeout=interval_s))[0]:
                yield None
            item, read = read.result(), None
            if item is _END:
                return
            yield item
    finally:
        stopped.set()
        if read is not None and not read.done():
            _ABANDONED.add(read)
            read.add_done_callback(_forget)
        else:
            await aclose(items)


async def _read(items: AsyncIterator[T], stopped: asyncio.Event) -> Any:
    """The next item (or `_END`); closes the source after a read its consumer abandoned."""
    try:
        return await anext(items)
    except StopAsyncIteration:
        return _END
    finally:
        if stopped.is_set():
            await aclose(items)


def _forget(read: asyncio.Task[Any]) -> None:
    _ABANDONED.discard(read)
    if not read.cancelled():
        read.exception()  # retrieved: nobody reads a failure after the consumer has gone


async def aclose(items: AsyncIterator[Any]) -> None:
    """Close `items` if it can be closed (an async generator can; a plain iterator has no
    `aclose`)."""
    close = getattr(items, "aclose", None)
    if close is not None:
        await close()
