"""Fuzz mutators of the chat-only fields: `tools`, `tool_choice`, `response_format`, the
tool-call history, message roles and content parts (registered in `fuzz_mutators.MUTATORS`)."""

from __future__ import annotations

import copy
import random
from typing import Any

from load_tests.fuzz_bodies import CALL, TOOL, Body, coin, pick

# fmt: off
BAD_SCHEMAS: list[Any] = [
    {"type": "bogus"}, {"type": "object", "properties": []}, {"required": "a"},
    {"minimum": "x"}, {"type": ["object", 1]}, {"properties": {"a": {"type": "nope"}}},
    {"$ref": "#/$defs/missing"}, {"type": "string", "pattern": "(unclosed"},
    {"type": "integer", "minimum": 5, "maximum": 1}, {"enum": []}, {"not": {}},
    {"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object",
     "properties": {"a": {"$ref": "#"}}},
]
TOOL_CHOICES: list[Any] = [
    "any", "None", "REQUIRED", "", "function", 1, [], True,
    {"type": "function", "function": {"name": "not_a_tool"}},
    {"type": "function", "function": {"name": "get_weather"}},
    {"type": "function"}, {"type": "function", "function": {}},
    {"type": "function", "function": {"name": ""}}, {"type": "tool"},
    {"function": {"name": "get_weather"}}, {"type": "function", "function": "get_weather"},
]
RESPONSE_FORMATS: list[Any] = [
    {"type": "json_schema", "json_schema": True}, -1, 1.5, "x", [None], {"type": "bogus"},
    {}, {"type": "json_schema"}, {"type": "json_schema", "json_schema": {}},
    {"type": "json_schema", "json_schema": {"schema": []}}, {"type": None}, {"type": ["text"]},
    {"type": "json_schema", "json_schema": {"name": 1, "schema": {}}}, {"type": "JSON_OBJECT"},
    {"type": "json_schema", "json_schema": {"schema": {"type": "object"}, "strict": "yes"}},
    {"type": "json_object", "json_schema": {"schema": {"type": "bogus"}}},
]
CONTENT_PARTS: list[Any] = [
    {"type": "video"}, {"type": "text"}, {"type": "text", "text": 1}, {}, "text",
    {"type": None}, {"type": "TEXT", "text": "hi"}, {"type": ["text"], "text": "hi"},
    {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
    {"type": "input_audio"}, {"type": "file", "file": {}}, {"type": "refusal", "refusal": "x"},
]
# fmt: on


def mutate_malformed_tools(rng: random.Random, body: Body, endpoint: str) -> Body:
    """`tools` not a list, entries without `function`/`name`, non-object or invalid schemas."""
    tool = copy.deepcopy(TOOL)
    fn = tool["function"]
    variant = rng.randint(0, 9)
    if variant == 0:
        body["tools"] = pick(rng, [{}, "x", 1, True, TOOL])
        return body
    if variant == 1:
        tool = pick(rng, [None, "get_weather", 1, [], [TOOL]])
    elif variant == 2:
        del tool["function"]
    elif variant == 3:
        if coin(rng):
            del fn["name"]
        else:
            fn["name"] = pick(rng, ["", 1, None, []])
    elif variant == 4:
        fn["parameters"] = pick(rng, [[], "x", 1, True, [{"type": "object"}]])
    elif variant in (5, 6):
        fn["parameters"] = pick(rng, BAD_SCHEMAS)
    elif variant == 7:
        tool["type"] = pick(rng, ["code_interpreter", None, 1, "", "Function"])
    elif variant == 8:
        tool["function"] = pick(rng, ["get_weather", [], 1])
    else:  # duplicate names (valid) with a forced call
        body["tool_choice"] = {"type": "function", "function": {"name": "get_weather"}}
        body["tools"] = [tool, copy.deepcopy(TOOL)]
        return body
    body["tools"] = [tool]
    if coin(rng):
        body["tool_choice"] = "required"
    return body


def mutate_malformed_tool_choice(rng: random.Random, body: Body, endpoint: str) -> Body:
    """Unknown strings, a named function not among the tools, `required` without tools."""
    with_tools = coin(rng)
    body.pop("tools", None)
    if with_tools:
        body["tools"] = [copy.deepcopy(TOOL)]
    choices = [*TOOL_CHOICES, None if with_tools else "required"]
    body["tool_choice"] = pick(rng, choices)
    return body


def mutate_malformed_response_format(rng: random.Random, body: Body, endpoint: str) -> Body:
    """Bad `response_format` shapes, or a json_schema whose schema is broken or unsatisfiable."""
    if rng.randint(0, 3) == 0:
        schema = pick(rng, BAD_SCHEMAS)
        body["response_format"] = {"type": "json_schema", "json_schema": {"schema": schema}}
    else:
        body["response_format"] = pick(rng, RESPONSE_FORMATS)
    return body


def mutate_malformed_history(rng: random.Random, body: Body, endpoint: str) -> Body:
    """Assistant tool calls with bad ids or arguments, unanswered or unknown tool results."""
    call = copy.deepcopy(CALL)
    answer: dict[str, Any] = {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}
    msgs: list[Any] = [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        answer,
    ]
    variant = rng.randint(0, 10)
    if variant == 0:
        call["id"] = pick(rng, ["", 1, None, [], "\x00"])
    elif variant == 1:
        del call["id"]
    elif variant == 2:
        call["function"]["arguments"] = pick(
            rng, ["{not json", "{'a': 1}", "[1, 2]", "1", "null", "true", '"s"', "{}}"]
        )
    elif variant == 3:
        call["function"]["arguments"] = pick(rng, [[1], 1, True, None])
    elif variant == 4:
        del answer["tool_call_id"]
    elif variant == 5:
        answer["tool_call_id"] = pick(rng, ["call_999", "", 1])
    elif variant == 6:
        msgs[2] = {"role": "user", "content": "and?"}  # dangling call
    elif variant == 7:
        msgs[1]["tool_calls"] = pick(rng, [{}, "x", [None], [1]])
    elif variant == 8:
        if coin(rng):
            del call["function"]["name"]
        else:
            call["function"] = "get_weather"
    elif variant == 9:
        msgs[0]["tool_calls"] = [call]  # tool calls on a user turn
    else:
        msgs.insert(0, answer)  # a tool result before any call
    body["messages"] = msgs
    if coin(rng):
        body["tools"] = [copy.deepcopy(TOOL)]
    return body


def mutate_bad_role(rng: random.Random, body: Body, endpoint: str) -> Body:
    """A message role that is unknown, of the wrong type or differently spelled."""
    roles = ["admin", "", "USER", 1, None, ["user"], "ipython", "\u202euser", "user ", "model"]
    body["messages"] = [{"role": pick(rng, roles), "content": "Hi"}]
    return body


def mutate_bad_content_part(rng: random.Random, body: Body, endpoint: str) -> Body:
    """Content parts of unknown type, missing or mistyped fields, or unsupported media."""
    part = pick(rng, CONTENT_PARTS)
    body["messages"] = [{"role": "user", "content": pick(rng, [[part], [part, part], part])}]
    return body
