"""Anthropic's Messages API and OpenAI's Responses API with the official SDKs over real HTTP
against real Ray Serve (configs/local.yaml's models): both go through the chat path, so their
routing headers and metrics are the chat path's."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import openai
import pytest
from serve_helpers import MODEL, extra_router, local_args

pytestmark = pytest.mark.serve

KEY, LIMITED = "agents-key", "limited-key"
WEATHER = {
    "name": "get_weather",
    "description": "The weather in a city.",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}
FUNCTION = {
    "type": "function",
    "name": WEATHER["name"],
    "description": WEATHER["description"],
    "parameters": WEATHER["input_schema"],
}
HI = [{"role": "user", "content": "Say hi."}]
ROUTING_HEADERS = ("x-ascend-router-model", "x-ascend-router-rule", "x-ascend-router-reason")


@pytest.fixture(scope="module")
def agents_url(serve_url: str) -> Iterator[str]:
    """A router with API keys (one rate-limited to one request a minute) and a 2 s response
    store, over the local app's models."""
    args = {
        **local_args(),
        "api_keys": [KEY, LIMITED],
        "rate_limits": {"keys": {"tiny": {"api_key": LIMITED, "requests_per_minute": 1}}},
        "responses_store": {"max_responses": 8, "ttl_s": 2},
    }
    with extra_router(serve_url, "agents", args) as url:
        yield url


@pytest.fixture(scope="module")
def claude(serve_url: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=serve_url, api_key="unused", max_retries=0)


def test_messages_create_and_stream_agree(claude: anthropic.Anthropic) -> None:
    # greedy, so the two answers agree (the SDK no longer types `temperature`: sent as extra)
    args: dict[str, Any] = {
        "model": MODEL,
        "max_tokens": 12,
        "messages": HI,
        "extra_body": {"temperature": 0},
    }
    # the prompt's full KV blocks in the prefix cache first: a prompt prefilled whole and one
    # prefilled from cached blocks may differ in their first greedy token under local.yaml's
    # int8 activations (one row runs the decode kernels), so both answers below start cached
    claude.messages.create(**{**args, "max_tokens": 1})
    raw = claude.messages.with_raw_response.create(**args)
    message = raw.parse()
    assert all(raw.headers.get(h) for h in ROUTING_HEADERS)
    assert message.id.startswith("msg_") and message.role == "assistant"
    assert message.stop_reason in ("end_turn", "max_tokens")
    assert message.content and message.content[0].type == "text" and message.content[0].text
    assert message.usage.input_tokens > 0 and message.usage.output_tokens > 0
    with claude.messages.stream(**args) as stream:
        kinds = [event.type for event in stream]
        streamed = stream.get_final_message()
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    assert [b.model_dump() for b in streamed.content] == [b.model_dump() for b in message.content]
    assert streamed.stop_reason == message.stop_reason
    assert streamed.usage.output_tokens == message.usage.output_tokens


def test_a_hard_coded_claude_name_routes_by_pattern(claude: anthropic.Anthropic) -> None:
    raw = claude.messages.with_raw_response.create(
        model="claude-opus-4-8[1m]", max_tokens=2, messages=HI
    )
    assert "matched model_names pattern 'claude-*'" in raw.headers["x-ascend-router-reason"]
    assert raw.parse().model in {m["model_id"] for m in local_args()["models"]}


def test_tool_use_round_trip(claude: anthropic.Anthropic) -> None:
    ask: list[Any] = [{"role": "user", "content": "What is the weather in Paris?"}]
    first = claude.messages.create(
        model=MODEL,
        max_tokens=64,
        messages=ask,
        tools=[WEATHER],  # type: ignore[list-item]
        tool_choice={"type": "tool", "name": "get_weather"},
    )
    assert first.stop_reason == "tool_use"
    use = next(b for b in first.content if b.type == "tool_use")
    assert use.id.startswith("toolu_") and use.name == "get_weather"
    assert isinstance(use.input, dict) and isinstance(use.input.get("city"), str)
    result = {"type": "tool_result", "tool_use_id": use.id, "content": "Sunny, 21 C"}
    answer = claude.messages.create(
        model=MODEL,
        max_tokens=16,
        messages=[
            *ask,
            {"role": "assistant", "content": first.content},
            {"role": "user", "content": [result]},
        ],  # type: ignore[list-item]
        tools=[WEATHER],  # type: ignore[list-item]
    )
    assert answer.stop_reason in ("end_turn", "max_tokens", "tool_use")
    assert answer.usage.input_tokens + answer.usage.cache_read_input_tokens > (
        first.usage.input_tokens + first.usage.cache_read_input_tokens  # type: ignore[operator]
    )


def test_count_tokens_equals_the_requests_prompt(claude: anthropic.Anthropic) -> None:
    args: dict[str, Any] = {
        "model": MODEL,
        "system": "You are terse.",
        "messages": [{"role": "user", "content": "Count me, please."}],
        "tools": [WEATHER],
    }
    counted = claude.messages.count_tokens(**args).input_tokens
    for _ in range(2):  # the second time, the prefix cache serves part of the prompt
        usage = claude.messages.create(max_tokens=1, **args).usage
        assert usage.input_tokens + (usage.cache_read_input_tokens or 0) == counted
    assert (usage.cache_read_input_tokens or 0) > 0


def test_cached_tokens_are_reported_by_all_three_apis(
    claude: anthropic.Anthropic, client: openai.OpenAI
) -> None:
    text = "Tell me about the sea. " * 40  # several KV blocks
    for _ in range(2):
        chat = client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": text}], max_tokens=1
        )
    assert chat.usage is not None and chat.usage.prompt_tokens_details is not None
    assert chat.usage.prompt_tokens_details.cached_tokens
    message = claude.messages.create(
        model=MODEL, max_tokens=1, messages=[{"role": "user", "content": text}]
    )
    assert message.usage.cache_read_input_tokens
    response = client.responses.create(model=MODEL, input=text, max_output_tokens=1)
    assert response.usage is not None and response.usage.input_tokens_details.cached_tokens


@pytest.mark.parametrize(
    ("status", "kind", "body", "key"),
    [
        (400, "invalid_request_error", {"model": MODEL, "messages": HI}, KEY),  # no max_tokens
        (400, "invalid_request_error", {"model": MODEL, "max_tokens": 4, "messages": []}, KEY),
        (401, "authentication_error", {"model": MODEL, "max_tokens": 4, "messages": HI}, "bad"),
        (404, "not_found_error", {"model": "no-such-model", "max_tokens": 4, "messages": HI}, KEY),
    ],
)
def test_errors_in_anthropics_shape(
    agents_url: str, status: int, kind: str, body: dict[str, Any], key: str
) -> None:
    resp = httpx.post(
        f"{agents_url}/v1/messages",
        json=body,
        headers={"x-api-key": key, "anthropic-version": "2023-06-01"},
        timeout=60,
    )
    assert resp.status_code == status, resp.text
    doc = resp.json()
    assert doc["type"] == "error" and doc["error"]["type"] == kind and doc["error"]["message"]


def test_sdk_errors_and_x_api_key(agents_url: str) -> None:
    good = anthropic.Anthropic(base_url=agents_url, api_key=KEY, max_retries=0)
    assert good.messages.create(model=MODEL, max_tokens=2, messages=HI).content is not None
    with pytest.raises(anthropic.AuthenticationError):
        anthropic.Anthropic(base_url=agents_url, api_key="nope", max_retries=0).messages.create(
            model=MODEL, max_tokens=2, messages=HI
        )
    with pytest.raises(anthropic.NotFoundError):
        good.messages.create(model="no-such-model", max_tokens=2, messages=HI)
    limited = anthropic.Anthropic(base_url=agents_url, api_key=LIMITED, max_retries=0)
    limited.messages.create(model=MODEL, max_tokens=1, messages=HI)
    with pytest.raises(anthropic.RateLimitError) as info:
        limited.messages.create(model=MODEL, max_tokens=1, messages=HI)
    assert info.value.response.headers.get("retry-after")
    assert info.value.body["error"]["type"] == "rate_limit_error"  # type: ignore[index]


def test_responses_create_and_stream_agree(client: openai.OpenAI) -> None:
    args: dict[str, Any] = {
        "model": MODEL,
        "input": "Say hi.",
        "instructions": "Be brief.",
        "max_output_tokens": 12,
        "temperature": 0,
    }
    client.responses.create(**{**args, "max_output_tokens": 1})  # cached, as for messages
    raw = client.responses.with_raw_response.create(**args)
    response = raw.parse()
    assert all(raw.headers.get(h) for h in ROUTING_HEADERS)
    assert response.id.startswith("resp_") and response.output_text
    assert response.status in ("completed", "incomplete")
    with client.responses.stream(**args) as stream:
        events = list(stream)
    kinds = [event.type for event in events]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    # the SDK's `get_final_response` knows `response.completed` only; a cut answer ends with
    # `response.incomplete`, which carries the response as well
    assert kinds[-1] in ("response.completed", "response.incomplete")
    streamed = events[-1].response  # type: ignore[union-attr]
    assert streamed.output_text == response.output_text and streamed.status == response.status
    assert streamed.usage is not None and response.usage is not None
    assert streamed.usage.output_tokens == response.usage.output_tokens


def test_responses_function_call_round_trip_and_chaining(client: openai.OpenAI) -> None:
    first = client.responses.create(
        model=MODEL,
        input="What is the weather in Paris?",
        tools=[FUNCTION],  # type: ignore[list-item]
        tool_choice="required",
        max_output_tokens=64,
    )
    calls = [item for item in first.output if item.type == "function_call"]
    assert calls and all(call.name == "get_weather" for call in calls)
    assert all(isinstance(json.loads(call.arguments), dict) for call in calls)
    outputs = [
        {"type": "function_call_output", "call_id": call.call_id, "output": "Sunny, 21 C"}
        for call in calls  # `required` lets the model call more than once
    ]
    follow = client.responses.create(
        model=MODEL,
        previous_response_id=first.id,
        input=outputs,  # type: ignore[arg-type]
        tools=[FUNCTION],  # type: ignore[list-item]
        max_output_tokens=8,
    )
    assert follow.previous_response_id == first.id
    assert follow.usage is not None and first.usage is not None
    assert follow.usage.input_tokens > first.usage.input_tokens  # the conversation came along
    assert client.responses.retrieve(follow.id).id == follow.id


def test_responses_json_schema(client: openai.OpenAI) -> None:
    schema = {
        "type": "object",
        "properties": {"answer": {"type": "string", "maxLength": 12}},
        "required": ["answer"],
        "additionalProperties": False,
    }
    response = client.responses.create(
        model=MODEL,
        input="Reply in JSON.",
        text={"format": {"type": "json_schema", "name": "reply", "schema": schema, "strict": True}},
        max_output_tokens=48,
    )
    assert isinstance(json.loads(response.output_text)["answer"], str)


def test_stored_responses_expire_and_can_be_deleted(agents_url: str) -> None:
    keyed = openai.OpenAI(base_url=f"{agents_url}/v1", api_key=KEY, max_retries=0)
    kept = keyed.responses.create(model=MODEL, input="Hi", max_output_tokens=2)
    gone = keyed.responses.create(model=MODEL, input="Hi", max_output_tokens=2)
    assert keyed.responses.retrieve(kept.id).id == kept.id
    keyed.responses.delete(gone.id)
    with pytest.raises(openai.NotFoundError):
        keyed.responses.retrieve(gone.id)
    time.sleep(2.5)  # past the store's 2 s
    with pytest.raises(openai.NotFoundError):
        keyed.responses.retrieve(kept.id)
    with pytest.raises(openai.NotFoundError):
        keyed.responses.create(
            model=MODEL, input="again", previous_response_id=kept.id, max_output_tokens=2
        )
    unstored = keyed.responses.create(model=MODEL, input="Hi", max_output_tokens=2, store=False)
    with pytest.raises(openai.NotFoundError):
        keyed.responses.retrieve(unstored.id)


def test_three_apis_route_and_count_alike(http: httpx.Client) -> None:
    """One request through each API: the same decision headers, and each counted once by the
    router's requests counter under the same labels."""
    bodies = {
        "/v1/chat/completions": {"model": "auto", "messages": HI, "max_tokens": 2},
        "/v1/messages": {"model": "auto", "messages": HI, "max_tokens": 2},
        "/v1/responses": {"model": "auto", "input": HI, "max_output_tokens": 2},
    }
    decisions = set()
    for path, body in bodies.items():
        before = _requests_counted(http)
        resp = http.post(path, json=body)
        assert resp.status_code == 200, resp.text
        decisions.add(tuple(resp.headers[h] for h in ROUTING_HEADERS))
        after = _requests_counted(http)
        changed = {k: after[k] - before.get(k, 0) for k in after if after[k] != before.get(k, 0)}
        assert len(changed) == 1 and next(iter(changed.values())) == 1, changed
    assert len(decisions) == 1, decisions


def _requests_counted(http: httpx.Client) -> dict[str, float]:
    """The router's `ascend_router_requests_total` samples, by label set."""
    counts = {}
    for line in http.get("/metrics").text.splitlines():
        if line.startswith("ascend_router_requests_total{"):
            labels, _, value = line.rpartition(" ")
            counts[labels] = float(value)
    return counts
