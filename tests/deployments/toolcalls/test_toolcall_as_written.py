"""Tool calls as models really write them (issue #14, section 4), on the server's own path.

`tool_output.ToolOutput` is what the model server runs per choice: the streamed deltas, the
non-streamed message (the deltas accumulated, less voided calls) and the finish reason. Every
`AS_WRITTEN` output goes through it whole, one character at a time and in random chunks.
"""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
from toolcall_cases import random_chunks, summary
from toolcall_samples import AS_WRITTEN, TOOLS, Sample, with_tools

from deployments.protocol.tools import parse_tool_choice
from deployments.streaming.tool_output import ToolOutput
from deployments.toolcalls.assemble import accumulate
from deployments.toolcalls.choice import parser_for_choice
from deployments.toolcalls.registry import get_parser


def _output(sample: Sample) -> ToolOutput:
    tools = with_tools(sample)
    choice = parse_tool_choice(sample.tool_choice or "auto", tools)
    constrained = choice.kind in ("required", "named")
    return ToolOutput(parser_for_choice(choice, sample.parser, tools, "", constrained))


def _serve(sample: Sample, chunks: list[str]) -> tuple[list[dict[str, Any]], ToolOutput, str]:
    """(streamed deltas, the output processor, finish reason) for `chunks` of the output."""
    out = _output(sample)
    deltas = [delta for chunk in chunks for delta in out.push(chunk)]
    tail, reason = out.finish(sample.engine_finish_reason)
    return deltas + tail, out, reason


def _chunkings(sample: Sample) -> list[list[str]]:
    rng = random.Random(sample.id)
    return [[sample.raw], list(sample.raw), *(random_chunks(sample.raw, rng, 6) for _ in range(4))]


@pytest.mark.parametrize("sample", AS_WRITTEN, ids=[s.id for s in AS_WRITTEN])
def test_stream_and_non_stream_answers(sample: Sample) -> None:
    for chunks in _chunkings(sample):
        deltas, out, reason = _serve(sample, chunks)
        assert reason == sample.finish_reason, chunks
        content, _, calls = summary(accumulate(deltas, out.voided))  # the non-streamed answer
        assert content == sample.content, chunks
        assert [(name, json.loads(args)) for name, args in calls] == sample.calls, chunks
        client = accumulate(deltas)  # what a streaming client ends up with
        if sample.stream_equal:
            assert summary(client) == summary(accumulate(deltas, out.voided)), chunks
        whole = len(sample.calls)
        assert [c["function"]["name"] for c in client["tool_calls"][:whole]] == [
            name for name, _ in sample.calls
        ]
        for call in client["tool_calls"][whole:]:  # cut off: streamed, never whole
            assert sample.engine_finish_reason == "length"
            with pytest.raises(json.JSONDecodeError):
                json.loads(call["function"]["arguments"])


def test_a_bare_call_is_held_until_the_output_ends() -> None:
    raw = '```json\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n```'
    out = ToolOutput(get_parser("hermes", TOOLS))
    assert [out.push(c) for c in raw] == [[]] * len(raw)
    deltas, reason = out.finish("stop")
    assert reason == "tool_calls"
    assert json.loads(accumulate(deltas)["tool_calls"][0]["function"]["arguments"]) == {
        "city": "Paris"
    }


@pytest.mark.parametrize(
    ("raw", "released_by"),
    [
        ('```json\n{"city": "Paris", "days": 2}\n```', '"city"'),
        ('{"name": "get_stock", "arguments": {}} and more', '"get_stock"'),
        ('[{"name": "get_time", "arguments": {}}, 7, 8, 9]', ", 7"),
        ("```python\nprint(1)\n```", "```p"),
        ('{"name": "get_time", "arguments": {}} and more', "} a"),
    ],
    ids=["json-answer", "undeclared", "array-element", "other-fence", "text-after"],
)
def test_json_that_stops_looking_like_a_call_streams_at_once(raw: str, released_by: str) -> None:
    """Held text goes out as content at the first character that rules a bare call out."""
    out = ToolOutput(get_parser("hermes", TOOLS))
    cut = raw.index(released_by) + len(released_by)
    pushes = [out.push(c) for c in raw[:cut]]
    assert pushes[:-1] == [[]] * (cut - 1)
    released = "".join(d["content"] for d in pushes[-1])
    assert released and raw.startswith(released)


def test_a_cut_envelope_streams_its_arguments_without_their_closing_brace() -> None:
    """The arguments' `}` waits for the envelope's, so a cut call never streamed JSON."""
    out = ToolOutput(get_parser("hermes", TOOLS))
    deltas = out.push('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Cairo"}')
    assert accumulate(deltas)["tool_calls"][0]["function"]["arguments"] == '{"city": "Cairo"'
    deltas += out.push("}\n</tool_call>")
    assert accumulate(deltas)["tool_calls"][0]["function"]["arguments"] == '{"city": "Cairo"}'
