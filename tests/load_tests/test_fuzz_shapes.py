"""The fuzz checker's answer shapes (`load_tests.fuzz_shapes`): each endpoint's 4xx error
object (Anthropic's type by status), its 200 stream's failure and end events, its JSON object."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from load_tests.fuzz_shapes import answer_problem

OPENAI_ERROR = {
    "error": {"message": "bad", "type": "invalid_request_error", "param": None, "code": None}
}


def anthropic_error(kind: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": kind, "message": "bad"}}


def sse(*events: dict[str, Any], named: bool = True, done: bool = False) -> httpx.Response:
    text = "".join(
        (f"event: {e['type']}\n" if named else "") + f"data: {json.dumps(e)}\n\n" for e in events
    )
    text += "data: [DONE]\n\n" if done else ""
    return httpx.Response(200, text=text, headers={"content-type": "text/event-stream"})


@pytest.mark.parametrize(
    ("endpoint", "status", "body", "kind"),
    [
        ("chat", 400, OPENAI_ERROR, None),
        ("responses", 404, OPENAI_ERROR, None),
        ("messages", 400, anthropic_error("invalid_request_error"), None),
        ("count_tokens", 404, anthropic_error("not_found_error"), None),
        ("messages", 413, anthropic_error("request_too_large"), None),
        ("messages", 413, anthropic_error("invalid_request_error"), None),
        ("messages", 429, anthropic_error("rate_limit_error"), None),
        ("messages", 401, anthropic_error("authentication_error"), None),
        ("messages", 422, anthropic_error("invalid_request_error"), None),
        ("messages", 404, anthropic_error("invalid_request_error"), "error_body"),
        ("messages", 403, anthropic_error("authentication_error"), "error_body"),
        ("messages", 400, OPENAI_ERROR, "error_body"),
        ("messages", 400, {**anthropic_error("invalid_request_error"), "x": 1}, "error_body"),
        ("responses", 400, anthropic_error("invalid_request_error"), "error_body"),
        ("chat", 400, {"error": {"message": "bad"}}, "error_body"),
        ("messages", 200, {"type": "message", "content": []}, None),
        ("count_tokens", 200, {"input_tokens": 7}, None),
        ("responses", 200, {"object": "response", "status": "completed"}, None),
        ("responses", 200, {"object": "response", "status": "failed"}, "bad_200"),
        ("messages", 200, anthropic_error("api_error"), "bad_200"),
        ("count_tokens", 200, {"count": 7}, "bad_200"),
        ("chat", 500, {"detail": "x"}, None),  # a 5xx is the caller's to report
    ],
)
def test_json_answers(endpoint: str, status: int, body: Any, kind: str | None) -> None:
    problem = answer_problem(endpoint, httpx.Response(status, json=body))
    assert (problem[0] if problem else None) == kind, problem


def test_a_4xx_that_is_not_json_is_a_wrong_error_body() -> None:
    problem = answer_problem("messages", httpx.Response(400, text="Internal Server Error"))
    assert problem is not None and problem[0] == "error_body" and "not JSON" in problem[1]


START = {"type": "message_start", "message": {}}
STOP = {"type": "message_stop"}
CREATED = {"type": "response.created", "response": {"error": None}}


@pytest.mark.parametrize(
    ("endpoint", "resp", "says"),
    [
        ("messages", sse(START, {"type": "ping"}, STOP), None),
        ("messages", sse(START, {"type": "error", "error": {}}), "error event"),
        ("messages", sse(START), "ends with 'message_start'"),
        ("count_tokens", sse(), "ends with None"),
        ("responses", sse(CREATED, {"type": "response.completed", "response": {}}), None),
        ("responses", sse(CREATED, {"type": "response.incomplete", "response": {}}), None),
        ("responses", sse(CREATED, {"type": "response.failed", "response": {}}), "failed event"),
        ("responses", sse(CREATED, {"type": "error", "message": "x"}), "error event"),
        ("responses", sse(CREATED), "ends with 'response.created'"),
        ("chat", sse({"id": "c", "choices": []}, named=False, done=True), None),
        ("chat", sse({"error": {"message": "x"}}, named=False, done=True), "error event"),
    ],
)
def test_streams(endpoint: str, resp: httpx.Response, says: str | None) -> None:
    problem = answer_problem(endpoint, resp)
    if says is None:
        assert problem is None
    else:
        assert problem is not None and problem[0] == "stream_error" and says in problem[1]


def test_an_event_whose_name_and_type_differ_is_a_broken_stream() -> None:
    text = f"event: message_stop\ndata: {json.dumps(START)}\n\n"
    resp = httpx.Response(200, text=text, headers={"content-type": "text/event-stream"})
    problem = answer_problem("messages", resp)
    assert problem is not None and "carries data of type 'message_start'" in problem[1]
