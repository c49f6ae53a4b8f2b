"""Stream equals non-stream, with tool calls, for every tool-call family: a Responses request is
translated, the real `ChatHandler` answers it over the scripted engine (`family_runs`) once whole
and once streamed, and both answers are translated back."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from family_runs import FAMILY_SAMPLES, run_family
from openai.types.responses import Response
from test_responses_stream import parse_sse, same_response, stream_text, without_ids
from toolcall_samples import Sample, with_tools

from deployments.protocol.responses import ChatCompletion
from deployments.toolcalls.registry import PARSERS
from router.apis.responses import ResponsesEdge, ResponseStore


def responses_body(sample: Sample, stream: bool) -> dict[str, Any]:
    """A Responses request declaring the sample's tools (in the Responses shape)."""
    tools = [{"type": "function", **t["function"]} for t in with_tools(sample)]
    body = {"model": "auto", "input": "What is the weather in Oslo?", "tools": tools}
    return body | {"stream": True} if stream else body


def test_every_family_has_a_sample() -> None:
    assert set(FAMILY_SAMPLES) == set(PARSERS)


@pytest.mark.parametrize("sample", FAMILY_SAMPLES.values(), ids=list(FAMILY_SAMPLES))
def test_streamed_and_whole_answers_are_the_same_response(tokenizer, sample: Sample) -> None:
    edge = ResponsesEdge(ResponseStore())
    whole_body = asyncio.run(edge.chat_body(responses_body(sample, stream=False)))
    whole = asyncio.run(run_family(tokenizer, sample, False, whole_body))
    assert isinstance(whole, ChatCompletion)
    answered = edge.answer(whole_body, whole)

    stream_body = asyncio.run(edge.chat_body(responses_body(sample, stream=True)))
    chunks = asyncio.run(run_family(tokenizer, sample, True, stream_body))
    assert isinstance(chunks, list)
    events = parse_sse(stream_text(edge, stream_body, chunks))
    streamed = events[-1]["response"]

    assert events[-1]["type"] == "response.completed"
    assert without_ids(streamed) == without_ids(answered)
    same_response(streamed, events)
    calls = [i for i in Response.model_validate(answered).output if i.type == "function_call"]
    assert [(c.name, json.loads(c.arguments)) for c in calls] == sample.calls
    reasoning = [i for i in answered["output"] if i["type"] == "reasoning"]
    assert [r["content"][0]["text"] for r in reasoning] == (
        [sample.reasoning] if sample.reasoning else []
    )
    assert {answered["id"], streamed["id"]} <= {
        r["id"] for r in (edge.get(answered["id"]), edge.get(streamed["id"]))
    }
