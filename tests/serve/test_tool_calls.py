"""Tool calls over real HTTP with the `openai` client, and the HTTP cases of toolcalls.json."""

from __future__ import annotations

import copy
import json
from typing import Any

import httpx
import openai
import pytest
from serve_helpers import CASES, MODEL, post_stream

pytestmark = pytest.mark.serve

TOOL_CASES = json.loads((CASES / "toolcalls.json").read_text())
HTTP_CASES = [
    c
    for c in TOOL_CASES
    if c["kind"] == "validate"
    or (c["kind"] == "tool_choice" and "messages" in c["input"]["request"])
]

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
            "additionalProperties": False,
        },
    },
}
ASK = [{"role": "user", "content": "What's the weather in Paris?"}]


def _check_call(call: Any, name: str) -> dict[str, Any]:
    assert call.type == "function" and call.function.name == name and call.id
    args = json.loads(call.function.arguments)
    assert set(args) == {"city"} and isinstance(args["city"], str)
    return args


@pytest.mark.parametrize("case", HTTP_CASES, ids=[c["id"] for c in HTTP_CASES])
def test_http_case(http: httpx.Client, case: dict[str, Any]) -> None:
    body = copy.deepcopy(case["input"]["request"])
    body["model"] = MODEL
    body.setdefault("max_tokens", 96)  # room for a whole constrained call
    # greedy unless the case samples: a sampled argument string can run past max_tokens, and a
    # call cut off there is content by design (docs/tool-calls.md), so the test would be random
    body.setdefault("temperature", 0)
    exp = case["expected"]
    resp = http.post("/v1/chat/completions", json=body)
    assert resp.status_code == exp.get("status", 200), resp.text
    data = resp.json()
    if not exp.get("accept", True):
        err = data["error"]
        assert set(err) == {"message", "type", "param", "code"}
        if "param" in exp:
            assert err["param"] == exp["param"]
        missing = exp["reason"].split("Missing: ")[-1] if "Missing: " in exp["reason"] else None
        if missing:
            assert missing in err["message"]
        return
    choice = data["choices"][0]
    calls = choice["message"].get("tool_calls") or []
    if "tool_calls" in exp and "raw" not in case["input"]:
        assert [c["function"]["name"] for c in calls] == [c["name"] for c in exp["tool_calls"]]
    if "exactly_one_call_named" in exp:
        assert [c["function"]["name"] for c in calls] == [exp["exactly_one_call_named"]]
        assert isinstance(json.loads(calls[0]["function"]["arguments"]), dict)
    if "finish_reason_any_of" in exp:
        assert choice["finish_reason"] in exp["finish_reason_any_of"]
    elif "finish_reason" in exp and exp["finish_reason"] == "tool_calls":
        assert choice["finish_reason"] == "tool_calls"
    if exp.get("finish_reason") == "stop":
        assert choice["finish_reason"] in ("stop", "length") and not calls


def test_required_tool_choice_nonstream_stream_and_follow_up(client: openai.OpenAI) -> None:
    r = client.chat.completions.create(
        model=MODEL, messages=ASK, tools=[WEATHER], tool_choice="required", temperature=0
    )
    assert r.choices[0].finish_reason == "tool_calls"
    (call,) = r.choices[0].message.tool_calls
    args = _check_call(call, "get_weather")
    chunks = list(
        client.chat.completions.create(
            model=MODEL,
            messages=ASK,
            tools=[WEATHER],
            tool_choice="required",
            temperature=0,
            stream=True,
        )
    )
    entries = [tc for ch in chunks if ch.choices for tc in ch.choices[0].delta.tool_calls or ()]
    assert entries[0].id and entries[0].function.name == "get_weather"
    assert all(e.index == 0 and e.id is None for e in entries[1:])
    assert json.loads("".join(e.function.arguments or "" for e in entries)) == args
    assert [ch.choices[0].finish_reason for ch in chunks if ch.choices][-1] == "tool_calls"
    # the call and its result anywhere in the history, then a normal answer
    history = [
        {"role": "system", "content": "You are a weather assistant."},
        *ASK,
        {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
        {"role": "tool", "tool_call_id": call.id, "content": "18 C and sunny"},
        {"role": "user", "content": "Thanks. Summarise it in one sentence."},
    ]
    follow = client.chat.completions.create(
        model=MODEL, messages=history, tools=[WEATHER], temperature=0, max_tokens=48
    )
    assert follow.choices[0].finish_reason in ("stop", "length")
    assert follow.choices[0].message.content and not follow.choices[0].message.tool_calls


def test_named_tool_with_underscored_versioned_name_streams(client: openai.OpenAI) -> None:
    tool = copy.deepcopy(WEATHER)
    tool["function"]["name"] = "get_current_weather_v2"
    named = {"type": "function", "function": {"name": "get_current_weather_v2"}}
    stream = client.chat.completions.create(
        model=MODEL, messages=ASK, tools=[tool], tool_choice=named, temperature=0, stream=True
    )
    entries = [tc for ch in stream if ch.choices for tc in ch.choices[0].delta.tool_calls or ()]
    assert entries[0].function.name == "get_current_weather_v2"
    args = json.loads("".join(e.function.arguments or "" for e in entries))
    assert set(args) == {"city"}


def test_auto_tool_choice_streams_without_error(http: httpx.Client) -> None:
    body = {"model": MODEL, "messages": ASK, "tools": [WEATHER], "stream": True, "max_tokens": 32}
    status, (events, done) = post_stream(http, "/v1/chat/completions", body)
    assert status == 200 and done
    reasons = [c["finish_reason"] for e in events for c in e["choices"] if c["finish_reason"]]
    sent_call = any(c["delta"].get("tool_calls") for e in events for c in e["choices"])
    assert reasons == ["tool_calls" if sent_call else reasons[0]] and reasons[0] in (
        "stop",
        "length",
        "tool_calls",
    )


def test_json_response_formats(client: openai.OpenAI) -> None:
    r = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": 'Reply with the JSON object {"city": "Paris"}.'}],
        response_format={"type": "json_object"},
        temperature=0,
        max_tokens=256,
    )
    content = r.choices[0].message.content
    if r.choices[0].finish_reason == "stop":  # the grammar closed the object
        assert isinstance(json.loads(content), dict)
    else:  # cut by max_tokens inside an (unbounded) string: still the start of an object
        assert r.choices[0].finish_reason == "length" and content.startswith("{"), content
    schema = {  # bounded so a tiny model cannot run past max_tokens inside a value
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 20},
            "age": {"type": "integer", "enum": [20, 30, 40, 50]},
        },
        "required": ["name", "age"],
        "additionalProperties": False,
    }
    r = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "Invent a person."}],
        response_format={"type": "json_schema", "json_schema": {"name": "p", "schema": schema}},
        temperature=0,
        max_tokens=64,
    )
    person = json.loads(r.choices[0].message.content)
    assert set(person) == {"name", "age"} and person["age"] in (20, 30, 40, 50)
    assert len(person["name"]) <= 20


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"tool_choice": "required"}, "tool_choice"),
        (
            {"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "x"}}},
            "tool_choice",
        ),
        ({"tools": [{"type": "function"}]}, "tools[0].function"),
        (
            {"response_format": {"type": "json_schema", "json_schema": True}},
            "response_format.json_schema",
        ),
        (
            {"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": 5}}}]},
            "tools[0].function.parameters",
        ),
        ({"response_format": {"type": "yaml"}}, "response_format.type"),
    ],
    ids=[
        "required-without-tools",
        "named-unknown",
        "tool-without-function",
        "json-schema-not-object",
        "parameters-not-a-schema",
        "bad-format",
    ],
)
def test_bad_tool_requests_are_400(http: httpx.Client, body: dict[str, Any], param: str) -> None:
    resp = http.post("/v1/chat/completions", json={"model": MODEL, "messages": ASK, **body})
    assert resp.status_code == 400 and resp.json()["error"]["param"] == param, resp.text


def _replayed(arguments: str, stream: bool) -> dict[str, Any]:
    call = {"id": "call_1", "type": "function", "function": {"name": "get_weather"}}
    call["function"]["arguments"] = arguments
    history = [
        *ASK,
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_1", "content": "18 C"},
    ]
    return {
        "model": MODEL,
        "messages": history,
        "tools": [WEATHER],
        "max_tokens": 2,
        "stream": stream,
    }


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
@pytest.mark.parametrize("arguments", ["[]", "null", "42"])
def test_replayed_arguments_that_are_json_but_not_an_object_are_served(
    http: httpx.Client, arguments: str, stream: bool
) -> None:
    """Issue #14: rendered as `{}` (with a warning in the replica's log), as vLLM does."""
    body = _replayed(arguments, stream)
    if stream:
        status, (events, done) = post_stream(http, "/v1/chat/completions", body)
        assert status == 200 and events and done
    else:
        resp = http.post("/v1/chat/completions", json=body)
        assert resp.status_code == 200, resp.text
        assert resp.json()["choices"][0]["finish_reason"] in ("stop", "length", "tool_calls")


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_replayed_arguments_that_are_not_json_are_400(http: httpx.Client, stream: bool) -> None:
    status, body = post_stream(http, "/v1/chat/completions", _replayed("{not json", stream))
    assert status == 400
    err = body["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert err["param"] == "messages[1].tool_calls[0].function.arguments"
