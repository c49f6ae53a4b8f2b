"""The official `anthropic` client reading the edge's answers over a mocked HTTP transport: the
JSON message, the SSE stream (`messages.stream(...).get_final_message()`), an error body, and an
error event mid-stream, each parsed by the SDK itself."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import anthropic
import httpx2
import pytest
from test_anthropic_stream import CHUNKS, WHOLE, chunk, comparable, source

from deployments.protocol.errors import OpenAIError
from router.apis.anthropic import AnthropicEdge

EDGE = AnthropicEdge()
ARGS: dict[str, Any] = {
    "model": "m",
    "max_tokens": 100,
    "messages": [{"role": "user", "content": "Weather in Oslo?"}],
}


def client(answer: Callable[[dict[str, Any]], httpx2.Response]) -> anthropic.Anthropic:
    """A client whose requests `answer` serves (the edge's translation of the body in hand)."""

    def handle(request: httpx2.Request) -> httpx2.Response:
        chat = asyncio.run(EDGE.chat_body(json.loads(request.content)))
        return answer(chat)

    transport = httpx2.MockTransport(handle)
    return anthropic.Anthropic(
        api_key="unused",
        base_url="http://router.test",
        http_client=httpx2.Client(transport=transport),
        max_retries=0,
    )


def sse_response(chat: dict[str, Any], items: list[Any]) -> httpx2.Response:
    async def texts() -> str:
        return "".join([t async for t in EDGE.events(chat, source(items))])

    headers = {"content-type": "text/event-stream"}
    return httpx2.Response(200, text=asyncio.run(texts()), headers=headers)


def test_the_sdk_reads_the_message_and_folds_the_stream_into_the_same_one() -> None:
    def answer(chat: dict[str, Any]) -> httpx2.Response:
        if chat.get("stream"):
            return sse_response(chat, list(CHUNKS))
        return httpx2.Response(200, json=EDGE.answer(chat, WHOLE))

    sdk = client(answer)
    whole = sdk.messages.create(**ARGS)
    with sdk.messages.stream(**ARGS) as stream:
        final = stream.get_final_message()
    assert [b.type for b in whole.content] == ["thinking", "text", "tool_use", "tool_use"]
    assert whole.stop_reason == final.stop_reason == "tool_use"
    assert comparable(final.to_dict()) == comparable(whole.to_dict())


@pytest.mark.parametrize(
    ("status", "exception"),
    [
        (400, anthropic.BadRequestError),
        (404, anthropic.NotFoundError),
        (429, anthropic.RateLimitError),
        (503, anthropic.InternalServerError),
    ],
)
def test_the_sdk_raises_its_own_error_for_an_error_body(
    status: int, exception: type[anthropic.APIStatusError]
) -> None:
    error = OpenAIError("what went wrong", status_code=status).response()

    def answer(chat: dict[str, Any]) -> httpx2.Response:
        return httpx2.Response(status, json=EDGE.error_body(error))

    with pytest.raises(exception) as info:
        client(answer).messages.create(**ARGS)
    assert info.value.status_code == status
    assert info.value.body == EDGE.error_body(error)


def test_the_sdk_raises_on_an_error_event_mid_stream() -> None:
    failure = OpenAIError("model m failed mid-stream", status_code=500).response()

    def answer(chat: dict[str, Any]) -> httpx2.Response:
        return sse_response(
            chat, [chunk(role="assistant", content=""), chunk(content="Hi"), failure]
        )

    texts: list[str] = []
    with pytest.raises(anthropic.APIStatusError) as info:
        with client(answer).messages.stream(**ARGS) as stream:
            for text in stream.text_stream:
                texts.append(text)
    assert texts == ["Hi"]
    assert "model m failed mid-stream" in str(info.value)
