"""Per-family behaviours, the registry, the stream assembler and tool_choice."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from toolcall_cases import parse_chunks
from toolcall_samples import TOOLS

from deployments.protocol.tools import ToolChoice, parse_tool_choice
from deployments.toolcalls.assemble import StreamAssembler, accumulate, assemble, parse_text
from deployments.toolcalls.choice import apply_tool_choice
from deployments.toolcalls.events import ToolCallAbort, ToolCallStart
from deployments.toolcalls.registry import (
    DEFAULT_PARSER_BY_FAMILY,
    PARSERS,
    default_parser,
    get_parser,
)
from deployments.toolcalls.schema_values import to_json

HERMES_CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>'


def test_registry_names_every_family() -> None:
    assert set(PARSERS) == {
        "hermes",
        "qwen3_coder",
        "deepseek_v3",
        "deepseek_v31",
        "deepseek_v32",
        "deepseek_v4",
        "phi4_mini",
        "llama3_json",
        "mistral",
        "xml",
    }
    assert set(DEFAULT_PARSER_BY_FAMILY.values()) <= set(PARSERS)
    assert default_parser("qwen3") == "hermes" and default_parser("phi4") == "phi4_mini"
    with pytest.raises(ValueError, match="known parsers: hermes"):
        get_parser("nope")
    with pytest.raises(ValueError, match="no default tool parser"):
        default_parser("gpt2")


def test_openai_call_ids_are_random_and_unique() -> None:
    message = assemble(parse_text(get_parser("hermes", TOOLS), HERMES_CALL + HERMES_CALL))
    ids = [c["id"] for c in message["tool_calls"]]
    assert len(set(ids)) == 2
    assert all(re.fullmatch(r"call_[A-Za-z0-9]{24}", i) for i in ids)


def test_mistral_ids_are_nine_alphanumerics() -> None:
    raw = (
        "[TOOL_CALLS]get_time[CALL_ID]a1B2c3D4e[ARGS]{}[TOOL_CALLS]get_time[CALL_ID]bad-id"
        "[ARGS]{}[TOOL_CALLS]get_time[ARGS]{}"
    )
    ids = [c["id"] for c in assemble(parse_text(get_parser("mistral", TOOLS), raw))["tool_calls"]]
    assert ids[0] == "a1B2c3D4e"
    assert len(ids) == 3 and all(re.fullmatch(r"[A-Za-z0-9]{9}", i) for i in ids)


def test_without_tools_any_name_is_accepted() -> None:
    raw = '<tool_call>\n{"name": "anything", "arguments": {}}\n</tool_call>'
    assert (
        assemble(parse_text(get_parser("hermes"), raw))["tool_calls"][0]["function"]["name"]
        == "anything"
    )
    assert assemble(parse_text(get_parser("hermes", []), raw))["tool_calls"] == []


def test_truncated_call_is_voided_and_returned_as_content() -> None:
    raw = HERMES_CALL[:-25]
    events = parse_text(get_parser("hermes", TOOLS), raw)
    assert isinstance(events[0], ToolCallStart) and isinstance(events[-1], ToolCallAbort)
    message = assemble(events)
    assert message["tool_calls"] == [] and message["content"] == raw
    stream = StreamAssembler()
    client = accumulate(stream.push(events))
    assert client["content"] == raw  # S11: the rest comes back as content
    assert stream.close("length")[1] == "length"  # a voided call is not a sent call


def test_stream_assembler_shapes() -> None:
    stream = StreamAssembler()
    parser = get_parser("hermes", TOOLS)
    deltas = stream.push(parser.feed("  Hi.\n" + HERMES_CALL[:40]))
    deltas += stream.push(parser.feed(HERMES_CALL[40:]) + parser.finish())
    assert deltas[0] == {"role": "assistant", "content": "Hi."}
    header = deltas[1]["tool_calls"][0]
    assert header["function"] == {"name": "get_weather", "arguments": ""}
    fragments = [d["tool_calls"][0]["function"]["arguments"] for d in deltas[2:]]
    assert "".join(fragments) == '{"city": "Oslo"}'
    assert stream.close("stop") == ([], "tool_calls")
    empty = StreamAssembler()
    assert empty.close("length") == ([{"role": "assistant", "content": ""}], "length")


@pytest.mark.parametrize(
    ("text", "schema", "expected"),
    [
        ("3", {"type": "integer"}, "3"),
        ("2.5", {"type": "number"}, "2.5"),
        ("True", {"type": "boolean"}, "true"),
        ("null", {"type": ["string", "null"]}, "null"),
        ('{"a": [1]}', {"type": "object"}, '{"a": [1]}'),
        ("{'a': 1}", {"type": "object"}, '{"a": 1}'),
        ("not a number", {"type": "integer"}, '"not a number"'),
        ("x", None, '"x"'),
        ("社区", {"type": "string"}, '"社区"'),
    ],
)
def test_qwen3_coder_values_follow_the_schema(text: str, schema: Any, expected: str) -> None:
    assert to_json(text, schema) == expected


def test_qwen3_coder_missing_end_parameter_and_literal_tag_in_value() -> None:
    raw = (
        "<tool_call>\n<function=get_weather>\n<parameter=city>\nsee </parameter> x\n"
        "<parameter=days>\n3\n</function>\n</tool_call>"
    )
    message, _ = parse_chunks("qwen3_coder", TOOLS, list(raw))
    assert json.loads(message["tool_calls"][0]["function"]["arguments"]) == {
        "city": "see </parameter> x",
        "days": 3,
    }


@pytest.mark.parametrize(
    ("parser", "raw"),
    [
        (
            "deepseek_v31",
            "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>nope<｜tool▁sep｜>{}<｜tool▁call▁end｜>"
            + "<｜tool▁calls▁end｜>",
        ),
        ("xml", '<tool name="nope">{"a": "</tool>"}</tool>'),
        ("phi4_mini", 'functools[{"name": "nope", "arguments": {}}]'),
        ("mistral", "[TOOL_CALLS]bad name[ARGS]{}"),
        ("hermes", '<tool_call>\n{"name": "get_time", "arguments": [1]}\n</tool_call>'),
        ("hermes", '<tool_call>\n{"name": "get_time", "arguments": {"a": 1 x}}\n</tool_call>'),
    ],
)
def test_invalid_calls_come_back_verbatim(parser: str, raw: str) -> None:
    message, _ = parse_chunks(parser, TOOLS, [raw])
    assert message["tool_calls"] == [] and message["content"] == raw


def test_tool_choice_parse() -> None:
    named = {"type": "function", "function": {"name": "get_time"}}
    assert parse_tool_choice(None, TOOLS).kind == "auto"
    assert parse_tool_choice(None, None).kind == "none"
    assert parse_tool_choice(named, TOOLS) == ToolChoice("named", "get_time")
    for bad, tools in [
        ("required", None),
        ("always", TOOLS),
        (named, None),
        ({"type": "function", "function": {"name": "x"}}, TOOLS),
        ({"type": "function", "function": True}, TOOLS),
    ]:
        with pytest.raises(ValueError):
            parse_tool_choice(bad, tools)


def _choice(raw: str, tool_choice: Any, **kw: Any) -> dict[str, Any]:
    return apply_tool_choice(raw, parser_name="hermes", tools=TOOLS, tool_choice=tool_choice, **kw)


def test_tool_choice_none_returns_markup_as_text() -> None:
    result = _choice("<think>hm</think>" + HERMES_CALL, "none")
    assert result["tool_calls"] == [] and result["content"] == HERMES_CALL
    assert result["reasoning_content"] == "hm" and result["finish_reason"] == "stop"


def test_tool_choice_constrained_outputs() -> None:
    named = {"type": "function", "function": {"name": "get_weather"}}
    result = _choice('{"city": "Rome"}', named, constrained_output="arguments object only")
    assert [(c["function"]["name"], c["function"]["arguments"]) for c in result["tool_calls"]] == [
        ("get_weather", '{"city": "Rome"}')
    ]
    broken = _choice("Sorry, no.", named, constrained_output="arguments object only")
    assert broken["tool_calls"] == [] and broken["content"] == "Sorry, no."
    required = _choice(
        '[{"name": "get_time", "parameters": {}}]', "required", constrained_output="calls array"
    )
    assert required["finish_reason"] == "tool_calls" and len(required["tool_calls"]) == 1


def test_tool_choice_named_without_constraint_keeps_one_call() -> None:
    other = '<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call>'
    named = {"type": "function", "function": {"name": "get_weather"}}
    result = _choice(other + HERMES_CALL + HERMES_CALL, named)
    assert [c["function"]["name"] for c in result["tool_calls"]] == ["get_weather"]


def test_finish_reason_length_without_calls() -> None:
    assert (
        _choice("Once upon a", "auto", engine_finish_reason="length")["finish_reason"] == "length"
    )
    # PROTOCOL.md S7: `length` whenever generation stopped at max_tokens, calls or not
    assert _choice(HERMES_CALL, "auto", engine_finish_reason="length")["finish_reason"] == "length"


def test_a_required_answer_cut_by_max_tokens_finishes_with_length() -> None:
    """PROTOCOL.md S7: the whole first call is kept, and the reason is `length`, not
    `tool_calls` (found by a new-user trial: a cut-off third call was reported as done)."""
    whole = '{"name": "get_time", "parameters": {"zone": "UTC"}}'
    raw = f'[{whole}, {{"name": "get_time", "parameters": {{"zone": "U'
    result = _choice(raw, "required", constrained_output="array", engine_finish_reason="length")
    assert result["finish_reason"] == "length"
    assert [json.loads(c["function"]["arguments"]) for c in result["tool_calls"][:1]] == [
        {"zone": "UTC"}
    ]
