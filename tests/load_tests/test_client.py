"""The streaming client against scripted SSE responses (httpx MockTransport, no server)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest

from load_tests.client import (
    RequestRecord,
    Target,
    check_loopback,
    request_body,
    stream_body,
    stream_request,
)


def sse(events: list[dict[str, Any]], done: bool = True) -> bytes:
    lines = [f"data: {json.dumps(e)}\n\n" for e in events]
    return ("".join(lines) + ("data: [DONE]\n\n" if done else "")).encode()


def run(handler: Any, endpoint: str = "completions", max_tokens: int = 8) -> RequestRecord:
    async def go() -> RequestRecord:
        transport = httpx.MockTransport(handler)
        async with httpx.AsyncClient(transport=transport) as client:
            target = Target("http://127.0.0.1:9/v1", "m", "t")
            return await stream_request(client, target, endpoint, "hi", "", max_tokens)

    return asyncio.run(go())


def test_completions_stream_with_usage() -> None:
    seen: dict[str, Any] = {}

    def handler(request: httpx.Request) -> httpx.Response:
        seen["path"] = request.url.path
        seen["body"] = json.loads(request.content)
        events = [{"choices": [{"text": t}]} for t in ("a", "", "b", "c")]
        events.append({"choices": [], "usage": {"completion_tokens": 5, "prompt_tokens": 3}})
        return httpx.Response(200, content=sse(events))

    rec = run(handler)
    assert rec.ok and rec.usage_reported
    assert seen["path"] == "/v1/completions"
    assert seen["body"]["ignore_eos"] is True
    assert seen["body"]["stream_options"] == {"include_usage": True}
    assert len(rec.chunk_times) == 3  # the empty-text chunk is not a token
    assert (rec.output_tokens, rec.prompt_tokens) == (5, 3)
    assert rec.ttft is not None and rec.end >= rec.chunk_times[-1]


def test_cached_tokens_replica_and_status_are_recorded() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        assert request.headers["x-session-id"] == "c-1"
        events = [{"choices": [{"delta": {"content": "x"}}]}]
        usage = {"completion_tokens": 1, "prompt_tokens": 40}
        events.append(
            {"choices": [], "usage": {**usage, "prompt_tokens_details": {"cached_tokens": 32}}}
        )
        return httpx.Response(200, content=sse(events), headers={"x-ascend-router-replica": "r1"})

    async def go() -> RequestRecord:
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
            body = request_body("chat", "m", "hi", "", 4)
            return await stream_body(
                client, "http://127.0.0.1:9/v1/chat/completions", body, {"x-session-id": "c-1"}
            )

    rec = asyncio.run(go())
    assert rec.ok and (rec.status, rec.replica, rec.cached_tokens) == (200, "r1", 32)


def test_a_429_keeps_its_retry_after() -> None:
    response = httpx.Response(429, content=b"{}", headers={"retry-after": "2"})
    rec = run(lambda request: response)
    assert (rec.status, rec.retry_after_s) == (429, 2.0) and not rec.ok


def test_chat_stream_without_usage_counts_chunks() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/v1/chat/completions"
        events = [{"choices": [{"delta": {"role": "assistant"}}]}]
        events += [{"choices": [{"delta": {"content": t}}]} for t in ("x", "y")]
        return httpx.Response(200, content=sse(events))

    rec = run(handler, endpoint="chat")
    assert rec.ok and not rec.usage_reported
    assert rec.output_tokens == 2


@pytest.mark.parametrize(
    ("response", "error"),
    [
        (httpx.Response(503, content=b"overloaded"), "HTTP 503: overloaded"),
        (httpx.Response(200, content=sse([{"error": {"message": "boom"}}])), "stream error"),
        (httpx.Response(200, content=sse([{"choices": []}])), "no content chunks"),
        (httpx.Response(200, content=b"data: {not json\n\n"), "JSONDecodeError"),
    ],
)
def test_failures_become_record_errors(response: httpx.Response, error: str) -> None:
    rec = run(lambda request: response)
    assert not rec.ok and error in (rec.error or "")


def test_event_loop_is_bounded() -> None:
    events = [{"choices": [{"text": "z"}]}] * 200
    rec = run(lambda request: httpx.Response(200, content=sse(events)), max_tokens=2)
    assert rec.error == "more than 72 stream events"


def test_network_error_is_recorded() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    rec = run(handler)
    assert rec.error is not None and rec.error.startswith("ConnectError")


@pytest.mark.parametrize(
    "url", ["http://127.0.0.1:8000/v1", "http://localhost:8090/v1/", "http://[::1]:80/v1"]
)
def test_loopback_urls_accepted(url: str) -> None:
    assert not check_loopback(url).endswith("/")


@pytest.mark.parametrize(
    "url", ["http://10.0.0.1:8000/v1", "https://api.openai.com/v1", "ftp://127.0.0.1/"]
)
def test_non_loopback_urls_rejected(url: str) -> None:
    with pytest.raises(ValueError):
        check_loopback(url)


def test_target_parse() -> None:
    t = Target.parse("http://127.0.0.1:8090/v1,smollm2,llama.cpp")
    assert (t.base_url, t.model, t.label) == ("http://127.0.0.1:8090/v1", "smollm2", "llama.cpp")
    assert Target.parse("http://127.0.0.1:1/v1,m").label == "m"
    with pytest.raises(ValueError, match="URL,MODEL"):
        Target.parse("http://127.0.0.1:1/v1")


def test_chat_body_puts_shared_prefix_in_system_message() -> None:
    body = request_body("chat", "m", "question", "prefix", 16)
    assert body["messages"][0] == {"role": "system", "content": "prefix"}
    assert body["max_tokens"] == 16 and body["temperature"] == 0.0
