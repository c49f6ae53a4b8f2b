"""Anthropic Messages bodies the edge refuses (`router.apis.anthropic.protocol`, `.request`,
`.history`): each a 400 whose `param` names the Anthropic field at fault and whose message says
what is wrong and how to fix it."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from test_anthropic_request import EDGE, WEATHER, body

from deployments.protocol.errors import OpenAIError
from router.apis.anthropic import AnthropicEdge


def refusal(anthropic: Any) -> OpenAIError:
    with pytest.raises(OpenAIError) as info:
        asyncio.run(EDGE.chat_body(anthropic))
    assert info.value.status_code == 400
    return info.value


_ASSISTANT_IMAGE = {
    "role": "assistant",
    "content": [{"type": "image", "source": {"type": "url", "url": "https://x/y.png"}}],
}
_TOOL_RESULT_IMAGE = {
    "role": "user",
    "content": [
        {
            "type": "tool_result",
            "tool_use_id": "toolu_1",
            "content": [{"type": "image", "source": {"type": "url", "url": "https://x/y.png"}}],
        }
    ],
}


@pytest.mark.parametrize(
    ("change", "param", "says"),
    [
        ({"max_tokens": None}, "max_tokens", "Field required"),  # None: left out
        ({"max_tokens": 0}, "max_tokens", "greater than or equal to 1"),
        ({"model": None}, "model", "Field required"),
        ({"max_tokens": "many"}, "max_tokens", "valid integer"),
        ({"messages": []}, "messages", "at least 1 item"),
        ({"messages": [{"role": "tool", "content": "x"}]}, "messages[0].role", "'user'"),
        (
            {"messages": [{"role": "user", "content": [{"type": "document", "source": {}}]}]},
            "messages[0].content[0].type",
            "'type' must be one of 'text', 'image'",
        ),
        (
            {"messages": [{"role": "user", "content": [{"type": "tool_use", "id": "a",
                                                        "name": "f", "input": {}}]}]},
            "messages[0].content[0]",
            "user messages cannot hold a 'tool_use' block",
        ),
        ({"messages": [_ASSISTANT_IMAGE]}, "messages[0].content[0]", "cannot hold a 'image'"),
        ({"messages": [_TOOL_RESULT_IMAGE]}, "messages[0].content[0].content[0]", "tool_result"),
        (
            {"tools": [{"type": "web_search_20250305", "name": "web_search", "max_uses": 5}]},
            "tools[0].type",
            "tool type 'web_search_20250305' is an Anthropic server tool",
        ),
        ({"tools": [{"type": "bash_20250124", "name": "bash"}]}, "tools[0].type", "bash_20250124"),
        ({"tools": [{"name": "f"}]}, "tools[0].input_schema", "Field required"),
        (
            {"tools": [WEATHER], "tool_choice": {"type": "tool", "name": "get_time"}},
            "tool_choice.name",
            "names tool 'get_time', which is not in tools (get_weather)",
        ),
        ({"tool_choice": {"type": "any"}}, "tool_choice.type", "needs tools to choose from"),
        ({"tool_choice": {"type": "required"}}, "tool_choice.type", "'auto', 'any'"),
        (
            {"thinking": {"type": "enabled", "budget_tokens": 512}},
            "thinking.budget_tokens",
            "greater than or equal to 1024",
        ),
        (
            {"thinking": {"type": "enabled", "budget_tokens": 1024}, "max_tokens": 1024},
            "thinking.budget_tokens",
            "must be less than max_tokens (1024)",
        ),
        ({"thinking": {"type": "on"}}, "thinking.type", "'enabled', 'adaptive'"),
        ({"temperature": 1.5}, "temperature", "less than or equal to 1"),
        ({"stop_sequences": ["s"] * 17}, "stop_sequences", "at most 16 stop sequences"),
        ({"stream": "yes"}, "stream", "valid boolean"),
    ],
)  # fmt: skip
def test_a_bad_body_is_a_400_naming_the_anthropic_field(
    change: dict[str, Any], param: str, says: str
) -> None:
    fields = {k: v for k, v in {**body(), **change}.items() if v is not None}
    err = refusal(fields)
    assert err.param == param
    assert says in str(err)


def test_a_body_that_is_not_an_object_is_a_400() -> None:
    assert "must be a JSON object" in str(refusal(["not", "an", "object"]))


def test_count_body_refuses_what_the_messages_route_refuses() -> None:
    with pytest.raises(OpenAIError) as info:
        EDGE.count_body({"model": "m", "messages": [{"role": "tool", "content": "x"}]})
    assert info.value.param == "messages[0].role"


def test_the_ping_interval_must_be_positive() -> None:
    with pytest.raises(ValueError, match="ping_interval_s must be positive"):
        AnthropicEdge(ping_interval_s=0)
