"""Tool calls as models really write them (issue #14, section 4), over real HTTP.

A side application serves SmolLM2 through `tests.scripted_engine`, one model per tool parser, so
each `AS_WRITTEN` output (a bare JSON call, a llama3 JSON array, a call cut off by `max_tokens`)
is written token by token by the real engine and comes back through the detokenizer, the tool
parser and the router to the `openai` client, streamed and not.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import openai
import pytest
from serve_helpers import side_app, side_model
from toolcall_samples import AS_WRITTEN, Sample, with_tools

from deployments.toolcalls.assemble import accumulate
from tests.scripted_engine import script_marker, script_tokens

pytestmark = pytest.mark.serve

PARSERS = sorted({s.parser for s in AS_WRITTEN})


def _model(parser: str) -> str:
    return f"scripted-{parser}".replace("_", "-")


@pytest.fixture(scope="module")
def scripted(serve_url: str) -> Iterator[openai.OpenAI]:
    """An `openai` client on the `/scripted` application (deleted afterwards)."""
    engine = "tests.scripted_engine:ScriptedEngine"
    models = [side_model(_model(p), tool_parser=p, engine_class=engine) for p in PARSERS]
    with side_app(serve_url, "scripted", models) as http:
        yield openai.OpenAI(base_url=f"{http.base_url}v1", api_key="unused", max_retries=0)


def _request(sample: Sample, tokenizer: Any) -> dict[str, Any]:
    """The request whose answer is `sample.raw` (cut at its end when the sample says so)."""
    cut = sample.engine_finish_reason == "length"
    return {
        "model": _model(sample.parser),
        "messages": [{"role": "user", "content": script_marker(sample.raw)}],
        "tools": with_tools(sample),
        "tool_choice": sample.tool_choice or "auto",
        "max_tokens": script_tokens(tokenizer, sample.raw) if cut else 256,
        "temperature": 0,
    }


def _text(value: str | None) -> str | None:
    return (value or "").strip() or None


def _calls(calls: list[dict[str, Any]]) -> list[tuple[str, Any]]:
    return [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls]


@pytest.mark.parametrize("sample", AS_WRITTEN, ids=[s.id for s in AS_WRITTEN])
def test_output_as_written_streamed_and_not(
    scripted: openai.OpenAI, tokenizer: Any, sample: Sample
) -> None:
    request = _request(sample, tokenizer)
    answer = scripted.chat.completions.create(**request).choices[0]
    assert _text(answer.message.content) == sample.content
    assert _calls(answer.message.model_dump()["tool_calls"] or []) == sample.calls
    assert answer.finish_reason == sample.finish_reason

    chunks = list(scripted.chat.completions.create(**request, stream=True))
    reasons = [c.choices[0].finish_reason for c in chunks if c.choices[0].finish_reason]
    assert reasons == [sample.finish_reason]
    client = accumulate(c.choices[0].delta.model_dump(exclude_none=True) for c in chunks)
    whole = len(sample.calls)
    assert _calls(client["tool_calls"][:whole]) == sample.calls
    for call in client["tool_calls"][whole:]:  # cut off: its fragments streamed, never whole
        assert sample.engine_finish_reason == "length"
        with pytest.raises(json.JSONDecodeError):
            json.loads(call["function"]["arguments"])
    if sample.stream_equal:
        assert _text(client["content"]) == sample.content and len(client["tool_calls"]) == whole
