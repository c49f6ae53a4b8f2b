"""HTTP answers of the APIs served through the chat path (`router.apis.edge`): the routed chat
answer rendered in the API's shapes, with the same decision headers as a chat completion."""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, AsyncIterator
from functools import partial
from typing import Any

from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel

from deployments.protocol.errors import ErrorResponse, OpenAIError
from deployments.protocol.responses import ChatCompletion
from router.apis.edge import ApiEdge
from router.dispatch import Routed
from router.http_errors import error_json
from router.model_stream import ModelStream
from router.openai_answers import routed_answer


class EdgeJSONResponse(JSONResponse):
    """JSON that may echo request strings holding lone UTF-16 surrogates (a Response's
    `metadata` or `user`, an error naming a declared tool), which JSON escapes can carry and
    UTF-8 cannot: the body is UTF-8, with `\\uXXXX` escapes instead when it would not encode."""

    def render(self, content: Any) -> bytes:
        """`content` as compact JSON bytes."""
        try:
            return super().render(content)
        except UnicodeEncodeError:
            return json.dumps(content, allow_nan=False, separators=(",", ":")).encode()


def edge_error(
    edge: ApiEdge, err: ErrorResponse | OpenAIError, headers: dict[str, str] | None = None
) -> JSONResponse:
    """An error in `edge`'s JSON shape, with its HTTP status (and `Retry-After` for a 429)."""
    return error_json(err, headers, edge.error_body, EdgeJSONResponse)


async def _relay(edge: ApiEdge, chat: dict[str, Any], stream: ModelStream) -> AsyncIterator[str]:
    """`edge`'s events for a routed stream; the model request ends with the client (closing the
    stream cancels the model call, which also ends a read the edge has pending)."""
    try:
        async for event in edge.events(chat, _typed(stream.items())):
            yield event
    finally:
        stream.close()


async def _typed(items: AsyncGenerator[BaseModel | bytes, None]) -> AsyncIterator[BaseModel]:
    try:
        async for item in items:
            assert isinstance(item, BaseModel), "an API edge routes with typed chunks, not bytes"
            yield item
    finally:
        await items.aclose()  # `events` closes this generator with no read pending on it


def edge_answer(edge: ApiEdge, chat: dict[str, Any], outcome: Routed | ErrorResponse) -> Response:
    """The HTTP answer to a routed chat request that came through `edge`.

    Args:
        edge: the API the request came through.
        chat: the chat body `edge.chat_body` made of it.
        outcome: what `Gateway.route("chat", ...)` answered (routed with typed chunks).

    Returns:
        JSON or an SSE stream in the API's shapes, or the API's error, with the decision
        headers of `Routed.headers`.
    """

    def answer(result: Any, headers: dict[str, str]) -> Response:
        assert isinstance(result, ChatCompletion), f"a chat route answered {type(result).__name__}"
        return EdgeJSONResponse(edge.answer(chat, result), headers=headers)

    return routed_answer(
        outcome,
        partial(edge_error, edge),
        lambda stream: _relay(edge, chat, stream),
        answer,
    )
