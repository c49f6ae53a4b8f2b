"""Codex CLI's real requests (`tests/data/agent_requests/codex/`, Codex 0.171.0) through the
edge and the real chat handler: every one translates into a chat body the chat path serves, the
tools Codex sends by default are dropped or flattened, and a streamed answer equals the whole
one, namespaced calls included."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from family_runs import run_family
from test_responses_stream import parse_sse, same_response, stream_text, without_ids
from toolcall_samples import Sample

from deployments.protocol.responses import ChatCompletion
from router.apis.responses import ResponsesEdge, ResponseStore

CAPTURES = Path(__file__).resolve().parents[2] / "data" / "agent_requests" / "codex"
REQUESTS = {p.stem: json.loads(p.read_text())["body"] for p in sorted(CAPTURES.glob("*.json"))}


def exec_call(name: str = "exec_command", **arguments: Any) -> Sample:
    """A hermes model output calling `name` (Codex's shell tool by default)."""
    call = {"name": name, "arguments": arguments or {"cmd": "echo hi"}}
    raw = f"Running it.\n<tool_call>\n{json.dumps(call)}\n</tool_call>"
    return Sample(
        f"codex-{name}", "hermes", raw, [(name, call["arguments"])], content="Running it."
    )


def serve(
    tokenizer: Any, body: dict[str, Any], sample: Sample
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The whole answer's Response and the streamed answer's events for one Codex body."""
    edge = ResponsesEdge(ResponseStore())
    whole_body = asyncio.run(edge.chat_body({**body, "stream": False}))
    whole = asyncio.run(run_family(tokenizer, sample, False, whole_body))
    assert isinstance(whole, ChatCompletion)
    stream_body = asyncio.run(edge.chat_body(body))
    chunks = asyncio.run(run_family(tokenizer, sample, True, stream_body))
    assert isinstance(chunks, list)
    return edge.answer(whole_body, whole), parse_sse(stream_text(edge, stream_body, chunks))


def test_the_captures_are_there() -> None:
    assert len(REQUESTS) >= 6 and all(b["stream"] is True for b in REQUESTS.values())


@pytest.mark.parametrize("name", REQUESTS)
def test_every_codex_request_is_served_and_streams_as_it_answers(tokenizer, name) -> None:
    answered, events = serve(
        tokenizer, REQUESTS[name], exec_call("request_user_input", questions=[])
    )
    streamed = events[-1]["response"]
    assert events[-1]["type"] == "response.completed"
    assert without_ids(streamed) == without_ids(answered)
    same_response(streamed, events)
    assert [i["type"] for i in answered["output"]] == ["message", "function_call"]
    assert answered["store"] is False and answered["tool_choice"] == "auto"


def test_codex_tools_are_flattened_and_its_built_in_ones_dropped(caplog) -> None:
    edge = ResponsesEdge(ResponseStore())
    chat = asyncio.run(edge.chat_body(REQUESTS["responses_custom_model"]))
    names = [t["function"]["name"] for t in chat["tools"]]
    assert names[:4] == ["exec_command", "write_stdin", "request_user_input", "view_image"]
    assert {"spawn_agent", "wait_agent", "close_agent"} <= set(names)  # from multi_agent_v1
    assert "'web_search' dropped" in caplog.text
    [namespace] = [t for t in chat["x_responses"]["echo"]["tools"] if t["type"] == "namespace"]
    assert namespace["name"] == "multi_agent_v1" and len(namespace["tools"]) == 5
    gpt55 = asyncio.run(edge.chat_body(REQUESTS["responses_gpt-5.5"]))
    assert "apply_patch" not in [t["function"]["name"] for t in gpt55["tools"]]
    assert "'custom' dropped" in caplog.text and "'tool_search' dropped" in caplog.text
    default = asyncio.run(edge.chat_body(REQUESTS["responses_default_model"]))
    assert {"sleep", "spawn_agent", "wait"} <= {t["function"]["name"] for t in default["tools"]}
    assert [m["role"] for m in default["messages"]][:4] == [
        "developer"
    ] * 4  # no item for the tools


def test_codex_history_items_become_chat_turns() -> None:
    edge = ResponsesEdge(ResponseStore())
    chat = asyncio.run(edge.chat_body(REQUESTS["responses_custom_tool_call_output_with_reasoning"]))
    call, output = chat["messages"][-2:]
    assert call["reasoning_content"] == "**Greeting** The user wants a greeting."
    [tool_call] = call["tool_calls"]
    assert tool_call["function"]["name"] == "apply_patch"
    assert json.loads(tool_call["function"]["arguments"])["input"].startswith("*** Begin Patch")
    assert output["role"] == "tool" and output["tool_call_id"] == tool_call["id"]
    chat = asyncio.run(edge.chat_body(REQUESTS["responses_function_call_output"]))
    assert [m["role"] for m in chat["messages"][-2:]] == ["assistant", "tool"]


def test_a_call_to_a_namespaced_function_names_its_namespace(tokenizer) -> None:
    sample = exec_call("spawn_agent", message="look around")
    answered, events = serve(tokenizer, REQUESTS["responses_custom_model"], sample)
    [call] = [i for i in answered["output"] if i["type"] == "function_call"]
    assert (call["name"], call["namespace"]) == ("spawn_agent", "multi_agent_v1")
    assert without_ids(events[-1]["response"]) == without_ids(answered)
    [added] = [
        e
        for e in events
        if e["type"] == "response.output_item.added" and e["item"]["type"] == "function_call"
    ]
    assert added["item"]["namespace"] == "multi_agent_v1"
