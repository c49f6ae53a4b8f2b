"""Tool-call history validation and normalisation (PROTOCOL.md, "Requests")."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from deployments.prompting.tool_history import normalize_history
from deployments.protocol.errors import OpenAIError
from deployments.protocol.requests import ChatCompletionRequest, ChatMessage
from deployments.protocol.validation import parse_request


def call(cid: str, args: Any = '{"city": "Lima"}', name: str = "get_weather") -> dict:
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}


def msgs(*items: dict) -> list[ChatMessage]:
    return [ChatMessage.model_validate(m) for m in items]


USER = {"role": "user", "content": "hi"}


def test_calls_anywhere_in_history_and_arguments_as_objects() -> None:
    out = normalize_history(
        msgs(
            USER,
            {"role": "assistant", "content": None, "tool_calls": [call("a"), call("b", {"x": 1})]},
            {"role": "tool", "tool_call_id": "b", "content": [{"type": "text", "text": "2"}]},
            {"role": "tool", "tool_call_id": "a", "content": "1"},
            {"role": "assistant", "content": "ok"},
            USER,
            {"role": "assistant", "content": "", "tool_calls": []},
            USER,
        )
    )
    assert out[1]["tool_calls"][0]["function"]["arguments"] == {"city": "Lima"}
    assert out[1]["tool_calls"][1]["function"]["arguments"] == {"x": 1}
    assert out[2] == {"role": "tool", "tool_call_id": "b", "content": "2", "name": "get_weather"}
    assert "tool_calls" not in out[6]


@pytest.mark.parametrize(
    ("history", "param", "fragment"),
    [
        ([USER, {"role": "assistant", "tool_calls": [call("a1")]}, USER], "messages", "a1"),
        (
            [
                USER,
                {"role": "assistant", "tool_calls": [call("a")]},
                {"role": "tool", "content": "x"},
            ],
            "messages[2].tool_call_id",
            "tool_call_id",
        ),
        (
            [USER, {"role": "tool", "tool_call_id": "zz", "content": "x"}],
            "messages[1].tool_call_id",
            "zz",
        ),
        (
            [USER, {"role": "assistant", "tool_calls": [call("a"), call("a")]}],
            "messages[1].tool_calls[1].id",
            "twice",
        ),
    ],
    ids=[
        "dangling",
        "tool-without-id",
        "orphan-tool",
        "duplicate-id",
    ],
)
def test_bad_histories_are_400(history: list[dict], param: str, fragment: str) -> None:
    with pytest.raises(OpenAIError) as info:
        normalize_history(msgs(*history))
    assert info.value.status_code == 400 and info.value.param == param
    assert fragment in str(info.value)


def test_lenient_mode_accepts_loose_pairing() -> None:
    loose = msgs(
        USER,
        {"role": "assistant", "tool_calls": [call("a")]},
        USER,
        {"role": "tool", "tool_call_id": "zz", "content": "x"},
    )
    assert len(normalize_history(loose, strict=False)) == 4


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        ("{not json", "not JSON"),
        ('{"a": 1', "not JSON"),
        (7, "valid"),
        ('{"a": ' + "[" * 5000 + "]" * 5000 + "}", "nest too deeply"),  # a RecursionError: 500
    ],
    ids=["args-not-json", "args-unclosed", "args-number", "args-nested-deeply"],
)
def test_bad_call_shapes_are_400_when_the_request_is_parsed(args: Any, fragment: str) -> None:
    body = {"messages": [USER, {"role": "assistant", "tool_calls": [call("a", args)]}]}
    with pytest.raises(OpenAIError) as info:
        parse_request(ChatCompletionRequest, body)
    assert info.value.param == "messages[1].tool_calls[0].function.arguments"
    assert fragment in str(info.value)


@pytest.mark.parametrize(
    "args", ["[]", "null", "42", " [1, 2] "], ids=["array", "null", "number", "list"]
)
def test_replayed_arguments_that_are_json_but_not_an_object_render_as_empty(
    args: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue #14: clients replay calls whose arguments a model wrote as other JSON; vLLM
    accepts them and renders `{}`."""
    history = [USER, {"role": "assistant", "tool_calls": [call("a", args)]}]
    body = {"messages": [*history, {"role": "tool", "tool_call_id": "a", "content": "ok"}]}
    request = parse_request(ChatCompletionRequest, body)
    with caplog.at_level(logging.WARNING, logger="deployments.prompting.tool_history"):
        out = normalize_history(request.messages)
    assert out[1]["tool_calls"][0]["function"]["arguments"] == {}
    (record,) = caplog.records
    assert "messages[1].tool_calls[0].function.arguments" in record.getMessage()
    assert args.strip() in record.getMessage()
