"""What an engine front (`engine.async_engine.AsyncEngine`, `engine.process_engine.ProcessEngine`)
shares with its callers: the errors `add` raises, a queued request's record, the stream of its
outputs, and how outputs and results reach the caller's event loop from the front's own thread.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from engine.metrics import EngineMetrics
from engine.multimodal.inputs import MediaItem
from engine.outputs import RequestOutput
from engine.request_stats import RequestTimes
from engine.sampling_params import SamplingParams

T = TypeVar("T")


class EngineDead(RuntimeError):
    """The engine loop is not running (it raised, or the engine was shut down)."""


class RequestRejected(ValueError):
    """The engine refused a request when it was queued (`LLMEngine.add_request` raised)."""


@dataclass(frozen=True)
class Add:
    """One request as queued, as its caller waits on it: where its outputs go (`queue` on
    `loop`), its admission (`admitted`) and its timing record for the metrics."""

    request_id: str
    prompt_token_ids: list[int]
    params: SamplingParams
    media: tuple[MediaItem, ...]
    queue: asyncio.Queue[RequestOutput]
    loop: asyncio.AbstractEventLoop
    admitted: asyncio.Future[None]
    times: RequestTimes


class RequestStream:
    """The outputs of one queued request, until it finishes.

    Closing it before the last output (`aclose`: client gone, task cancelled) aborts the request
    in the engine, which frees its KV blocks before the next step.

    Args:
        add: the request as queued (its output queue, admission and timing records).
        abort: called with the request id to abort the request in its engine.
    """

    def __init__(self, add: Add, abort: Callable[[str], None]) -> None:
        self._add = add
        self._abort_in_engine = abort
        self._finished = False

    def __aiter__(self) -> RequestStream:
        return self

    async def __anext__(self) -> RequestOutput:
        if self._finished:
            raise StopAsyncIteration
        try:
            out = await self._add.queue.get()
        except BaseException:
            await self.aclose()
            raise
        self._finished = out.finished
        return out

    async def aclose(self) -> None:
        """Abort the request unless it has finished."""
        self._abort()

    def _abort(self) -> None:
        if not self._finished:
            self._finished = True
            self._abort_in_engine(self._add.request_id)

    def __del__(self) -> None:
        self._abort()  # dropped unread (a caller that failed before iterating): free its blocks


def hand_over(add: Add, out: RequestOutput, now: float, metrics: EngineMetrics | None) -> bool:
    """From a thread other than the caller's: record `out` (from the step that ended at `now`)
    in `metrics` and put it on the caller's queue.

    Returns:
        False when the caller's event loop is closed: nobody waits for the request any more,
        so its engine should abort it (which frees its KV blocks).
    """
    if metrics is not None:
        metrics.observe_output(add.times, out, now)
    try:
        add.loop.call_soon_threadsafe(add.queue.put_nowait, out)
    except RuntimeError:
        return False
    return True


def settle(
    loop: asyncio.AbstractEventLoop,
    future: asyncio.Future[T],
    result: T,
    error: BaseException | None,
) -> None:
    """From a thread other than the caller's: settle `future` (an admission, or a call run
    between steps) on `loop` with `result`, or with `error` if set; nothing if the caller went
    away or its event loop is closed."""

    def settle() -> None:
        if future.done():  # the caller went away
            return
        if error is None:
            future.set_result(result)
        else:
            future.set_exception(error)

    try:
        loop.call_soon_threadsafe(settle)
    except RuntimeError:  # the caller's event loop is closed
        pass
