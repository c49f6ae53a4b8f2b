"""Chat answers as Anthropic `Message`s (`router.apis.anthropic.message`) and errors in
Anthropic's shape (`router.apis.anthropic.errors`), checked against the `anthropic` SDK's types."""

from __future__ import annotations

from typing import Any

import pytest
from anthropic.types import Message
from anthropic.types.shared import ErrorResponse as SdkErrorResponse

from deployments.protocol.errors import OpenAIError
from deployments.protocol.responses import AssistantMessage, ChatChoice, ChatCompletion, Usage
from router.apis.anthropic import AnthropicEdge
from router.apis.anthropic.message import signature

EDGE = AnthropicEdge()
CALL = {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": '{"a": [1]}'}}


def completion(
    message: dict[str, Any], finish: str = "stop", usage: Usage | None = None, **choice: Any
) -> ChatCompletion:
    return ChatCompletion(
        id="chatcmpl-abc123",
        created=0,
        model="served-model",
        choices=[
            ChatChoice(index=0, message=AssistantMessage(**message), finish_reason=finish, **choice)
        ],
        usage=usage or Usage.of(11, 7),
    )


def answer(chat: ChatCompletion, request: dict[str, Any] | None = None) -> dict[str, Any]:
    """The edge's answer, checked against the SDK's `Message`."""
    out = EDGE.answer(request or {"model": "m", "messages": []}, chat)
    Message.model_validate(out)
    return out


def test_a_text_answer_is_one_text_block_ending_the_turn() -> None:
    out = answer(completion({"content": "Hello."}))
    assert out == {
        "id": "msg_abc123",
        "type": "message",
        "role": "assistant",
        "model": "served-model",
        "content": [{"type": "text", "text": "Hello."}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {
            "input_tokens": 11,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
            "output_tokens": 7,
        },
    }


def test_reasoning_text_and_calls_become_thinking_text_and_tool_use_blocks() -> None:
    second = {**CALL, "id": "call_2", "function": {"name": "g", "arguments": "{}"}}
    out = answer(
        completion(
            {"content": "Checking.", "reasoning_content": "Think.", "tool_calls": [CALL, second]},
            finish="tool_calls",
        )
    )
    thinking, text, first, other = out["content"]
    assert thinking == {"type": "thinking", "thinking": "Think.", "signature": signature("Think.")}
    assert text == {"type": "text", "text": "Checking."}
    assert (first["type"], first["name"], first["input"]) == ("tool_use", "f", {"a": [1]})
    assert (other["name"], other["input"]) == ("g", {})
    assert first["id"].startswith("toolu_") and first["id"] != other["id"]
    assert out["stop_reason"] == "tool_use"


def test_an_answer_of_calls_only_has_no_text_block() -> None:
    out = answer(completion({"content": None, "tool_calls": [CALL]}, finish="tool_calls"))
    assert [b["type"] for b in out["content"]] == ["tool_use"]


def test_the_signature_is_stable_and_not_empty() -> None:
    assert signature("x") == signature("x") != signature("y")
    assert signature("")


@pytest.mark.parametrize(
    ("finish", "matched", "reason", "sequence"),
    [
        ("length", None, "max_tokens", None),
        ("tool_calls", None, "tool_use", None),
        ("stop", "END", "stop_sequence", "END"),
        ("stop", None, "end_turn", None),
        ("stop", "OTHER", "end_turn", None),
    ],
)
def test_stop_reason_follows_the_finish_reason_and_the_matched_stop(
    finish: str, matched: Any, reason: str, sequence: str | None
) -> None:
    chat = completion({"content": "x"}, finish=finish, stop_reason=matched)
    out = answer(chat, {"stop": ["END"]})
    assert (out["stop_reason"], out["stop_sequence"]) == (reason, sequence)


def test_prefix_cache_hits_are_cache_reads() -> None:
    usage = Usage.of(100, 5, cached=64)
    assert answer(completion({"content": "x"}, usage=usage))["usage"] == {
        "input_tokens": 36,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 64,
        "output_tokens": 5,
    }


@pytest.mark.parametrize(
    ("status", "kind"),
    [
        (400, "invalid_request_error"),
        (413, "invalid_request_error"),  # the SDK's types have no `request_too_large`
        (422, "invalid_request_error"),
        (401, "authentication_error"),
        (403, "permission_error"),
        (404, "not_found_error"),
        (429, "rate_limit_error"),
        (500, "api_error"),
        (502, "api_error"),
        (503, "overloaded_error"),
        (504, "timeout_error"),
        (529, "overloaded_error"),
    ],
)
def test_errors_take_anthropic_types_by_status(status: int, kind: str) -> None:
    error = OpenAIError("what went wrong", status_code=status).response()
    body = EDGE.error_body(error)
    assert body == {"type": "error", "error": {"type": kind, "message": "what went wrong"}}
    SdkErrorResponse.model_validate(body)
