"""Base bodies of Anthropic's Messages API and OpenAI's Responses API for the fuzzer.

Two sources, half each: the request models' JSON Schemas (`MessagesRequest`,
`ResponsesRequest`, drawn by `load_tests.fuzz_schema`) with the cross-field rules the schema
cannot say repaired (`repair_messages`, `repair_responses`), and `MESSAGES_BODIES` /
`RESPONSES_BODIES`, small hand-written bodies shaped like what Claude Code and Codex send (tools,
`tool_use` / `tool_result` blocks, `function_call` / `function_call_output` items, streams,
thinking, output formats). The caller sets the output limit and the model.
"""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import strategies as st

from load_tests.fuzz_bodies import Body
from router.apis.responses.tools import DROPPED_TOOL_TYPES

WEATHER_SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}}
ANTHROPIC_TOOL = {
    "name": "get_weather",
    "description": "Weather of a city",
    "input_schema": WEATHER_SCHEMA,
}
RESPONSES_TOOL = {
    "type": "function",
    "name": "get_weather",
    "description": "Weather of a city",
    "parameters": WEATHER_SCHEMA,
}
TOOL_USE = {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}
TOOL_RESULT = {"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny"}
FUNCTION_CALL = {
    "type": "function_call",
    "call_id": "call_1",
    "name": "get_weather",
    "arguments": '{"city": "Paris"}',
}
FUNCTION_OUTPUT = {"type": "function_call_output", "call_id": "call_1", "output": "sunny"}
_ASK = {"role": "user", "content": "Weather in Paris?"}

# fmt: off
MESSAGES_BODIES: list[Body] = [
    {"system": "You are brief.", "messages": [{"role": "user", "content": "Hi"}]},
    {"system": [{"type": "text", "text": "You are a coding agent.",
                 "cache_control": {"type": "ephemeral"}}],
     "tools": [ANTHROPIC_TOOL], "tool_choice": {"type": "auto"},
     "messages": [_ASK, {"role": "assistant", "content": [TOOL_USE]},
                  {"role": "user", "content": [TOOL_RESULT]}]},
    {"tools": [ANTHROPIC_TOOL], "tool_choice": {"type": "tool", "name": "get_weather"},
     "messages": [_ASK], "stream": True},
    {"messages": [
        {"role": "user", "content": [{"type": "text", "text": "2+2?"}]},
        {"role": "assistant", "content": [{"type": "thinking", "thinking": "Add.",
                                           "signature": "sig"}, {"type": "text", "text": "4"}]},
        {"role": "user", "content": "And 3+3?"}],
     "thinking": {"type": "disabled"}, "stop_sequences": ["\n\n"],
     "metadata": {"user_id": "u1"}, "temperature": 0.5, "stream": True},
    {"tools": [ANTHROPIC_TOOL],
     "messages": [_ASK, {"role": "assistant", "content": [{"type": "text", "text": "Checking."},
                                                          TOOL_USE]},
                  {"role": "user", "content": [
                      {**TOOL_RESULT, "is_error": True,
                       "content": [{"type": "text", "text": "timeout"}]},
                      {"type": "text", "text": "Try again?"}]}]},
    {"messages": [{"role": "user", "content": "Answer in JSON."}], "top_k": 5,
     "output_config": {"format": {"type": "json_schema", "schema": WEATHER_SCHEMA}}},
]
RESPONSES_BODIES: list[Body] = [
    {"input": "Hi", "instructions": "You are brief."},
    {"input": [_ASK, FUNCTION_CALL, FUNCTION_OUTPUT], "tools": [RESPONSES_TOOL],
     "tool_choice": "auto", "stream": True},
    {"input": [{"type": "message", "role": "user",
                "content": [{"type": "input_text", "text": "Weather?"}]}],
     "tools": [RESPONSES_TOOL, {"type": "web_search"}],
     "tool_choice": {"type": "function", "name": "get_weather"}, "parallel_tool_calls": False},
    {"input": [{"role": "developer", "content": "Rules."}, _ASK,
               {"type": "reasoning", "summary": [{"type": "summary_text", "text": "Look up."}]},
               FUNCTION_CALL, FUNCTION_OUTPUT,
               {"role": "assistant", "content": [{"type": "output_text", "text": "Sunny."}]},
               {"role": "user", "content": "Thanks"}],
     "tools": [{"type": "namespace", "name": "weather", "tools": [RESPONSES_TOOL]}],
     "reasoning": {"effort": "low"}, "store": False, "stream": True},
    {"input": "Answer in JSON.", "temperature": 0.3, "metadata": {"session": "s1"},
     "text": {"format": {"type": "json_schema", "name": "out", "schema": WEATHER_SCHEMA}}},
    {"input": [{"type": "additional_tools", "tools": [RESPONSES_TOOL]}, _ASK],
     "reasoning": {"effort": "none"}, "user": "u1"},
]
# fmt: on
"""Realistic valid bodies (before the output limit and model are set)."""


def _function_names(tools: list[Any]) -> list[str]:
    return [t["name"] for t in tools if isinstance(t, dict) and isinstance(t.get("name"), str)]


_BLOCKS = {
    "user": ("text", "image", "tool_result"),
    "assistant": ("text", "tool_use", "thinking", "redacted_thinking"),
    "system": ("text",),
}
"""The blocks each role may hold (`router.apis.anthropic.history`)."""


def repair_messages(draw: st.DrawFn, body: Body) -> None:
    """Make a schema-drawn Messages body valid-ish: only the blocks each role may hold, client
    tools only, a `tool_choice` naming a declared tool, no thinking budget (it must exceed
    `max_tokens`, and base bodies stay cheap), and half the time a plain user turn instead of
    the drawn conversation."""
    for message in body["messages"]:
        if isinstance(message["content"], list):
            allowed = _BLOCKS[message["role"]]
            message["content"] = [b for b in message["content"] if b["type"] in allowed]
    tools = body.get("tools") or []
    for tool in tools:  # a client tool's `type` is absent or `custom`
        if draw(st.booleans()):
            tool["type"] = "custom"
        else:
            tool.pop("type", None)
    names = _function_names(tools)
    choice = body.get("tool_choice")
    if isinstance(choice, dict) and choice.get("type") in ("any", "tool"):
        if not names:
            body["tool_choice"] = {"type": "auto"}
        elif choice["type"] == "tool":
            choice["name"] = draw(st.sampled_from(names))
    thinking = body.get("thinking")
    if isinstance(thinking, dict) and thinking.get("type") == "enabled":
        body["thinking"] = {"type": "disabled"}
    if draw(st.booleans()):
        body["messages"] = [{"role": "user", "content": draw(st.sampled_from(["Hi", "2+2?"]))}]


def _repair_tools(tools: list[Any], draw: st.DrawFn, seen: set[str]) -> None:
    for tool in tools:
        kind = tool.get("type")
        if kind == "namespace":
            _repair_tools(tool["tools"], draw, seen)
        elif kind != "function":  # a hosted tool: one the edge drops, not one it refuses
            tool["type"] = draw(st.sampled_from(sorted(DROPPED_TOOL_TYPES)))
        elif tool["name"] in seen:
            tool["name"] = f"{tool['name']}_{len(seen)}"
        if kind == "function":
            seen.add(tool["name"])


def repair_responses(draw: st.DrawFn, body: Body) -> None:
    """Make a schema-drawn Responses body valid-ish: hosted tools of the types the edge drops,
    unique function names, a `tool_choice` naming a declared function, no
    `previous_response_id` (none is stored: the `unknown_previous_response` mutator sends
    one), and an `input` (required by the edge, optional in the schema): half the time a plain
    string or user message."""
    body.pop("previous_response_id", None)
    seen: set[str] = set()
    _repair_tools(body.get("tools") or [], draw, seen)
    items = body.get("input")
    for item in items if isinstance(items, list) else []:
        if item.get("type") == "additional_tools":
            _repair_tools(item["tools"], draw, seen)
    choice = body.get("tool_choice")
    if isinstance(choice, dict):
        if seen:
            choice["name"] = draw(st.sampled_from(sorted(seen)))
        else:
            body["tool_choice"] = "auto"
    elif choice == "required" and not seen:
        body["tool_choice"] = "auto"
    if body.get("input") is None or draw(st.booleans()):
        body["input"] = draw(st.sampled_from(["Hi", [{"role": "user", "content": "2+2?"}]]))


def realistic(draw: st.DrawFn, endpoint: str) -> Body:
    """A copy of one hand-written body of `endpoint` (`messages`, `count_tokens`,
    `responses`)."""
    bodies = RESPONSES_BODIES if endpoint == "responses" else MESSAGES_BODIES
    return copy.deepcopy(draw(st.sampled_from(bodies)))
