"""Claude Code's real requests (`tests/data/agent_requests/claude_code/`, Claude Code 2.1.197)
through the edge and the real chat handler: every one translates into a chat body the chat path
serves (a `system` message between turns, `adaptive` thinking, `$schema` in every tool's
`input_schema`, tool results and thinking with signatures in the history), a streamed answer
folds into the whole one, and `count_tokens` renders the same prompt."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from family_runs import run_family
from test_anthropic_stream import comparable, fold, in_answer_order, parse_sse, source
from toolcall_samples import Sample

from deployments.protocol.requests import ChatCompletionRequest
from deployments.protocol.responses import ChatCompletion
from deployments.protocol.validation import parse_request
from router.apis.anthropic import AnthropicEdge

CAPTURES = Path(__file__).resolve().parents[2] / "data" / "agent_requests" / "claude_code"
REQUESTS = {
    p.stem: doc["body"]
    for p in sorted(CAPTURES.glob("messages_*.json"))
    if (doc := json.loads(p.read_text()))["path"].startswith("/v1/messages")
}
EDGE = AnthropicEdge()
BASH = Sample(
    "claude-code-bash",
    "hermes",
    'Running it.\n<tool_call>\n{"name": "Bash", "arguments": {"command": "echo hi"}}\n</tool_call>',
    [("Bash", {"command": "echo hi"})],
    content="Running it.",
)


def test_the_captures_are_there() -> None:
    assert len(REQUESTS) >= 6 and all(b["stream"] is True for b in REQUESTS.values())


@pytest.mark.parametrize("name", REQUESTS)
def test_every_claude_code_request_is_served_and_streams_as_it_answers(
    tokenizer: Any, name: str
) -> None:
    body = REQUESTS[name]

    async def both() -> tuple[dict[str, Any], list[dict[str, Any]], dict[str, Any]]:
        whole_body = await EDGE.chat_body({**body, "stream": False})
        whole = await run_family(tokenizer, BASH, False, whole_body, max_model_len=131072)
        assert isinstance(whole, ChatCompletion)
        stream_body = await EDGE.chat_body(body)
        chunks = await run_family(tokenizer, BASH, True, stream_body, max_model_len=131072)
        assert isinstance(chunks, list)
        texts = [t async for t in EDGE.events(stream_body, source(list(chunks)))]
        return EDGE.answer(whole_body, whole), parse_sse(texts), whole_body

    answer, events, chat = asyncio.run(both())
    assert comparable(in_answer_order(fold(events))) == comparable(answer)
    assert [(b["name"], b["input"]) for b in answer["content"] if b["type"] == "tool_use"] == [
        ("Bash", {"command": "echo hi"})
    ]
    assert answer["stop_reason"] == "tool_use"
    assert len(chat["tools"]) == len(body["tools"])  # every client tool is offered
    assert chat["user"] == body["metadata"]["user_id"]
    counted = parse_request(ChatCompletionRequest, EDGE.count_body(body))
    assert counted.messages == parse_request(ChatCompletionRequest, chat).messages


def test_a_system_message_between_turns_stays_where_it_was_sent() -> None:
    body = REQUESTS["messages_print_mode"]
    roles = [m["role"] for m in body["messages"]]
    assert "system" in roles  # Claude Code's mid-conversation system message
    chat = asyncio.run(EDGE.chat_body(body))
    assert [m["role"] for m in chat["messages"]] == ["system", *roles]
