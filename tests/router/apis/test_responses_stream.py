"""Chat answers as Responses: the Response object of a non-streamed answer, the events of a
streamed one, and the two agreeing; checked with the `openai` SDK's own types and its stream
accumulator (`openai.lib.streaming.responses`), offline."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterable
from typing import Any

from openai._types import omit
from openai.lib.streaming.responses._responses import ResponseStreamState
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import BaseModel, TypeAdapter

from deployments.protocol.errors import OpenAIError
from deployments.protocol.responses import (
    AssistantMessage,
    ChatChoice,
    ChatCompletion,
    ChatCompletionChunk,
    ChunkChoice,
    DeltaMessage,
    Usage,
)
from router.apis.responses import ResponsesEdge, ResponseStore

EVENTS: TypeAdapter[Any] = TypeAdapter(ResponseStreamEvent)
MODEL = "served-model"
CALL = {"id": "call_1", "type": "function", "function": {"name": "get_time", "arguments": "{}"}}
TOOLS = [{"type": "function", "name": "get_time", "parameters": {"type": "object"}}]


def translate(edge: ResponsesEdge, **fields: Any) -> dict[str, Any]:
    """The chat body of a Responses request (`input` "Hi" unless given)."""
    return asyncio.run(edge.chat_body({"model": "auto", "input": "Hi", **fields}))


def completion(
    content: str | None = "Hello.",
    reasoning: str | None = None,
    calls: list[dict[str, Any]] | None = None,
    finish: str = "stop",
    usage: Usage | None = None,
) -> ChatCompletion:
    message = AssistantMessage(content=content, reasoning_content=reasoning, tool_calls=calls)
    return ChatCompletion(
        id="chatcmpl-1",
        created=1,
        model=MODEL,
        choices=[ChatChoice(index=0, message=message, finish_reason=finish)],
        usage=usage or Usage.of(7, 3),
    )


def chunk(finish: str | None = None, usage: Usage | None = None, **delta: Any) -> BaseModel:
    choices = (
        [] if usage else [ChunkChoice(index=0, delta=DeltaMessage(**delta), finish_reason=finish)]
    )
    return ChatCompletionChunk(id="c", created=1, model=MODEL, choices=choices, usage=usage)


def chunks_of(whole: ChatCompletion, pieces: int = 3) -> list[BaseModel]:
    """A stream of `whole`: role chunk, reasoning then content in `pieces`, calls in two
    deltas each, finish, usage."""
    message = whole.choices[0].message

    def split(text: str) -> list[str]:
        step = max(1, len(text) // pieces)
        return [text[i : i + step] for i in range(0, len(text), step)]

    out = [chunk(role="assistant", content="")]
    out += [chunk(reasoning_content=p) for p in split(message.reasoning_content or "")]
    out += [chunk(content=p) for p in split(message.content or "")]
    for i, call in enumerate(message.tool_calls or []):
        head = {"index": i, "id": call["id"], "type": "function"}
        args = call["function"]["arguments"]
        out.append(chunk(tool_calls=[head | {"function": {"name": call["function"]["name"]}}]))
        out.append(chunk(tool_calls=[{"index": i, "function": {"arguments": args}}]))
    out.append(chunk(finish=whole.choices[0].finish_reason))
    return [*out, chunk(usage=whole.usage)]


async def _aiter(items: Iterable[BaseModel]) -> AsyncIterator[BaseModel]:
    for item in items:
        yield item


def stream_text(edge: ResponsesEdge, body: dict[str, Any], items: Iterable[BaseModel]) -> str:
    async def go() -> str:
        return "".join([e async for e in edge.events(body, _aiter(items))])

    return asyncio.run(go())


def parse_sse(text: str) -> list[dict[str, Any]]:
    """The events of an SSE text, each checked against its `event:` line."""
    events = []
    for block in text.split("\n\n")[:-1]:
        name, data = block.split("\n")
        assert name.startswith("event: ") and data.startswith("data: ")
        event = json.loads(data.removeprefix("data: "))
        assert event["type"] == name.removeprefix("event: ")
        events.append(event)
    assert text.endswith("\n\n")
    return events


def sdk_fold(events: list[dict[str, Any]]) -> Response:
    """The final Response as the SDK's stream helper accumulates it (every event validated
    against the SDK's `ResponseStreamEvent` on the way)."""
    state: ResponseStreamState[Any] = ResponseStreamState(input_tools=omit, text_format=omit)
    final = None
    for raw in events:
        for event in state.handle_event(EVENTS.validate_python(raw)):
            if event.type in ("response.completed", "response.incomplete", "response.failed"):
                final = event.response
    assert final is not None, "the stream has no final response event"
    return final


def sdk_json(response: Response) -> dict[str, Any]:
    """The SDK's accumulated Response as plain Response JSON: without the `parsed` and
    `parsed_arguments` its stream helper adds (None without a `text_format` or typed tools)."""
    data = response.model_dump(mode="json")
    for item in data["output"]:
        assert item.pop("parsed_arguments", None) is None
        for part in item.get("content") or []:
            assert part.pop("parsed", None) is None
    return data


def same_response(final: dict[str, Any], events: list[dict[str, Any]]) -> None:
    """`final` is a valid SDK Response and what the SDK's stream helper rebuilds from
    `events`."""
    assert sdk_json(sdk_fold(events)) == Response.model_validate(final).model_dump(mode="json")


def without_ids(response: dict[str, Any]) -> dict[str, Any]:
    """A Response's JSON without what differs between two runs of one answer: its id, its
    creation time, the item ids and the chat call ids."""
    out = {k: v for k, v in response.items() if k not in ("id", "created_at")}
    out["output"] = [
        {k: v for k, v in item.items() if k not in ("id", "call_id")} for item in out["output"]
    ]
    return out


def test_a_text_answer_is_a_completed_response_the_sdk_parses() -> None:
    edge = ResponsesEdge(ResponseStore())
    body = translate(edge, instructions="Be brief.", metadata={"k": "v"}, temperature=0.5)
    usage = Usage.of(7, 3, cached=4)
    response = edge.answer(body, completion(usage=usage))
    parsed = Response.model_validate(response)
    assert parsed.id.startswith("resp_") and parsed.object == "response"
    assert parsed.status == "completed" and parsed.model == MODEL
    assert parsed.output_text == "Hello."
    [message] = parsed.output
    assert message.type == "message" and message.id.startswith("msg_")
    assert message.role == "assistant" and message.status == "completed"
    assert response["output"][0]["content"] == [
        {"type": "output_text", "text": "Hello.", "annotations": []}
    ]
    assert parsed.usage is not None
    assert parsed.usage.input_tokens == 7 and parsed.usage.output_tokens == 3
    assert parsed.usage.input_tokens_details.cached_tokens == 4
    assert parsed.usage.output_tokens_details.reasoning_tokens == 0
    assert parsed.usage.total_tokens == 10
    assert (parsed.instructions, parsed.metadata, parsed.temperature) == (
        "Be brief.",
        {"k": "v"},
        0.5,
    )
    assert (parsed.tool_choice, parsed.tools, parsed.parallel_tool_calls) == ("auto", [], True)
    assert response["store"] is True and parsed.previous_response_id is None
    assert "x_responses" not in response


def test_reasoning_and_calls_become_their_own_items_in_order() -> None:
    edge = ResponsesEdge(ResponseStore())
    body = translate(edge, tools=TOOLS, reasoning={"effort": "high"})
    whole = completion("Checking.", reasoning="I need the time.", calls=[CALL], finish="tool_calls")
    response = edge.answer(body, whole)
    parsed = Response.model_validate(response)
    assert [item.type for item in parsed.output] == ["reasoning", "message", "function_call"]
    reasoning, _, call = response["output"]
    assert reasoning["id"].startswith("rs_") and reasoning["summary"] == []
    assert reasoning["content"] == [{"type": "reasoning_text", "text": "I need the time."}]
    assert call["id"].startswith("fc_") and call["call_id"] == "call_1"
    assert (call["name"], call["arguments"], call["status"]) == ("get_time", "{}", "completed")
    assert parsed.status == "completed"
    assert parsed.reasoning is not None and parsed.reasoning.effort == "high"
    assert [t.name for t in parsed.tools] == ["get_time"]  # type: ignore[union-attr]


def test_calls_alone_have_no_message_and_an_empty_answer_has_an_empty_one() -> None:
    edge = ResponsesEdge(ResponseStore())
    body = translate(edge, tools=TOOLS)
    calls_only = edge.answer(body, completion(None, calls=[CALL], finish="tool_calls"))
    assert [i["type"] for i in calls_only["output"]] == ["function_call"]
    empty = edge.answer(body, completion(""))
    assert [i["type"] for i in empty["output"]] == ["message"]
    assert empty["output"][0]["content"][0]["text"] == ""


def test_a_length_finish_is_incomplete_at_max_output_tokens() -> None:
    edge = ResponsesEdge(ResponseStore())
    body = translate(edge, max_output_tokens=3)
    response = edge.answer(body, completion("One two three", finish="length"))
    parsed = Response.model_validate(response)
    assert parsed.status == "incomplete" and parsed.max_output_tokens == 3
    assert parsed.incomplete_details is not None
    assert parsed.incomplete_details.reason == "max_output_tokens"
    assert response["output"][0]["status"] == "incomplete"


def test_stream_events_are_numbered_framed_and_valid_sdk_events() -> None:
    edge = ResponsesEdge(ResponseStore())
    body = translate(edge, tools=TOOLS, stream=True)
    whole = completion("Checking.", reasoning="Think.", calls=[CALL], finish="tool_calls")
    events = parse_sse(stream_text(edge, body, chunks_of(whole)))
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    for event in events:
        EVENTS.validate_python(event)
    types = [e["type"] for e in events]
    assert types[:2] == ["response.created", "response.in_progress"]
    assert types[-1] == "response.completed"
    assert events[0]["response"]["status"] == "in_progress"
    assert events[0]["response"]["output"] == []
    assert {e["response"]["id"] for e in events if "response" in e} == {body["x_responses"]["id"]}
    for kind in ("reasoning_text", "output_text"):
        assert f"response.{kind}.delta" in types and f"response.{kind}.done" in types
    assert "response.function_call_arguments.delta" in types
    assert (
        types.count("response.output_item.added") == types.count("response.output_item.done") == 3
    )
    assert types.count("response.content_part.added") == 2


def test_the_streamed_response_equals_the_answer_and_the_sdk_rebuilds_it() -> None:
    edge = ResponsesEdge(ResponseStore())
    whole = completion("Checking.", reasoning="Think.", calls=[CALL, CALL | {"id": "call_2"}])
    whole.choices[0].finish_reason = "tool_calls"
    events = parse_sse(
        stream_text(edge, translate(edge, tools=TOOLS, stream=True), chunks_of(whole))
    )
    final = events[-1]["response"]
    answered = edge.answer(translate(edge, tools=TOOLS), whole)
    assert without_ids(final) == without_ids(answered)
    same_response(final, events)


def test_text_after_a_call_streams_into_a_message_listed_before_the_calls() -> None:
    edge = ResponsesEdge(ResponseStore())
    body = translate(edge, tools=TOOLS, stream=True)
    head = {"index": 0, "id": "call_1", "type": "function"}
    items = [
        chunk(role="assistant", content=""),
        chunk(tool_calls=[head | {"function": {"name": "get_time", "arguments": ""}}]),
        chunk(tool_calls=[{"index": 0, "function": {"arguments": "{}"}}]),
        chunk(content="and then"),
        chunk(finish="tool_calls"),
        chunk(usage=Usage.of(5, 5)),
    ]
    events = parse_sse(stream_text(edge, body, items))
    final = events[-1]["response"]
    assert [i["type"] for i in final["output"]] == ["message", "function_call"]
    whole = completion("and then", calls=[CALL], finish="tool_calls", usage=Usage.of(5, 5))
    assert without_ids(final) == without_ids(edge.answer(translate(edge, tools=TOOLS), whole))
    same_response(final, events)


def test_an_incomplete_stream_ends_with_response_incomplete() -> None:
    edge = ResponsesEdge(ResponseStore())
    whole = completion("One two", finish="length")
    events = parse_sse(stream_text(edge, translate(edge, stream=True), chunks_of(whole)))
    assert events[-1]["type"] == "response.incomplete"
    final = sdk_fold(events)
    assert final.status == "incomplete" and final.output_text == "One two"


def test_an_error_mid_stream_ends_with_response_failed_and_is_not_stored() -> None:
    edge = ResponsesEdge(ResponseStore())
    body = translate(edge, stream=True)
    error = OpenAIError("the engine failed", status_code=500, code="engine_error").response()
    items = [chunk(role="assistant", content=""), chunk(content="Hel"), error]
    events = parse_sse(stream_text(edge, body, items))
    assert [e["type"] for e in events][-1] == "response.failed"
    failed = Response.model_validate(events[-1]["response"])
    assert failed.status == "failed" and failed.error is not None
    assert (failed.error.code, failed.error.message) == ("server_error", "the engine failed")
    assert failed.output_text == "Hel"
    assert sdk_fold(events).status == "failed"
    assert len(edge.store) == 0


def test_a_streamed_response_is_stored_when_it_completes_unless_store_is_false() -> None:
    edge = ResponsesEdge(ResponseStore())
    body = translate(edge, stream=True)
    final = parse_sse(stream_text(edge, body, chunks_of(completion())))[-1]["response"]
    assert edge.get(final["id"]) == final
    unstored = translate(edge, stream=True, store=False)
    final = parse_sse(stream_text(edge, unstored, chunks_of(completion())))[-1]["response"]
    assert final["store"] is False and len(edge.store) == 1
