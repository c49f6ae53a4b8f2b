"""Synthetic tool-call outputs shared by the parser, `parse-tools` and HTTP tests.

`Sample` is one model output with the message it must give; `AS_WRITTEN` holds the outputs of
issue #14, section 4 ("tool calls as models really write them"), which the HTTP tests also have
a scripted engine write (`tests/serve/test_tool_calls_as_written.py`). The family samples and
the recorded real-world cases live in `tests/deployments/toolcalls/toolcall_cases.py`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from deployments.toolcalls.assemble import finish_reason


@dataclass(frozen=True)
class Sample:
    """A synthetic output for one parser (covers parsers and shapes the cases do not)."""

    id: str
    parser: str
    raw: str
    calls: list[tuple[str, dict[str, Any]]]
    content: str | None = None
    reasoning: str | None = None
    prompt_suffix: str = ""
    tools: list[dict[str, Any]] | None = field(default=None)
    stream_equal: bool = True  # False: a call turns invalid after streaming (rule S11)
    tool_choice: Any = None  # "required" / named: the output of constrained decoding
    engine_finish_reason: str = "stop"  # "length": max_tokens cut the output here

    @property
    def finish_reason(self) -> str:
        """The answer's `finish_reason` (PROTOCOL.md S7)."""
        return finish_reason(bool(self.calls), self.engine_finish_reason)


def _tool(name: str, **props: str) -> dict[str, Any]:
    properties = {k: {"type": v} for k, v in props.items()}
    return {
        "type": "function",
        "function": {"name": name, "parameters": {"type": "object", "properties": properties}},
    }


TOOLS = [_tool("get_weather", city="string", days="integer", units="array"), _tool("get_time")]


def with_tools(sample: Sample) -> list[dict[str, Any]]:
    """The tools the sample's request declares (`TOOLS` unless it names its own)."""
    return sample.tools if sample.tools is not None else TOOLS


_CUT = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Ca'
_NAMED = {"type": "function", "function": {"name": "get_weather"}}


def _text(sid: str, parser: str, raw: str, **kw: Any) -> Sample:
    """A sample whose whole output comes back as content, without a call."""
    return Sample(sid, parser, raw, [], content=raw.strip(), **kw)


AS_WRITTEN = [
    # Issue #14, section 4: tool calls as models really write them.
    # 1. A declared tool's call without the <tool_call> wrapper (Qwen2.5-Coder).
    Sample(
        "hermes-bare-call",
        "hermes",
        '{"name": "get_weather", "arguments": {"city": "Paris"}}',
        [("get_weather", {"city": "Paris"})],
    ),
    Sample(
        "hermes-bare-call-fenced",
        "hermes",
        '```json\n{"name": "get_weather", "parameters": {"city": "Paris", "days": 2}}\n```\n',
        [("get_weather", {"city": "Paris", "days": 2})],
    ),
    Sample(
        "hermes-bare-call-array",
        "hermes",
        '```json\n[{"name": "get_time", "arguments": {}},\n {"name": "get_weather", '
        '"arguments": {"city": "Oslo"}}]\n```',
        [("get_time", {}), ("get_weather", {"city": "Oslo"})],
    ),
    _text("hermes-bare-json-in-prose", "hermes", 'Call: {"name": "get_time", "arguments": {}}'),
    _text("hermes-bare-json-then-prose", "hermes", '{"name": "get_time", "arguments": {}}\nOK?'),
    _text("hermes-bare-undeclared", "hermes", '{"name": "get_stock", "arguments": {"id": "X"}}'),
    _text("hermes-bare-json-answer", "hermes", '```json\n{"city": "Paris", "days": 2}\n```'),
    _text(
        "hermes-bare-array-not-all-calls", "hermes", '[{"name": "get_time", "arguments": {}}, 7]'
    ),
    # 2. llama3_json's JSON array, an empty-arguments call first.
    Sample(
        "llama3-array",
        "llama3_json",
        '[{"name": "get_time", "parameters": {}}, {"name": "get_weather", "parameters": '
        '{"city": "Oslo", "days": 3}}, {"name": "get_time", "arguments": {}}]',
        [("get_time", {}), ("get_weather", {"city": "Oslo", "days": 3}), ("get_time", {})],
    ),
    Sample(
        "llama3-python-tag-array",
        "llama3_json",
        '<|python_tag|>[{"name": "get_time", "arguments": {}}, {"name": "get_weather", '
        '"arguments": {"city": "Oslo"}}]',
        [("get_time", {}), ("get_weather", {"city": "Oslo"})],
    ),
    # 3. A call cut off by max_tokens: no whole call from the cut text; finish_reason "length".
    _text(
        "hermes-cut-in-arguments", "hermes", _CUT, stream_equal=False, engine_finish_reason="length"
    ),
    _text(
        "hermes-cut-before-envelope-closes",
        "hermes",
        _CUT + 'iro"}',
        stream_equal=False,
        engine_finish_reason="length",
    ),
    Sample(
        "hermes-whole-call-then-cut",
        "hermes",
        '<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call>\n' + _CUT,
        [("get_time", {})],
        content=_CUT,
        stream_equal=False,
        engine_finish_reason="length",
    ),
    _text(
        "hermes-bare-call-cut",
        "hermes",
        '```json\n{"name": "get_weather", "arguments": {"city": "Ca',
        engine_finish_reason="length",
    ),
    _text(
        "required-cut",
        "hermes",
        '[{"name": "get_weather", "parameters": {"city": "Ca',
        stream_equal=False,
        tool_choice="required",
        engine_finish_reason="length",
    ),
    Sample(
        "required-whole-call-then-cut",
        "hermes",
        '[{"name": "get_time", "parameters": {}}, {"name": "get_weather", "parameters": '
        '{"city": "Ca',
        [("get_time", {})],
        content=', {"name": "get_weather", "parameters": {"city": "Ca',
        stream_equal=False,
        tool_choice="required",
        engine_finish_reason="length",
    ),
    _text(
        "named-cut",
        "hermes",
        '{"city": "Ca',
        stream_equal=False,
        tool_choice=_NAMED,
        engine_finish_reason="length",
    ),
]
"""Outputs of real-world shapes, checked through the parsers, `parse-tools` and HTTP."""
