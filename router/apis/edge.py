"""The contract of an API served through the chat-completions path (Anthropic Messages, OpenAI
Responses).

An edge turns its API's request body into a chat-completions body, and the chat path's answer
(a `ChatCompletion`, or a stream of `ChatCompletionChunk`s ending in usage) back into its API's
shapes. Everything between the two (API keys, rate limits, validation of the chat request,
preprocessing, the policy router and its fallbacks, the family's tool-call parser, reasoning
separation, constrained decoding, metrics, request ids) is the chat path's own: `router.ingress`
sends the translated body through `Gateway.route("chat", ...)` like any chat request.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, Protocol

from pydantic import BaseModel

from deployments.protocol.errors import ErrorResponse
from deployments.protocol.responses import ChatCompletion


class ApiEdge(Protocol):
    """One API translated onto chat completions."""

    api: str
    """The API's name in logs (`anthropic`, `responses`)."""

    async def chat_body(self, body: Any) -> dict[str, Any]:
        """Validate an API request body and translate it into a chat-completions body.

        Args:
            body: the parsed JSON body (any JSON value: it is validated here).

        Returns:
            A `/v1/chat/completions` body (plain JSON types); when the request streams, with
            `stream: true` and `stream_options: {"include_usage": true}`.

        Raises:
            OpenAIError: 4xx naming the field at fault in this API's terms (the ingress answers
                it through `error_body`); 404 for an unknown stored id.
        """
        ...

    def answer(self, request: dict[str, Any], completion: ChatCompletion) -> dict[str, Any]:
        """The API's JSON response for a non-streamed chat answer.

        Args:
            request: the chat body `chat_body` returned for this request.
            completion: the chat path's answer.
        """
        ...

    def events(
        self, request: dict[str, Any], items: AsyncIterator[BaseModel]
    ) -> AsyncIterator[str]:
        """The API's server-sent events for a streamed chat answer.

        Args:
            request: the chat body `chat_body` returned for this request.
            items: `ChatCompletionChunk`s (the last one carries `usage`), possibly ending in an
                `ErrorResponse` (a failure mid-stream), which becomes the API's error event.

        Yields:
            SSE text, each `event: <type>\\ndata: <json>\\n\\n`, through the API's final event.
        """
        ...

    def error_body(self, error: ErrorResponse) -> dict[str, Any]:
        """An error in the API's own JSON shape (the HTTP status stays `error.status_code`)."""
        ...
