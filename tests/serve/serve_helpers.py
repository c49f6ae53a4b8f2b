"""Helpers for tests against the running server: SSE parsing, the served model ids, extra router
applications in front of the local app's model deployments, and side applications with models
of their own."""

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
from router.app import build_app, model_handles, router_app

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


SIDE_ENGINE = {"max_model_len": 1024, "kv_cache_memory_bytes": 64 << 20}
"""Engine settings of a side application's models: small, so they load beside the local app's."""


def side_model(model_id: str, base: str = FAST, **fields: Any) -> dict[str, Any]:
    """A model config for a side application (`side_app`).

    Args:
        model_id: The new model's id.
        base: The configs/local.yaml model (as served) whose config it starts from; its engine
            gets `SIDE_ENGINE` and its replica a quarter CPU.
        **fields: Config fields set on top (`engine_class`, `tool_parser`, ...).
    """
    cfg = next(m for m in local_args()["models"] if m["model_id"] == base)
    return {
        **cfg,
        "model_id": model_id,
        "engine": {**cfg["engine"], **SIDE_ENGINE},
        "deployment": {**cfg["deployment"], "ray_actor_options": {"num_cpus": 0.25}},
        **fields,
    }


@contextmanager
def side_app(
    serve_url: str, name: str, models: list[dict[str, Any]], **args: Any
) -> Iterator[httpx.Client]:
    """Run `models` behind a router of their own as application `name` (route prefix `/<name>`).

    Args:
        serve_url: Base URL of the shared Serve instance.
        name: Application name, also the route prefix.
        models: Model configs (`side_model`); requests default to them in this order.
        **args: More `RouterAppConfig` args (timeouts, ...).

    Yields:
        A client on the application once `/health` says `ok`; the application is deleted
        afterwards.
    """
    app_args = {
        "models": models,
        "policy": {"default_targets": [m["model_id"] for m in models]},
        "router_deployment": {"ray_actor_options": {"num_cpus": 0.05}},
        **args,
    }
    serve.run(build_app(app_args), name=name, route_prefix=f"/{name}")
    try:
        with httpx.Client(base_url=f"{serve_url}/{name}", timeout=180) as client:
            wait_healthy(client)
            yield client
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
