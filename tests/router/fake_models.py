"""Scripted stand-ins for model deployment handles, for failures a real replica cannot be made
to produce on cue (back-pressure, a hang, a server error) in fast tests.

A `FakeHandle` answers `chat.remote(request)` like a `DeploymentHandle`: an awaitable with
`cancel()`, or with `options(stream=True)` an async iterator of items with `cancel()`. Its
`info.remote()` answers unless the model is `dead`.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Literal

from pydantic import BaseModel
from ray.exceptions import ActorDiedError
from ray.serve.exceptions import BackPressureError

from deployments.protocol.errors import (
    ENGINE_ERROR,
    ENGINE_UNAVAILABLE,
    REPLICA_BUSY,
    ErrorResponse,
    OpenAIError,
    internal_error,
)

Behaviour = Literal[
    "ok",
    "slow",
    "dead",
    "backpressure",
    "crash",
    "raises",
    "error500",
    "internal",
    "engine_dead",
    "context",
    "busy",
]


class Answer(BaseModel):
    """A model's answer: which model gave it."""

    model: str


class _Call:
    """A pending call: awaitable once, async-iterable (one item) for streams, cancellable."""

    def __init__(
        self,
        produce: Callable[[], Awaitable[Any]],
        sse: bool = False,
        request: Any = None,
        preprocess: Any = None,
    ) -> None:
        self._produce = produce
        self._sent = False
        self.cancelled = False
        self.sse = sse  # the caller asked for SSE bytes after the first item
        self.request = request
        self.preprocess = preprocess  # the router's PreprocessPlan, if any

    def __await__(self) -> Any:
        return self._produce().__await__()

    def __aiter__(self) -> AsyncIterator[Any]:
        return self

    async def __anext__(self) -> Any:
        if self._sent:
            raise StopAsyncIteration
        self._sent = True
        return await self._produce()

    def cancel(self) -> None:
        self.cancelled = True


class _Method:
    def __init__(self, handle: FakeHandle, name: str) -> None:
        self.handle = handle
        self.name = name

    def remote(self, request: Any = None, sse: bool = False, preprocess: Any = None) -> _Call:
        call = _Call(lambda: self.handle.answer(self.name), sse, request, preprocess)
        self.handle.calls.append((self.name, call))
        return call


class FakeHandle:
    """A model deployment that behaves as scripted.

    Args:
        model: The model id (what `Answer.model` says).
        behaviour: `ok`; `slow` (answers after `delay_s`, probes succeed); `dead` (calls and
            probes never answer); `backpressure` (Ray's queue limit); `crash` (the replica died:
            Ray's `ActorDiedError`); `raises` (the replica's method raised for this request);
            `error500` (the engine failed before the first token: `engine_error`); `internal`
            (an unexpected failure serving this request: `internal_error`); `engine_dead` (the
            engine loop is not running: `engine_unavailable`); `context` (a 400
            context-length error); `busy` (no preparation thread free: a 429 `replica_busy`).
        delay_s: Seconds a `slow` model takes.
        probe_backpressure: probes (`info`) are refused with Ray's `BackPressureError` (the
            handle's queue is full).
    """

    def __init__(
        self,
        model: str,
        behaviour: Behaviour = "ok",
        delay_s: float = 0.0,
        probe_backpressure: bool = False,
    ) -> None:
        self.model = model
        self.app_name, self.deployment_name = "fake", model  # what DeploymentStatusView reads
        self.behaviour = behaviour
        self.delay_s = delay_s
        self.probe_backpressure = probe_backpressure
        self.calls: list[tuple[str, _Call]] = []

    def sent(self, method: str = "chat") -> list[_Call]:
        """The calls of `method` so far."""
        return [call for name, call in self.calls if name == method]

    def options(self, stream: bool = False, _by_reference: bool = True) -> FakeHandle:
        """Serve's `DeploymentHandle.options` (streams are asked for by value, over gRPC)."""
        return self

    def __getattr__(self, name: str) -> _Method:
        return _Method(self, name)

    async def answer(self, method: str) -> Any:
        if method == "info":
            if self.probe_backpressure:
                raise BackPressureError(num_queued_requests=4, max_queued_requests=4)
            if self.behaviour == "dead":
                await asyncio.Event().wait()
            return {"id": self.model, "max_model_len": 4096}
        if self.behaviour == "dead":
            await asyncio.Event().wait()
        if self.behaviour == "slow":
            await asyncio.sleep(self.delay_s)
        if self.behaviour == "backpressure":
            raise BackPressureError(num_queued_requests=4, max_queued_requests=4)
        if self.behaviour == "crash":
            raise ActorDiedError()
        if self.behaviour == "raises":
            raise RuntimeError("a bug that this request triggers")
        if self.behaviour == "error500":
            return OpenAIError("engine failed", status_code=500, code=ENGINE_ERROR).response()
        if self.behaviour == "internal":
            return internal_error("rid", "model").response()
        if self.behaviour == "engine_dead":
            return OpenAIError("no engine", status_code=503, code=ENGINE_UNAVAILABLE).response()
        if self.behaviour == "busy":
            return OpenAIError(
                "busy", status_code=429, code=REPLICA_BUSY, retry_after_s=1
            ).response()
        if self.behaviour == "context":
            return OpenAIError(
                "too long", param="messages", code="context_length_exceeded"
            ).response()
        return Answer(model=self.model)


def is_error(result: Any, status: int) -> bool:
    """Whether `result` is an `ErrorResponse` with `status`."""
    return isinstance(result, ErrorResponse) and result.status_code == status
