"""Helpers for tests against the running server: SSE parsing, the served model ids, and extra
router applications in front of the local app's model deployments."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
from app_args import served_app_args
from ray import serve

from configs.model_config import RouterAppConfig
from router.app import model_handles, router_app

MODEL = "smollm2-long"
"""The model id the protocol tests pin (full context, tool parser)."""
FAST = "smollm2-fast"
"""The short-context model of configs/local.yaml."""
CASES = Path(__file__).resolve().parents[1] / "data"
"""Real-world cases (copied from the team's shared/cases/ so that a plain clone runs them)."""


def local_args() -> dict[str, Any]:
    """The `args` of configs/local.yaml as the test session serves them (`served_app_args`), a
    fresh copy to modify."""
    return served_app_args()


@contextmanager
def extra_router(serve_url: str, name: str, args: dict[str, Any]) -> Iterator[str]:
    """Run a second router application (route prefix `/<name>`) over the local app's models.

    Args:
        serve_url: Base URL of the shared Serve instance.
        name: Application name, also the route prefix.
        args: Its `RouterAppConfig` args; `models` must be those of configs/local.yaml (their
            deployment figures may differ: only this router reads them).

    Yields:
        The application's base URL; the application is deleted afterwards.
    """
    config = RouterAppConfig.model_validate(
        {**args, "router_deployment": {"ray_actor_options": {"num_cpus": 0.05}}}
    )
    serve.run(router_app(config, model_handles(config)), name=name, route_prefix=f"/{name}")
    try:
        yield f"{serve_url}/{name}"
    finally:
        serve.delete(name)


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


def wait_healthy(client: httpx.Client, timeout_s: float = 180) -> dict[str, Any]:
    """Wait until `/health` says `ok` (every model serving); its body."""
    deadline = time.monotonic() + timeout_s
    while True:
        body = client.get("/health").json()
        if body["status"] == "ok":
            return body
        assert time.monotonic() < deadline, body
        time.sleep(0.5)
