"""What is wrong with an answer's shape, by the API the example went to.

- 4xx: OpenAI's error object `{"error": {"message", "type", "param", "code"}}` for chat,
  completions and Responses; Anthropic's `{"type": "error", "error": {"type", "message"}}` for
  `/v1/messages` and `/v1/messages/count_tokens`, its `type` the one Anthropic's API reference
  ("Errors") gives the status (`ANTHROPIC_ERROR_TYPES`).
- A 200 stream: chat and completions carry no error event; Anthropic's carries no
  `event: error` and ends with `message_stop`; Responses' carries no `response.failed` or `error`
  event and ends with `response.completed` or `response.incomplete`.
- A 200 JSON answer: JSON, and for the agent APIs their object (`message`, `input_tokens`,
  `response`).
"""

from __future__ import annotations

import json
from typing import Any

import httpx

ERROR_KEYS = frozenset({"message", "type", "param", "code"})
ANTHROPIC_ERROR_TYPES: dict[int, frozenset[str]] = {
    400: frozenset({"invalid_request_error"}),
    401: frozenset({"authentication_error"}),
    403: frozenset({"permission_error"}),
    404: frozenset({"not_found_error"}),
    413: frozenset({"request_too_large", "invalid_request_error"}),
    429: frozenset({"rate_limit_error"}),
}
"""Anthropic's error `type` by 4xx status; any other 4xx is an `invalid_request_error`."""
ANTHROPIC = frozenset({"messages", "count_tokens"})
RESPONSES_ENDS = frozenset({"response.completed", "response.incomplete"})
RESPONSES_FAILURES = frozenset({"response.failed", "error"})


def _json(resp: httpx.Response) -> tuple[Any, str | None]:
    """The body's JSON, or a problem saying it is not JSON."""
    try:
        return resp.json(), None
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None, f"not JSON: {resp.text[:300]!r}"


def error_body_problem(resp: httpx.Response) -> str | None:
    """What is wrong with a 4xx answer's body; None when it is an OpenAI error object."""
    doc, problem = _json(resp)
    if problem:
        return problem
    if not isinstance(doc, dict) or set(doc) != {"error"} or not isinstance(doc["error"], dict):
        return f"not {{'error': {{...}}}}: {json.dumps(doc)[:300]}"
    err = doc["error"]
    if set(err) != ERROR_KEYS:
        return f"error keys {sorted(err)} != {sorted(ERROR_KEYS)}: {json.dumps(doc)[:300]}"
    types_ok = isinstance(err["message"], str) and isinstance(err["type"], str)
    optional_ok = all(err[k] is None or isinstance(err[k], str) for k in ("param", "code"))
    if not (types_ok and optional_ok):
        return f"error field types: {json.dumps(doc)[:300]}"
    return None


def anthropic_error_problem(resp: httpx.Response) -> str | None:
    """What is wrong with a 4xx answer of the Messages API; None when it is Anthropic's error
    object with the `type` of its status."""
    doc, problem = _json(resp)
    if problem:
        return problem
    text = json.dumps(doc)[:300]
    if not isinstance(doc, dict) or set(doc) != {"type", "error"} or doc["type"] != "error":
        return f"not {{'type': 'error', 'error': {{...}}}}: {text}"
    err = doc["error"]
    if not isinstance(err, dict) or set(err) != {"type", "message"}:
        return f"error is not {{'type', 'message'}}: {text}"
    if not (isinstance(err["type"], str) and isinstance(err["message"], str)):
        return f"error field types: {text}"
    expected = ANTHROPIC_ERROR_TYPES.get(resp.status_code, frozenset({"invalid_request_error"}))
    if err["type"] not in expected:
        return f"type {err['type']!r} for HTTP {resp.status_code}, not {sorted(expected)}: {text}"
    return None


def sse_events(text: str) -> tuple[list[tuple[str | None, Any]], str | None]:
    """The `(event name, data JSON)` of each event of an SSE body (`data: [DONE]` left out), or
    a problem saying which event is not JSON."""
    events: list[tuple[str | None, Any]] = []
    for block in text.split("\n\n"):
        name, data = None, None
        for line in block.splitlines():
            if line.startswith("event:"):
                name = line[6:].strip()
            elif line.startswith("data:"):
                data = line[5:].strip()
        if data is None or data == "[DONE]":
            continue
        try:
            events.append((name, json.loads(data)))
        except json.JSONDecodeError:
            return events, f"event is not JSON: {block[:300]!r}"
    return events, None


def stream_problem(endpoint: str, text: str) -> str | None:
    """What is wrong with a 200 SSE body of `endpoint`; None when the stream is clean."""
    events, problem = sse_events(text)
    if problem:
        return problem
    names = [name if name is not None else _type(data) for name, data in events]
    for (name, data), kind in zip(events, names):
        if name is not None and name != _type(data):
            return f"event {name!r} carries data of type {_type(data)!r}"
        if _failed(endpoint, kind, data):
            return f"{kind or 'error'} event: {json.dumps(data)[:300]}"
    last = names[-1] if names else None
    if endpoint in ANTHROPIC and last != "message_stop":
        return f"the stream ends with {last!r}, not 'message_stop'"
    if endpoint == "responses" and last not in RESPONSES_ENDS:
        return f"the stream ends with {last!r}, not {sorted(RESPONSES_ENDS)}"
    return None


def _type(data: Any) -> Any:
    return data.get("type") if isinstance(data, dict) else None


def _failed(endpoint: str, kind: Any, data: Any) -> bool:
    """Whether an event reports a failure (OpenAI's chat chunks have no `type`: an `error`)."""
    if endpoint in ANTHROPIC:
        return kind == "error"
    if endpoint == "responses":
        return kind in RESPONSES_FAILURES
    return isinstance(data, dict) and "error" in data


def _object_problem(endpoint: str, doc: Any) -> str | None:
    text = json.dumps(doc)[:300]
    if not isinstance(doc, dict):
        return f"not an object: {text}"
    if endpoint == "messages" and doc.get("type") != "message":
        return f"not a message: {text}"
    if endpoint == "count_tokens" and not isinstance(doc.get("input_tokens"), int):
        return f"no input_tokens: {text}"
    if endpoint == "responses" and (
        doc.get("object") != "response" or doc.get("status") not in ("completed", "incomplete")
    ):
        return f"not a completed or incomplete response: {text}"
    return None


def answer_problem(endpoint: str, resp: httpx.Response) -> tuple[str, str] | None:
    """The violation kind (`error_body`, `stream_error`, `bad_200`) and detail of a 4xx or 200
    answer of `endpoint`; None when its shape is right (and for other statuses)."""
    status = resp.status_code
    if 400 <= status < 500:
        check = anthropic_error_problem if endpoint in ANTHROPIC else error_body_problem
        problem = check(resp)
        return ("error_body", problem) if problem else None
    if status != 200:
        return None
    if resp.headers.get("content-type", "").startswith("text/event-stream"):
        problem = stream_problem(endpoint, resp.text)
        return ("stream_error", problem) if problem else None
    doc, problem = _json(resp)
    if problem is None and endpoint not in ("chat", "completions"):
        problem = _object_problem(endpoint, doc)
    return ("bad_200", problem) if problem else None
