"""The policy of configs/local.yaml over real HTTP: requests that differ only in max_tokens,
temperature, tools or prompt length land where the policy says, and the headers say so."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from serve_helpers import FAST, MODEL

from router.dispatch import FALLBACK_HEADER, MODEL_HEADER, REASON_HEADER, RULE_HEADER

pytestmark = pytest.mark.serve

HI = [{"role": "user", "content": "Say hello."}]
LONG_PROMPT = [{"role": "user", "content": "Summarise: " + "the cat sat on the mat. " * 300}]
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}
GREEDY_SHORT: dict[str, Any] = {"messages": HI, "max_tokens": 16, "temperature": 0}


def send(http: httpx.Client, body: dict[str, Any], stream: bool) -> tuple[httpx.Response, Any]:
    """POST a chat request; the response and its JSON body or, when streamed, its events."""
    with http.stream("POST", "/v1/chat/completions", json={**body, "stream": stream}) as resp:
        resp.read()
    if resp.status_code != 200 or not stream:
        return resp, resp.json()
    lines = [line[len("data: ") :] for line in resp.text.splitlines() if line.startswith("data: ")]
    assert lines[-1] == "[DONE]"
    return resp, [json.loads(line) for line in lines[:-1]]


# fmt: off
ROUTES = [
    pytest.param(GREEDY_SHORT, FAST, "short-greedy", id="short-greedy"),
    pytest.param({**GREEDY_SHORT, "max_tokens": 200}, MODEL, "default", id="more-tokens"),
    pytest.param({**GREEDY_SHORT, "temperature": 0.7}, MODEL, "default", id="warmer"),
    pytest.param({**GREEDY_SHORT, "tools": [WEATHER]}, MODEL, "tools", id="tools"),
    pytest.param({**GREEDY_SHORT, "messages": LONG_PROMPT}, MODEL, "long-prompt",
                 id="long-prompt"),
    pytest.param({**GREEDY_SHORT, "model": "auto"}, FAST, "short-greedy", id="explicit-auto"),
    pytest.param({**GREEDY_SHORT, "model": MODEL}, MODEL, f"model:{MODEL}", id="pinned-long"),
    pytest.param({**GREEDY_SHORT, "max_tokens": 200, "model": FAST}, FAST, f"model:{FAST}",
                 id="pinned-fast"),
]
# fmt: on


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
@pytest.mark.parametrize(("body", "model", "rule"), ROUTES)
def test_policy_routes_by_features(
    http: httpx.Client, body: dict[str, Any], model: str, rule: str, stream: bool
) -> None:
    resp, data = send(http, body, stream)
    assert resp.status_code == 200, data
    assert (resp.headers[MODEL_HEADER], resp.headers[RULE_HEADER]) == (model, rule)
    assert FALLBACK_HEADER not in resp.headers and resp.headers[REASON_HEADER]
    served = {event["model"] for event in data} if stream else {data["model"]}
    assert served == {model}


@pytest.mark.parametrize(
    ("body", "param", "fragment"),
    [
        ({**GREEDY_SHORT, "model": FAST, "tools": [WEATHER]}, "tools", "does not support tools"),
        # the estimate only routes: the replica counts exactly and gives the 400
        (
            {"messages": [{"role": "user", "content": "word " * 9000}]},
            "messages",
            "maximum context length is 8192 tokens",
        ),
        (
            {**GREEDY_SHORT, "max_tokens": 2100, "model": FAST},
            "max_tokens",
            "maximum context length is 2048 tokens",
        ),
    ],
    ids=["tools-on-fast", "prompt-beyond-every-context", "max-tokens-beyond-fast"],
)
@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_request_no_model_can_serve_is_400_saying_why(
    http: httpx.Client, body: dict[str, Any], param: str, fragment: str, stream: bool
) -> None:
    resp, data = send(http, body, stream)
    assert resp.status_code == 400 and data["error"]["param"] == param, data
    assert fragment in data["error"]["message"]


def test_models_lists_ids_and_aliases_and_metrics_count_decisions(http: httpx.Client) -> None:
    models = http.get("/v1/models").json()["data"]
    assert [(m["id"], m["max_model_len"]) for m in models] == [
        (FAST, 2048),
        (MODEL, 8192),
        ("auto", None),
    ]
    send(http, GREEDY_SHORT, stream=False)
    metrics = http.get("/metrics")
    assert metrics.status_code == 200 and metrics.headers["content-type"].startswith("text/plain")
    line = f'ascend_router_requests_total{{model="{FAST}",rule="short-greedy",status="200"}}'
    assert line in metrics.text
    assert http.get("/health").json()["down"] == {}
