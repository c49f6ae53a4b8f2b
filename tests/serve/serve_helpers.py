"""Helpers for tests against the running server: SSE parsing and the served model id."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx

MODEL = "smollm2-135m-instruct"
CASES = Path(__file__).resolve().parents[3] / "shared" / "cases"


def sse_events(resp: httpx.Response) -> tuple[list[dict[str, Any]], bool]:
    """Parse a streamed response: the JSON events and whether `data: [DONE]` ended it."""
    events: list[dict[str, Any]] = []
    done = False
    for line in resp.iter_lines():
        if not line.startswith("data: "):
            continue
        data = line[len("data: ") :]
        if data == "[DONE]":
            done = True
            continue
        assert not done, "event after [DONE]"
        events.append(json.loads(data))
    return events, done


def stream_text(events: list[dict[str, Any]], index: int = 0) -> str:
    """Joined text of one choice (chat deltas or completion text)."""
    parts = []
    for ev in events:
        for c in ev.get("choices", []):
            if c["index"] != index:
                continue
            if "delta" in c:
                parts.append(c["delta"].get("content") or "")
            else:
                parts.append(c.get("text") or "")
    return "".join(parts)


def post_stream(client: httpx.Client, path: str, body: dict[str, Any]) -> tuple[int, Any]:
    """POST a streaming request; (status, (events, done)) or (status, error JSON)."""
    with client.stream("POST", path, json=body) as resp:
        if resp.status_code != 200:
            resp.read()
            return resp.status_code, resp.json()
        return 200, sse_events(resp)
