"""Responses requests as chat-completions bodies: input items, instructions, tools, formats,
reasoning, the stored conversation of `previous_response_id`, and the 400s and 404s."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from test_responses_stream import CALL, completion

from deployments.prompting.tool_history import normalize_history
from deployments.protocol.errors import OpenAIError
from deployments.protocol.requests import ChatCompletionRequest
from deployments.protocol.validation import parse_request
from router.apis.responses import ResponsesEdge, ResponseStore
from router.apis.responses.context import CONTEXT_KEY

TOOLS = [
    {
        "type": "function",
        "name": "get_weather",
        "description": "Weather of a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        "strict": True,
    }
]


class FakeClock:
    """A monotonic clock moved by hand."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def chat(edge: ResponsesEdge | None = None, **fields: Any) -> dict[str, Any]:
    """The chat body of a Responses request with `fields` (`model` set), checked to be a valid
    chat request for the chat path."""
    body = asyncio.run((edge or ResponsesEdge(ResponseStore())).chat_body({"model": "m", **fields}))
    parse_request(ChatCompletionRequest, body)
    return body


def refused(edge: ResponsesEdge | None = None, **fields: Any) -> OpenAIError:
    """The error a Responses body with `fields` gets."""
    with pytest.raises(OpenAIError) as info:
        asyncio.run((edge or ResponsesEdge(ResponseStore())).chat_body(fields))
    return info.value


def test_a_string_input_is_one_user_message_after_the_instructions() -> None:
    body = chat(
        input="Hi",
        instructions="Be brief.",
        user="u1",
        temperature=0.2,
        top_p=0.9,
        prompt_cache_key="c1",
    )
    assert body["prompt_cache_key"] == "c1"  # a session key for replica routing
    assert body["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi"},
    ]
    assert (body["model"], body["user"], body["temperature"], body["top_p"]) == (
        "m",
        "u1",
        0.2,
        0.9,
    )
    assert "stream" not in body and "tools" not in body and "response_format" not in body
    assert body[CONTEXT_KEY]["id"].startswith("resp_")


def test_message_items_keep_their_roles_and_join_text_parts() -> None:
    items = [
        {"role": "developer", "content": "Rules."},  # no `type`: an EasyInputMessage
        {"type": "message", "role": "system", "content": [{"type": "input_text", "text": "S"}]},
        {
            "role": "user",
            "content": [{"type": "input_text", "text": "a"}, {"type": "input_text", "text": "b"}],
        },
        {"role": "assistant", "content": [{"type": "output_text", "text": "Before."}]},
        {"role": "user", "content": "Next?"},
    ]
    assert chat(input=items)["messages"] == [
        {"role": "developer", "content": "Rules."},
        {"role": "system", "content": "S"},
        {"role": "user", "content": "ab"},
        {"role": "assistant", "content": "Before."},
        {"role": "user", "content": "Next?"},
    ]


def test_an_image_becomes_an_image_url_part_a_vlm_reads_and_a_text_model_refuses() -> None:
    image = {"type": "input_image", "image_url": "data:image/png;base64,AAAA", "detail": "auto"}
    items = [{"role": "user", "content": [{"type": "input_text", "text": "What is it?"}, image]}]
    converted = chat(input=items)
    [message] = converted["messages"]
    assert message["content"] == [
        {"type": "text", "text": "What is it?"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
    ]
    messages = parse_request(ChatCompletionRequest, converted).messages
    [user] = normalize_history(messages, media=True)  # a multimodal replica's history
    assert user["content"] == [
        {"type": "text", "text": "What is it?"},
        {"type": "image", "image": 0},
    ]
    with pytest.raises(OpenAIError) as info:  # a text model's
        normalize_history(messages)
    assert info.value.param == "messages[0].content" and "'image_url'" in str(info.value)
    only_file = [{"role": "user", "content": [{"type": "input_image", "file_id": "file-1"}]}]
    assert refused(model="m", input=only_file).param == "input[0].content[0].image_url"


def test_function_calls_and_outputs_are_assistant_tool_calls_and_tool_messages() -> None:
    items = [
        {"role": "user", "content": "Weather in Oslo and Paris?"},
        {
            "type": "reasoning",
            "id": "rs_1",
            "summary": [],
            "content": [{"type": "reasoning_text", "text": "Two cities."}],
        },
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "Checking."}],
        },
        {
            "type": "function_call",
            "call_id": "call_a",
            "name": "get_weather",
            "arguments": '{"city": "Oslo"}',
        },
        {
            "type": "function_call",
            "call_id": "call_b",
            "name": "get_weather",
            "arguments": '{"city": "Paris"}',
        },
        {"type": "function_call_output", "call_id": "call_a", "output": "sunny"},
        {
            "type": "function_call_output",
            "call_id": "call_b",
            "output": [{"type": "input_text", "text": "rain"}],
        },
    ]
    messages = chat(input=items, tools=TOOLS)["messages"]
    assert messages[1:] == [
        {
            "role": "assistant",
            "content": "Checking.",
            "reasoning_content": "Two cities.",
            "tool_calls": [
                {
                    "id": "call_a",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'},
                },
                {
                    "id": "call_b",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "call_a", "content": "sunny"},
        {"role": "tool", "tool_call_id": "call_b", "content": "rain"},
    ]


def test_text_after_calls_joins_their_turn_so_the_calls_stay_answered_first() -> None:
    items = [
        {"role": "user", "content": "Time?"},
        {"type": "function_call", "call_id": "c1", "name": "get_time", "arguments": "{}"},
        {"role": "assistant", "content": "Asked."},
        {"type": "function_call_output", "call_id": "c1", "output": "noon"},
        {"type": "reasoning", "summary": [{"type": "summary_text", "text": "Got it."}]},
        {"role": "assistant", "content": "Noon."},
        {"type": "reasoning", "summary": [], "encrypted_content": "opaque"},
        {"role": "assistant", "content": "Anything else?"},
    ]
    assert chat(input=items)["messages"][1:] == [
        {
            "role": "assistant",
            "content": "Asked.",
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "get_time", "arguments": "{}"},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "noon"},
        {"role": "assistant", "content": "Noon.", "reasoning_content": "Got it."},
        {"role": "assistant", "content": "Anything else?"},  # encrypted reasoning is dropped
    ]
    encrypted_only = [
        {"role": "user", "content": "Hi"},
        {"type": "reasoning", "summary": [], "content": None, "encrypted_content": "opaque"},
        {"role": "user", "content": "Still there?"},
    ]
    assert [m["role"] for m in chat(input=encrypted_only)["messages"]] == ["user", "user"]


def test_function_tools_move_under_function_and_tool_choice_follows() -> None:
    body = chat(
        input="Hi",
        tools=TOOLS,
        tool_choice={"type": "function", "name": "get_weather"},
        parallel_tool_calls=False,
    )
    spec = {k: v for k, v in TOOLS[0].items() if k != "type"}
    assert body["tools"] == [{"type": "function", "function": spec}]
    assert body["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}
    assert body["parallel_tool_calls"] is False
    assert chat(input="Hi", tools=TOOLS, tool_choice="required")["tool_choice"] == "required"
    err = refused(
        model="m", input="Hi", tools=TOOLS, tool_choice={"type": "function", "name": "nope"}
    )
    assert err.param == "tool_choice.name" and "get_weather" in str(err)


def test_codex_default_tool_types_are_dropped_with_a_warning_and_others_refused(caplog) -> None:
    tools = [
        *TOOLS,
        {"type": "local_shell"},
        {"type": "web_search"},
        {"type": "custom", "name": "apply_patch"},
    ]
    with caplog.at_level(logging.WARNING):
        body = chat(input="Hi", tools=tools)
    assert [t["function"]["name"] for t in body["tools"]] == ["get_weather"]
    assert [t["name"] for t in body[CONTEXT_KEY]["echo"]["tools"]] == ["get_weather"]
    assert "'local_shell' dropped" in caplog.text and "'custom' dropped" in caplog.text
    err = refused(
        model="m", input="Hi", tools=[*TOOLS, {"type": "file_search", "vector_store_ids": []}]
    )
    assert err.status_code == 400 and err.param == "tools[1].type" and "'file_search'" in str(err)
    only_dropped = chat(input="Hi", tools=[{"type": "web_search"}])
    assert "tools" not in only_dropped


@pytest.mark.parametrize(
    ("fmt", "expected"),
    [
        ({"type": "text"}, None),
        ({"type": "json_object"}, {"type": "json_object"}),
        (
            {"type": "json_schema", "name": "city", "schema": {"type": "object"}, "strict": True},
            {
                "type": "json_schema",
                "json_schema": {"name": "city", "schema": {"type": "object"}, "strict": True},
            },
        ),
    ],
)
def test_text_format_is_the_response_format(fmt, expected) -> None:
    body = chat(input="Hi", text={"format": fmt, "verbosity": "low"})
    assert body.get("response_format") == expected
    assert body[CONTEXT_KEY]["echo"]["text"] == {"format": fmt, "verbosity": "low"}


@pytest.mark.parametrize(
    ("effort", "thinking"), [("low", True), ("minimal", True), ("xhigh", True), ("none", False)]
)
def test_reasoning_effort_passes_on_and_turns_thinking_on_or_off(effort, thinking) -> None:
    body = chat(input="Hi", reasoning={"effort": effort, "summary": "auto"})
    assert body["reasoning_effort"] == effort
    assert body["chat_template_kwargs"] == {"thinking": thinking, "enable_thinking": thinking}
    assert "reasoning_effort" not in chat(input="Hi", reasoning={"summary": "auto"})


def test_limits_and_streaming() -> None:
    body = chat(input="Hi", max_output_tokens=64, stream=True)
    assert body["max_completion_tokens"] == 64
    assert (body["stream"], body["stream_options"]) == (True, {"include_usage": True})


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({}, "input"),
        ({"input": []}, "input"),
        ({"input": [{"content": "no role"}]}, "input[0].type"),
        ({"input": [{"type": "item_reference", "id": "x"}]}, "input[0].type"),
        ({"input": [{"role": "robot", "content": "x"}]}, "input[0].role"),
        (
            {"input": [{"type": "function_call", "call_id": "c", "name": "f", "arguments": "{"}]},
            "input[0].arguments",
        ),
        ({"input": [{"type": "function_call_output", "output": "x"}]}, "input[0].call_id"),
        (
            {"input": [{"role": "user", "content": [{"type": "input_audio"}]}]},
            "input[0].content[0].type",
        ),
        ({"input": "Hi", "max_output_tokens": 0}, "max_output_tokens"),
        ({"input": "Hi", "temperature": 3}, "temperature"),
        (
            {
                "input": "Hi",
                "tools": [{"type": "function", "name": "f", "parameters": {"type": 5}}],
            },
            "tools[0].parameters",
        ),
        (
            {"input": "Hi", "text": {"format": {"type": "json_schema", "name": "x"}}},
            "text.format.schema",
        ),
        ({"input": "Hi", "text": {"format": {"type": "yaml"}}}, "text.format.type"),
        ({"input": "Hi", "reasoning": {"effort": "extreme"}}, "reasoning.effort"),
        ({"input": "Hi", "tool_choice": {"type": "web_search"}}, "tool_choice.type"),
        ({"input": "Hi", "stream": "yes"}, "stream"),
    ],
)
def test_bad_bodies_are_400_naming_the_field(fields, param) -> None:
    err = refused(model="m", **fields)
    assert (err.status_code, err.param) == (400, param), str(err)


def test_a_body_that_is_not_an_object_is_400() -> None:
    with pytest.raises(OpenAIError) as info:
        asyncio.run(ResponsesEdge(ResponseStore()).chat_body(["input"]))
    assert info.value.status_code == 400


def test_previous_response_id_continues_the_stored_conversation_without_its_instructions() -> None:
    edge = ResponsesEdge(ResponseStore())
    first = chat(edge, input="Weather in Oslo?", instructions="Old rules.", tools=TOOLS)
    answered = edge.answer(
        first, completion("Checking.", reasoning="Look it up.", calls=[CALL], finish="tool_calls")
    )
    output = {"type": "function_call_output", "call_id": "call_1", "output": "noon"}
    second = chat(
        edge, input=[output], previous_response_id=answered["id"], instructions="New rules."
    )
    assert second["messages"] == [
        {"role": "system", "content": "New rules."},
        {"role": "user", "content": "Weather in Oslo?"},
        {
            "role": "assistant",
            "content": "Checking.",
            "reasoning_content": "Look it up.",
            "tool_calls": [CALL],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "noon"},
    ]
    answered_2 = edge.answer(second, completion("Noon."))
    assert answered_2["previous_response_id"] == answered["id"]
    third = chat(edge, input="Thanks", previous_response_id=answered_2["id"])
    assert [m["role"] for m in third["messages"]] == [
        "user",
        "assistant",
        "tool",
        "assistant",
        "user",
    ]
    assert third["messages"][3] == {"role": "assistant", "content": "Noon."}


def test_store_false_is_answered_but_not_kept() -> None:
    edge = ResponsesEdge(ResponseStore())
    body = chat(edge, input="Hi", store=False)
    answered = edge.answer(body, completion())
    assert answered["store"] is False and len(edge.store) == 0
    err = refused(edge, model="m", input="Again", previous_response_id=answered["id"])
    assert (err.status_code, err.param, err.code) == (404, "previous_response_id", "not_found")
    assert err.response().body()["error"]["type"] == "invalid_request_error"


def test_unknown_or_expired_ids_are_404_in_openai_shape() -> None:
    clock = FakeClock()
    edge = ResponsesEdge(ResponseStore(max_entries=8, ttl_s=60, clock=clock))
    answered = edge.answer(chat(edge, input="Hi"), completion())
    assert edge.get(answered["id"]) == answered
    clock.now += 60
    for call in (edge.get, edge.delete):
        with pytest.raises(OpenAIError) as info:
            call(answered["id"])
        assert (info.value.status_code, info.value.param, info.value.code) == (
            404,
            "response_id",
            "not_found",
        )
    err = refused(edge, model="m", input="Hi", previous_response_id="resp_unknown")
    assert (err.status_code, err.param) == (404, "previous_response_id")
    assert edge.error_body(err.response()) == err.response().body()


def test_delete_forgets_a_response() -> None:
    edge = ResponsesEdge(ResponseStore())
    answered = edge.answer(chat(edge, input="Hi"), completion())
    assert edge.delete(answered["id"]) == {
        "id": answered["id"],
        "object": "response",
        "deleted": True,
    }
    with pytest.raises(OpenAIError):
        edge.get(answered["id"])
