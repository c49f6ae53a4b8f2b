"""The Anthropic Messages API (`POST /v1/messages`, `POST /v1/messages/count_tokens`) as an
`ApiEdge` over chat completions, as Claude Code and the official `anthropic` SDK speak it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from pydantic import BaseModel

from deployments.protocol.errors import ErrorResponse
from deployments.protocol.responses import ChatCompletion
from router.apis.anthropic import errors, message, request, stream


class AnthropicEdge:
    """Translates Anthropic Messages requests onto the chat path and its answers back.

    Args:
        ping_interval_s: seconds a stream may wait for the next chat chunk before a `ping`
            event keeps the connection visibly alive.
    """

    api = "anthropic"

    def __init__(self, ping_interval_s: float = 10.0) -> None:
        if ping_interval_s <= 0:
            raise ValueError(f"ping_interval_s must be positive, not {ping_interval_s}")
        self.ping_interval_s = ping_interval_s

    async def chat_body(self, body: Any) -> dict[str, Any]:
        """See `ApiEdge.chat_body` and `router.apis.anthropic.request.chat_body`."""
        return request.chat_body(body)

    def count_body(self, body: Any) -> dict[str, Any]:
        """A `POST /tokenize` chat body for a `POST /v1/messages/count_tokens` body: the prompt
        `chat_body` renders for the same fields, so its `count` is that request's prompt tokens.

        Raises:
            OpenAIError: 400 naming the Anthropic field at fault.
        """
        return request.count_body(body)

    def count_answer(self, count: int) -> dict[str, Any]:
        """Anthropic's count_tokens answer for the `/tokenize` count."""
        return {"input_tokens": count}

    def answer(self, request: dict[str, Any], completion: ChatCompletion) -> dict[str, Any]:
        """See `ApiEdge.answer` and `router.apis.anthropic.message.message`."""
        return message.message(request, completion)

    def events(
        self, request: dict[str, Any], items: AsyncIterator[BaseModel]
    ) -> AsyncIterator[str]:
        """See `ApiEdge.events` and `router.apis.anthropic.stream.events`; `items` is closed
        when the events end or are closed (after a pending read: never `aclose` it meanwhile)."""
        return stream.events(request, items, self.ping_interval_s)

    def error_body(self, error: ErrorResponse) -> dict[str, Any]:
        """See `ApiEdge.error_body` and `router.apis.anthropic.errors.error_body`."""
        return errors.error_body(error)
