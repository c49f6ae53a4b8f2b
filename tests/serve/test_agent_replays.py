"""The requests Claude Code and Codex CLI really send (tests/data/agent_requests, captured from
the clients), replayed over HTTP against configs/agents.yaml's long-context tiny Qwen3 on real
Ray Serve: each is accepted and answered with the API's full event sequence.

Their prompts (a long system prompt and 24 tools; ~20k tokens) do not fit SmolLM2's context, so
the tiny model is made into a temporary folder (as `ascend-router make-tiny-models` does) and
served as an application of its own. Only the completion limit is lowered (the clients ask for
32,000 tokens, which a random model would spend).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from ray import serve

from cli.tiny_models_cmd import make_tiny_models
from router.app import build_app

pytestmark = pytest.mark.serve

REPO = Path(__file__).resolve().parents[2]
CAPTURES = REPO / "tests" / "data" / "agent_requests"
APP = "agents128k"


@pytest.fixture(scope="module")
def agents(serve_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    """configs/agents.yaml's policy and tiny Qwen3 (SmolLM2 left out: the local app serves
    it), as application `/agents128k`."""
    args = yaml.safe_load((REPO / "configs" / "agents.yaml").read_text())["applications"][0]["args"]
    out = tmp_path_factory.mktemp("tiny_models")
    make_tiny_models(out, ["qwen3"])
    model = next(m for m in args["models"] if m["model_id"] == "tiny-qwen3-128k")
    model["source"]["path"] = str(out / "qwen3")
    model["deployment"]["ray_actor_options"] = {"num_cpus": 0.25}
    model["engine"]["enforce_eager"] = True  # no graph compile beside the test's prefills
    policy = args["policy"]
    policy["aliases"] = {"auto": ["tiny-qwen3-128k"], "fast": ["tiny-qwen3-128k"]}
    app_args = {
        **args,
        "models": [model],
        "router_deployment": {"ray_actor_options": {"num_cpus": 0.05}},
    }
    serve.run(build_app(app_args), name=APP, route_prefix=f"/{APP}")
    try:
        with httpx.Client(base_url=f"{serve_url}/{APP}", timeout=300) as client:
            yield client
    finally:
        serve.delete(APP)


def _capture(name: str) -> tuple[str, dict[str, str], dict[str, Any]]:
    """(path, headers, body) of a captured request, its completion limit lowered to 4."""
    doc = json.loads((CAPTURES / name).read_text())
    headers = {k: v for k, v in doc["headers"].items() if k not in ("authorization", "x-api-key")}
    body = doc["body"]
    body["max_output_tokens" if doc["path"].endswith("/responses") else "max_tokens"] = 4
    return doc["path"], headers, body


def _events(resp: httpx.Response) -> list[tuple[str, dict[str, Any]]]:
    """(event type, data) of an SSE stream with `event:` lines."""
    events, kind = [], ""
    for line in resp.iter_lines():
        if line.startswith("event: "):
            kind = line[len("event: ") :]
        elif line.startswith("data: "):
            events.append((kind, json.loads(line[len("data: ") :])))
    return events


@pytest.mark.parametrize(
    "name",
    # the follow-up turns (tool results, thinking with signatures) are translated in
    # tests/router/apis; one 20k-token prefill here is enough for the whole path
    ["claude_code/messages_print_mode.json"],
)
def test_claude_code_requests_are_answered(agents: httpx.Client, name: str) -> None:
    path, headers, body = _capture(name)
    with agents.stream("POST", path, json=body, headers=headers) as resp:
        assert resp.status_code == 200, resp.read()
        assert resp.headers["x-ascend-router-model"] == "tiny-qwen3-128k"
        events = _events(resp)
    kinds = [kind for kind, _ in events]
    assert kinds[0] == "message_start" and kinds[-2:] == ["message_delta", "message_stop"]
    assert "error" not in kinds
    usage = events[-2][1]["usage"]
    assert usage["output_tokens"] == 4 and events[-2][1]["delta"]["stop_reason"] == "max_tokens"
    assert usage.get("input_tokens", 0) + usage.get("cache_read_input_tokens", 0) > 8192


@pytest.mark.parametrize(
    "name",
    ["codex/responses_custom_model.json", "codex/responses_function_call_output.json"],
)
def test_codex_requests_are_answered(agents: httpx.Client, name: str) -> None:
    path, headers, body = _capture(name)
    with agents.stream("POST", path, json=body, headers=headers) as resp:
        assert resp.status_code == 200, resp.read()
        events = _events(resp)
    kinds = [kind for kind, _ in events]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] == "response.incomplete", kinds[-3:]  # cut at max_output_tokens
    numbers = [data["sequence_number"] for _, data in events]
    assert numbers == list(range(len(events)))
    final = events[-1][1]["response"]
    assert final["usage"]["output_tokens"] == 4 and final["usage"]["input_tokens"] > 8192
