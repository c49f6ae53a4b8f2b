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
from ray.serve.exceptions import BackPressureError

from deployments.protocol.errors import ErrorResponse, OpenAIError

Behaviour = Literal["ok", "slow", "dead", "backpressure", "crash", "error500", "context"]


class Answer(BaseModel):
    """A model's answer: which model gave it."""

    model: str


class _Call:
    """A pending call: awaitable once, async-iterable (one item) for streams, cancellable."""

    def __init__(self, produce: Callable[[], Awaitable[Any]]) -> None:
        self._produce = produce
        self._sent = False
        self.cancelled = False

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

    def remote(self, request: Any = None) -> _Call:
        call = _Call(lambda: self.handle.answer(self.name))
        self.handle.calls.append((self.name, call))
        return call


class FakeHandle:
    """A model deployment that behaves as scripted.

    Args:
        model: The model id (what `Answer.model` says).
        behaviour: `ok`; `slow` (answers after `delay_s`, probes succeed); `dead` (calls and
            probes never answer); `backpressure` (Ray's queue limit); `crash` (the call raises);
            `error500` (a server `ErrorResponse`); `context` (a 400 context-length error).
        delay_s: Seconds a `slow` model takes.
    """

    def __init__(self, model: str, behaviour: Behaviour = "ok", delay_s: float = 0.0) -> None:
        self.model = model
        self.app_name, self.deployment_name = "fake", model  # what DeploymentStatusView reads
        self.behaviour = behaviour
        self.delay_s = delay_s
        self.calls: list[tuple[str, _Call]] = []

    def sent(self, method: str = "chat") -> list[_Call]:
        """The calls of `method` so far."""
        return [call for name, call in self.calls if name == method]

    def options(self, stream: bool = False) -> FakeHandle:
        return self

    def __getattr__(self, name: str) -> _Method:
        return _Method(self, name)

    async def answer(self, method: str) -> Any:
        if method == "info":
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
            raise RuntimeError("replica died")
        if self.behaviour == "error500":
            return OpenAIError("engine failed", status_code=500).response()
        if self.behaviour == "context":
            return OpenAIError(
                "too long", param="messages", code="context_length_exceeded"
            ).response()
        return Answer(model=self.model)


def is_error(result: Any, status: int) -> bool:
    """Whether `result` is an `ErrorResponse` with `status`."""
    return isinstance(result, ErrorResponse) and result.status_code == status
