"""Fuzz mutators of the Anthropic Messages and OpenAI Responses bodies (registered in
`fuzz_mutators.MUTATORS`): content blocks and input items of the wrong type, in the wrong role
or without their call, thinking and output configs, tools and tool choices, and a
`previous_response_id` the server never stored."""

from __future__ import annotations

import copy
import random
from typing import Any

from load_tests.fuzz_agent_bodies import (
    ANTHROPIC_TOOL,
    FUNCTION_CALL,
    FUNCTION_OUTPUT,
    RESPONSES_TOOL,
    TOOL_RESULT,
    TOOL_USE,
)
from load_tests.fuzz_bodies import Body, Mutator, coin, pick

_ASK = {"role": "user", "content": "Weather in Paris?"}
_IMAGE = {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.png"}}
_CALLED = {"role": "assistant", "content": [TOOL_USE]}


def _user(*blocks: Any) -> dict[str, Any]:
    return {"role": "user", "content": list(blocks)}


# fmt: off
BAD_BLOCKS: list[Any] = [
    _user({"type": "document", "source": {"type": "text", "data": "x"}}),
    _user({"type": "server_tool_use", "id": "s", "name": "web_search", "input": {}}),
    _user({"type": "TEXT", "text": "hi"}), _user({"type": None, "text": "hi"}), _user({}),
    _user("text"), _user({"type": ["text"], "text": "hi"}), _user({"type": "text", "text": 1}),
    _user({"type": "image", "source": {"type": "base64", "media_type": "image/bmp", "data": "A"}}),
    _user({"type": "image", "source": {"type": "file", "file_id": "f"}}),
    _user({"type": "image", "source": {"type": "url", "url": ""}}),
    _user(TOOL_USE), _user({"type": "thinking", "thinking": "hm"}),
    {"role": "assistant", "content": [TOOL_RESULT]}, {"role": "assistant", "content": [_IMAGE]},
    {"role": "system", "content": [TOOL_USE]}, {"role": "tool", "content": "sunny"},
    {"role": "developer", "content": "Rules."}, {"role": "user", "content": None},
    {"role": "assistant", "content": [{**TOOL_USE, "input": "x"}]},
    {"role": "assistant", "content": [{**TOOL_USE, "input": [1]}]},
    {"role": "assistant", "content": [{**TOOL_USE, "id": ""}]},
    {"role": "assistant", "content": [{"type": "thinking", "thinking": "x", "signature": 1}]},
    _user({**TOOL_RESULT, "content": [_IMAGE]}), _user({**TOOL_RESULT, "content": 1}),
    _user({**TOOL_RESULT, "content": [TOOL_USE]}), _user({**TOOL_RESULT, "is_error": "yes"}),
]
"""A turn whose blocks are of an unknown type, malformed, or in a role that cannot hold them."""
SYSTEMS: list[Any] = [
    [_IMAGE], [{"type": "text"}], [TOOL_USE], 1, {"type": "text", "text": "x"}, ["x"], [None],
]
HISTORIES: list[list[Any]] = [
    [_user(TOOL_RESULT)],  # a tool_result that answers no tool_use
    [_ASK, _CALLED, {"role": "user", "content": "and?"}],  # a tool_use never answered
    [_ASK, _CALLED, _user({**TOOL_RESULT, "tool_use_id": "toolu_9"})],
    [_ASK, _CALLED, _user(TOOL_RESULT, TOOL_RESULT)],
    [_ASK, {"role": "assistant", "content": [TOOL_USE, TOOL_USE]}, _user(TOOL_RESULT)],
    [_ASK, _CALLED],  # ends on the assistant's call (a prefill)
]
THINKING: list[Any] = [
    {"type": "enabled", "budget_tokens": 1023}, {"type": "enabled"},
    {"type": "enabled", "budget_tokens": 4096}, {"type": "enabled", "budget_tokens": "2048"},
    {"type": "enabled", "budget_tokens": 2**63}, {"type": "enabled", "budget_tokens": -1},
    {"type": "on"}, {"type": None}, {"budget_tokens": 2048}, "enabled", True, [], {},
    {"type": "adaptive", "budget_tokens": "x"}, {"type": "disabled"},
]
OUTPUT_CONFIGS: list[Any] = [
    {"effort": "extreme"}, {"effort": 1}, {"format": {"type": "json_schema"}},
    {"format": {"type": "json_schema", "schema": {"type": "bogus"}}},
    {"format": {"type": "json_object"}}, {"format": {"type": "json_schema", "schema": []}},
    {"effort": "max", "format": None}, "json", [],
]
ANTHROPIC_TOOLS: list[Any] = [
    {"type": "web_search_20250305", "name": "web_search", "max_uses": 5},
    {"type": "bash_20250124", "name": "bash"}, {"type": "function", "function": ANTHROPIC_TOOL},
    {"name": "get_weather"}, {**ANTHROPIC_TOOL, "input_schema": "x"},
    {**ANTHROPIC_TOOL, "input_schema": []}, {**ANTHROPIC_TOOL, "input_schema": {"type": "bogus"}},
    {**ANTHROPIC_TOOL, "input_schema": {"type": "object", "properties": []}},
    {**ANTHROPIC_TOOL, "name": ""}, {**ANTHROPIC_TOOL, "name": 1}, {**ANTHROPIC_TOOL, "type": ""},
    "get_weather", None,
]
ANTHROPIC_CHOICES: list[Any] = [
    {"type": "any"}, {"type": "tool", "name": "nope"}, {"type": "tool"}, "auto", "any", None, [],
    {"type": "tool", "name": ""}, {"type": "function", "function": {"name": "get_weather"}},
    {"type": "auto", "disable_parallel_tool_use": "yes"}, {"type": "required"}, {"type": "none"},
]
# fmt: on


def mutate_bad_blocks(rng: random.Random, body: Body, endpoint: str) -> Body:
    """Content blocks of unknown type, malformed or in the wrong role; a bad `system`; a
    `tool_result` without its `tool_use`, a call never answered, duplicated calls or results."""
    variant = rng.randint(0, 4)
    if variant == 0:
        body["system"] = pick(rng, SYSTEMS)
    elif variant == 1:
        body["messages"] = pick(rng, HISTORIES)
    else:
        turn = pick(rng, BAD_BLOCKS)
        body["messages"] = [_ASK, turn] if turn["role"] == "assistant" and coin(rng) else [turn]
    if coin(rng):
        body["tools"] = [copy.deepcopy(ANTHROPIC_TOOL)]
    return body


def mutate_bad_thinking(rng: random.Random, body: Body, endpoint: str) -> Body:
    """A `thinking` config of the wrong shape, under 1024 tokens or not under `max_tokens`; a
    bad `output_config` (effort, format)."""
    if coin(rng):
        body["thinking"] = pick(rng, THINKING)
    else:
        body["output_config"] = pick(rng, OUTPUT_CONFIGS)
    return body


def mutate_bad_anthropic_tools(rng: random.Random, body: Body, endpoint: str) -> Body:
    """Server tools, OpenAI-shaped or malformed tools and schemas; a `tool_choice` that names no
    declared tool, needs tools where there are none, or has the wrong shape."""
    tools = [copy.deepcopy(ANTHROPIC_TOOL)] if coin(rng) else []
    if coin(rng):
        tools.append(pick(rng, ANTHROPIC_TOOLS))
    body["tools"] = tools
    if not tools or coin(rng):
        body["tool_choice"] = pick(rng, ANTHROPIC_CHOICES)
    return body


_DEEP = 3000
"""Nesting of a `function_call`'s arguments: deeper than Python's `json` recurses."""
# fmt: off
BAD_ITEMS: list[Any] = [
    {"type": "computer_call", "call_id": "c"}, {"type": "file_search_call", "id": "f"},
    {"type": "item_reference", "id": "msg_1"}, {"type": None, "content": "x"}, {"content": "x"},
    {"type": "message", "role": "tool", "content": "x"}, {"type": "message", "role": "user"},
    {"role": "user", "content": None}, {"role": "user", "content": [{"type": "text", "text": "x"}]},
    {"role": "user", "content": [{"type": "output_text"}]}, {"role": "user", "content": [{}]},
    {"role": "user", "content": [{"type": "input_image"}]},
    {"role": "user", "content": [{"type": "input_image", "file_id": "file_1"}]},
    {"role": "user", "content": [{"type": "input_file", "file_id": "file_1"}]},
    {"role": "assistant", "content": [{"type": "input_image", "image_url": "https://x/y.png"}]},
    {**FUNCTION_CALL, "arguments": "{not json"}, {**FUNCTION_CALL, "arguments": {"city": "x"}},
    {**FUNCTION_CALL, "arguments": "[" * _DEEP + "]" * _DEEP},
    {**FUNCTION_CALL, "call_id": ""}, {**FUNCTION_CALL, "call_id": 1},
    {**FUNCTION_CALL, "name": ""},
    {**FUNCTION_OUTPUT, "output": None}, {**FUNCTION_OUTPUT, "output": [{"type": "input_file"}]},
    {"type": "custom_tool_call", "call_id": "c", "name": "apply_patch"},
    {"type": "reasoning", "summary": "x"}, {"type": "reasoning", "encrypted_content": "gAAA"},
    {"type": "additional_tools", "tools": "x"}, {"type": "additional_tools"},
]
"""Input items of unknown type, malformed, or with parts their role cannot hold."""
CALL_HISTORIES: list[list[Any]] = [
    [FUNCTION_OUTPUT],  # an output that answers no call
    [_ASK, FUNCTION_CALL, {"role": "user", "content": "and?"}],  # a call never answered
    [_ASK, FUNCTION_CALL, {**FUNCTION_OUTPUT, "call_id": "call_9"}],
    [_ASK, FUNCTION_CALL, FUNCTION_OUTPUT, FUNCTION_OUTPUT],
    [_ASK, FUNCTION_CALL, FUNCTION_CALL, FUNCTION_OUTPUT],
    [FUNCTION_CALL, FUNCTION_OUTPUT],
]
RESPONSE_IDS: list[Any] = [
    "resp_0123456789abcdef0123456789abcdef", "resp_", "", "../../etc/passwd", "resp_" + "a" * 5000,
    "msg_1", 1, [], {"id": "resp_1"},
]
RESPONSES_TOOLS: list[Any] = [
    {"type": "file_search", "vector_store_ids": ["vs_1"]}, {"type": "computer_use_preview"},
    {"type": "code_interpreter", "container": {"type": "auto"}}, {"type": "image_generation"},
    {"type": "mcp", "server_label": "x", "server_url": "https://x"}, {"type": ""}, {"type": 1},
    {"type": "function", "function": {"name": "get_weather"}}, {"type": "function", "name": ""},
    {**RESPONSES_TOOL, "parameters": {"type": "bogus"}}, {**RESPONSES_TOOL, "parameters": []},
    {"type": "namespace", "name": "ns",
     "tools": [{"type": "namespace", "name": "in", "tools": []}]},
    {"type": "namespace", "name": "ns", "tools": [RESPONSES_TOOL, {"type": "file_search"}]},
    {"type": "namespace", "name": "", "tools": "x"}, RESPONSES_TOOL, "get_weather", None,
]
RESPONSES_CHOICES: list[Any] = [
    {"type": "function", "name": "nope"}, {"type": "function"}, "any", {"type": "web_search"},
    {"type": "function", "function": {"name": "get_weather"}}, {"type": "allowed_tools"}, 1,
]
TEXT_CONFIGS: list[Any] = [
    {"format": {"type": "json_schema", "schema": {"type": "object"}}},
    {"format": {"type": "json_schema", "name": "x", "schema": {"type": "bogus"}}},
    {"format": {"type": "json_schema", "name": "", "schema": {}}}, {"format": {"type": "xml"}},
    {"format": "json"}, "json", {"verbosity": "extreme"},
]
REASONINGS: list[Any] = [
    {"effort": "extreme"}, {"effort": 1}, {"summary": "long"}, "high", [], {"effort": None},
]
# fmt: on


def mutate_bad_items(rng: random.Random, body: Body, endpoint: str) -> Body:
    """Input items of unknown type or malformed (non-JSON or deeply nested arguments, empty
    call ids, parts a role cannot hold); a `function_call_output` without its call, a call never
    answered, duplicated calls or outputs."""
    if coin(rng):
        body["input"] = pick(rng, CALL_HISTORIES)
    else:
        item = pick(rng, BAD_ITEMS)
        body["input"] = [_ASK, item] if coin(rng) else [item]
    if coin(rng):
        body["tools"] = [copy.deepcopy(RESPONSES_TOOL)]
    return body


def mutate_unknown_previous_response(rng: random.Random, body: Body, endpoint: str) -> Body:
    """A `previous_response_id` the server never stored (a 404), or one of the wrong type."""
    body["previous_response_id"] = pick(rng, RESPONSE_IDS)
    if coin(rng):
        body["store"] = pick(rng, [False, True, "no"])
    return body


def mutate_bad_responses_tools(rng: random.Random, body: Body, endpoint: str) -> Body:
    """Hosted tools the edge refuses, chat-shaped or malformed tools, bad namespaces; a
    `tool_choice` naming no declared function; a bad `text.format` or `reasoning`."""
    variant = rng.randint(0, 3)
    if variant == 0:
        body["tools"] = [copy.deepcopy(RESPONSES_TOOL), pick(rng, RESPONSES_TOOLS)]
    elif variant == 1:
        body["tools"] = [copy.deepcopy(RESPONSES_TOOL)] if coin(rng) else []
        body["tool_choice"] = pick(rng, RESPONSES_CHOICES)
    elif variant == 2:
        body["text"] = pick(rng, TEXT_CONFIGS)
    else:
        body["reasoning"] = pick(rng, REASONINGS)
    return body


_ANTHROPIC = ("messages", "count_tokens")
AGENT_MUTATORS: dict[str, tuple[Mutator, int, tuple[str, ...]]] = {
    "bad_blocks": (mutate_bad_blocks, 4, _ANTHROPIC),
    "bad_thinking": (mutate_bad_thinking, 2, _ANTHROPIC),
    "bad_anthropic_tools": (mutate_bad_anthropic_tools, 3, _ANTHROPIC),
    "bad_items": (mutate_bad_items, 4, ("responses",)),
    "unknown_previous_response": (mutate_unknown_previous_response, 2, ("responses",)),
    "bad_responses_tools": (mutate_bad_responses_tools, 3, ("responses",)),
}
"""Family name -> (mutator, weight, endpoints)."""
