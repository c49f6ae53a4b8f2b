"""Anthropic Messages bodies as chat-completions bodies (`router.apis.anthropic.request`): each
field's mapping, the chat path accepting every translated body, and 400s that name the
Anthropic field at fault."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from deployments.prompting.tool_history import normalize_history
from deployments.protocol.errors import OpenAIError
from deployments.protocol.requests import ChatCompletionRequest
from deployments.protocol.tokenize import TokenizeChatRequest
from deployments.protocol.validation import parse_request
from router.apis.anthropic import AnthropicEdge

EDGE = AnthropicEdge()
WEATHER = {
    "name": "get_weather",
    "description": "The weather of a city.",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
    "cache_control": {"type": "ephemeral"},
}


def body(**fields: Any) -> dict[str, Any]:
    """A valid Anthropic body with one user message, `fields` on top."""
    return {
        "model": "m",
        "max_tokens": 256,
        "messages": [{"role": "user", "content": "Hi"}],
        **fields,
    }


def translate(anthropic: dict[str, Any]) -> dict[str, Any]:
    """The chat body, checked to be one the chat path accepts."""
    chat = asyncio.run(EDGE.chat_body(anthropic))
    parse_request(ChatCompletionRequest, chat)
    return chat


def test_a_minimal_body_becomes_a_minimal_chat_body() -> None:
    assert translate(body()) == {
        "model": "m",
        "messages": [{"role": "user", "content": "Hi"}],
        "max_tokens": 256,
    }


def test_sampling_fields_stops_user_and_stream_map_onto_chat_fields() -> None:
    chat = translate(
        body(
            temperature=0.5,
            top_p=0.9,
            top_k=40,
            stop_sequences=["END", "STOP"],
            metadata={"user_id": "u-1"},
            stream=True,
        )
    )
    assert {k: chat[k] for k in ("temperature", "top_p", "top_k", "stop", "user")} == {
        "temperature": 0.5,
        "top_p": 0.9,
        "top_k": 40,
        "stop": ["END", "STOP"],
        "user": "u-1",
    }
    assert chat["stream"] is True and chat["stream_options"] == {"include_usage": True}


def test_system_as_a_string_or_text_blocks_comes_first() -> None:
    assert translate(body(system="Be brief."))["messages"][0] == {
        "role": "system",
        "content": "Be brief.",
    }
    blocks = [{"type": "text", "text": "A", "cache_control": {"type": "ephemeral"}}]
    blocks.append({"type": "text", "text": "B"})
    assert translate(body(system=blocks))["messages"][0] == {
        "role": "system",
        "content": [{"type": "text", "text": "A"}, {"type": "text", "text": "B"}],
    }


def test_a_tool_conversation_becomes_chat_tool_calls_and_tool_messages_in_order() -> None:
    messages = [
        {"role": "user", "content": "Weather in Oslo and Paris?"},
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "Two cities.", "signature": "abc"},
                {"type": "redacted_thinking", "data": "opaque"},
                {"type": "text", "text": "Checking."},
                {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Oslo"}},
                {"type": "tool_use", "id": "toolu_2", "name": "get_weather", "input": {"city": "Paris"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Here:"},
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "Sunny"},
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_2",
                    "content": [{"type": "text", "text": "no "}, {"type": "text", "text": "data"}],
                    "is_error": True,
                },
            ],
        },
    ]  # fmt: skip
    chat = translate(body(messages=messages, tools=[WEATHER]))
    assert chat["messages"][1:] == [
        {
            "role": "assistant",
            "content": [{"type": "text", "text": "Checking."}],
            "reasoning_content": "Two cities.",
            "tool_calls": [
                {
                    "id": "toolu_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'},
                },
                {
                    "id": "toolu_2",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "toolu_1", "content": "Sunny"},
        {"role": "tool", "tool_call_id": "toolu_2", "content": "Error: no data"},
        {"role": "user", "content": [{"type": "text", "text": "Here:"}]},
    ]
    # the chat path's own history rules accept the translation
    normalize_history(parse_request(ChatCompletionRequest, chat).messages)


def test_an_assistant_turn_of_calls_only_has_null_content() -> None:
    call = {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {}}
    messages = [{"role": "user", "content": "?"}, {"role": "assistant", "content": [call]}]
    assistant = translate(body(messages=messages, tools=[WEATHER]))["messages"][1]
    assert assistant["content"] is None and assistant["tool_calls"][0]["function"] == {
        "name": "get_weather",
        "arguments": "{}",
    }


def test_images_become_image_url_parts_a_vlm_reads_and_a_text_model_refuses() -> None:
    content = [
        {"type": "text", "text": "What is this?"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBO"}},
        {"type": "image", "source": {"type": "url", "url": "https://example.com/a.jpg"}},
    ]
    chat = translate(body(messages=[{"role": "user", "content": content}]))
    assert chat["messages"][0]["content"][1:] == [
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBO"}},
        {"type": "image_url", "image_url": {"url": "https://example.com/a.jpg"}},
    ]
    messages = parse_request(ChatCompletionRequest, chat).messages
    # a multimodal replica's history keeps them as the template's image parts, in order
    [user] = normalize_history(messages, media=True)
    assert user["content"] == [
        {"type": "text", "text": "What is this?"},
        {"type": "image", "image": 0},
        {"type": "image", "image": 1},
    ]
    # a text model's replica refuses them, before any template
    with pytest.raises(OpenAIError) as info:
        normalize_history(messages)
    assert info.value.status_code == 400 and info.value.param == "messages[0].content"
    assert "'image_url' are not supported" in str(info.value)


def test_tools_become_function_tools_and_unknown_fields_are_ignored() -> None:
    chat = translate(body(tools=[WEATHER], context_management={"edits": []}, service_tier="auto"))
    assert chat["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "parameters": WEATHER["input_schema"],
                "description": "The weather of a city.",
            },
        }
    ]
    assert "tool_choice" not in chat
    custom = translate(body(tools=[{**WEATHER, "type": "custom"}]))
    assert custom["tools"] == chat["tools"]


@pytest.mark.parametrize(
    ("choice", "expected"),
    [
        ({"type": "auto"}, {"tool_choice": "auto"}),
        ({"type": "any"}, {"tool_choice": "required"}),
        (
            {"type": "tool", "name": "get_weather"},
            {"tool_choice": {"type": "function", "function": {"name": "get_weather"}}},
        ),
        ({"type": "none"}, {"tool_choice": "none"}),
        (
            {"type": "any", "disable_parallel_tool_use": True},
            {"tool_choice": "required", "parallel_tool_calls": False},
        ),
        (
            {"type": "auto", "disable_parallel_tool_use": False},
            {"tool_choice": "auto"},
        ),
    ],
)
def test_tool_choice_maps_onto_chat_tool_choice(
    choice: dict[str, Any], expected: dict[str, Any]
) -> None:
    chat = translate(body(tools=[WEATHER], tool_choice=choice))
    assert {k: chat[k] for k in ("tool_choice", "parallel_tool_calls") if k in chat} == expected


@pytest.mark.parametrize(
    ("thinking", "flag"),
    [
        ({"type": "enabled", "budget_tokens": 1024}, True),
        ({"type": "adaptive"}, True),
        ({"type": "disabled"}, False),
        (None, None),
    ],
)
def test_thinking_sets_both_prompt_encoder_flags(thinking: Any, flag: bool | None) -> None:
    chat = translate(body(max_tokens=2048, **({"thinking": thinking} if thinking else {})))
    if flag is None:
        assert "chat_template_kwargs" not in chat  # the model's own default
    else:
        assert chat["chat_template_kwargs"] == {"thinking": flag, "enable_thinking": flag}


def test_output_config_sets_effort_and_a_json_schema_response_format() -> None:
    schema = {"type": "object", "properties": {"answer": {"type": "integer"}}}
    config = {"effort": "high", "format": {"type": "json_schema", "schema": schema}}
    chat = translate(body(output_config=config))
    assert chat["reasoning_effort"] == "high"
    assert chat["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "output", "schema": schema},
    }


def test_a_trailing_assistant_turn_is_kept_for_the_template_to_continue() -> None:
    messages = [{"role": "user", "content": "Pick A or B."}, {"role": "assistant", "content": "("}]
    assert translate(body(messages=messages))["messages"][-1] == {
        "role": "assistant",
        "content": "(",
    }


def test_count_body_renders_the_prompt_of_the_same_request() -> None:
    anthropic = body(
        system="Be brief.",
        tools=[WEATHER],
        tool_choice={"type": "any"},
        thinking={"type": "enabled", "budget_tokens": 1024},
        max_tokens=4096,
        temperature=0.2,
        stream=True,
    )
    chat = translate(anthropic)
    count = EDGE.count_body({k: v for k, v in anthropic.items() if k != "max_tokens"})
    parse_request(TokenizeChatRequest, count)
    assert count == {
        k: chat[k] for k in ("model", "messages", "tools", "tool_choice", "chat_template_kwargs")
    }
    assert EDGE.count_answer(42) == {"input_tokens": 42}
