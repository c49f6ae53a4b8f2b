"""The local app over real HTTP with the official `openai` client, and through a handle."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import openai
import pytest
from ray import serve
from serve_helpers import FAST, MODEL, local_args, post_stream, stream_text

from configs.model_config import ModelDeploymentConfig
from deployments.streaming.token_timing import TIMING_HEADER
from engine.llm_engine import LLMEngine
from engine.sampling_params import SamplingParams
from load_tests.token_stamps import STAGES, StampedStream, token_stages
from router.app import APP_NAME, model_deployment_name

pytestmark = pytest.mark.serve

PARIS = [{"role": "user", "content": "What is the capital of France? Answer in one sentence."}]


def _engine_stats():
    handle = serve.get_deployment_handle(model_deployment_name(MODEL), app_name=APP_NAME)
    return handle.stats.remote().result()


def _wait_idle(timeout: float = 30.0):
    deadline = time.monotonic() + timeout
    while True:
        stats = _engine_stats()
        idle = stats.num_running == stats.num_waiting == 0
        if idle and stats.num_free_blocks == stats.num_blocks or time.monotonic() > deadline:
            return stats
        time.sleep(0.2)


def test_health_and_models(http: httpx.Client, client: openai.OpenAI) -> None:
    """`/health` serves, with each replica's admission limits (the configured ones: no `slo`)."""
    configured = {m["model_id"]: m["engine"] for m in local_args()["models"]}
    deadline = time.monotonic() + 30
    while MODEL not in (body := http.get("/health").json())["batch_limits"]:
        assert time.monotonic() < deadline, body  # the replica's first metrics push
        time.sleep(0.5)
    assert body["status"] == "ok"
    for model, replicas in body["batch_limits"].items():
        assert len(replicas) == 1, replicas
        (limits,) = replicas.values()
        assert limits["max_num_seqs"] == configured[model].get("max_num_seqs", 64)
    assert [m.id for m in client.models.list().data] == [FAST, MODEL, "auto"]


def test_paris_nonstream_and_stream(client: openai.OpenAI, http: httpx.Client) -> None:
    resp = client.chat.completions.create(model=MODEL, messages=PARIS, temperature=0)
    text = resp.choices[0].message.content
    assert "Paris" in text and resp.choices[0].finish_reason == "stop"
    assert resp.usage.total_tokens == resp.usage.prompt_tokens + resp.usage.completion_tokens
    chunks = list(
        client.chat.completions.create(model=MODEL, messages=PARIS, temperature=0, stream=True)
    )
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == text
    assert chunks[-1].choices[0].finish_reason == "stop"
    status, (events, done) = post_stream(
        http, "/v1/chat/completions", {"messages": PARIS, "temperature": 0, "stream": True}
    )
    assert status == 200 and done and stream_text(events) == text


def test_timing_header_stamps_every_token_in_path_order(
    client: openai.OpenAI, http: httpx.Client
) -> None:
    """`x-ascend-router-timing: 1` (`load_tests.token_breakdown`): every content event comes
    with the replica's and the router's stamps, in path order up to the client's arrival time;
    the `openai` client ignores the comment lines and reads the same greedy text."""
    body = {"model": MODEL, "messages": PARIS, "temperature": 0, "max_tokens": 12}
    plain = client.chat.completions.create(**body, stream=True)
    expected = "".join(c.choices[0].delta.content or "" for c in plain)
    stamped = client.chat.completions.create(
        **body, stream=True, extra_headers={TIMING_HEADER: "1"}
    )
    assert "".join(c.choices[0].delta.content or "" for c in stamped) == expected
    stream = StampedStream()
    with http.stream(
        "POST", "/v1/chat/completions", json={**body, "stream": True}, headers={TIMING_HEADER: "1"}
    ) as resp:
        assert resp.status_code == 200
        for line in resp.iter_lines():
            if not stream.add_line(line, time.monotonic()):
                break
    assert len(stream.events) >= 5
    for ev in stream.events:
        assert ev.replica is not None and ev.relay is not None
        order = [ev.replica[k] for k in ("step_started", "step_ended", "received", "built")]
        order += [ev.replica["encoded"], ev.relay["received"], ev.relay["sent"], ev.arrived]
        assert order == sorted(order), order
    rows = token_stages(stream)
    assert rows and all(set(STAGES) - {"client"} <= set(r) for r in rows)


def test_eight_concurrent_streams_then_all_blocks_free(client: openai.OpenAI) -> None:
    prompts = [f"Count from {i} to {i + 5}, separated by commas." for i in range(8)]

    def run(prompt: str, stream: bool) -> tuple[str, str]:
        msgs = [{"role": "user", "content": prompt}]
        if not stream:
            r = client.chat.completions.create(
                model=MODEL, messages=msgs, temperature=0, max_tokens=32
            )
            return r.choices[0].message.content, r.choices[0].finish_reason
        chunks = list(
            client.chat.completions.create(
                model=MODEL, messages=msgs, temperature=0, max_tokens=32, stream=True
            )
        )
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        return text, chunks[-1].choices[0].finish_reason

    with ThreadPoolExecutor(8) as pool:
        streamed = list(pool.map(lambda p: run(p, True), prompts))
    for prompt, got in zip(prompts, streamed):
        assert got == run(prompt, False)
        assert got[1] in ("stop", "length")
    stats = _wait_idle()
    assert stats.num_free_blocks == stats.num_blocks, stats


@pytest.mark.parametrize(
    ("body", "status", "param"),
    [
        (b"{not json", 400, None),
        ({"model": MODEL}, 400, "messages"),
        ({"model": MODEL, "messages": []}, 400, "messages"),
        ({"model": MODEL, "messages": "hi"}, 400, "messages"),
        (
            {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 0},
            400,
            "max_tokens",
        ),
        (
            {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": "x"},
            400,
            "max_tokens",
        ),
        (
            {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 9999},
            400,
            "max_tokens",
        ),
        (
            {"model": MODEL, "messages": [{"role": "user", "content": "hi " * 9000}]},
            400,
            "messages",
        ),
        ({"model": "no-such-model", "messages": [{"role": "user", "content": "hi"}]}, 404, "model"),
        (
            {"model": MODEL, "messages": [{"role": "wizard", "content": "hi"}]},
            400,
            "messages[0].role",
        ),
        (
            {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "temperature": 3},
            400,
            "temperature",
        ),
    ],
    ids=[
        "malformed-json",
        "missing-messages",
        "empty-messages",
        "messages-wrong-type",
        "max-tokens-zero",
        "max-tokens-wrong-type",
        "max-tokens-beyond-context",
        "prompt-beyond-context",
        "unknown-model",
        "bad-role",
        "temperature-out-of-range",
    ],
)
@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_bad_input_gets_openai_error(http: httpx.Client, body, status, param, stream) -> None:
    if isinstance(body, dict):
        body = {**body, "stream": stream}
        resp = http.post("/v1/chat/completions", json=body)
    else:
        resp = http.post("/v1/chat/completions", content=body)
    assert resp.status_code == status, resp.text
    err = resp.json()["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["message"]
    assert err["param"] == param
    ok = http.post("/v1/chat/completions", json={"messages": PARIS, "max_tokens": 4})
    assert ok.status_code == 200


def test_handle_equals_http(http: httpx.Client) -> None:
    body = {"model": MODEL, "messages": PARIS, "temperature": 0, "max_tokens": 16}
    via_http = http.post("/v1/chat/completions", json=body).json()
    handle = serve.get_app_handle(APP_NAME)
    via_handle = handle.chat.remote(body).result()
    dumped = via_handle.model_dump(mode="json")
    for key in ("id", "created"):
        dumped.pop(key), via_http.pop(key)
    assert dumped == via_http
    chunks = list(handle.options(stream=True).chat.remote({**body, "stream": True}))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == via_http["choices"][0]["message"]["content"]
    comp = handle.completions.remote({"model": MODEL, "prompt": "Paris is", "max_tokens": 4})
    assert comp.result().object == "text_completion"


def test_client_disconnect_aborts_and_frees_blocks(serve_url: str) -> None:
    body = {"messages": PARIS, "max_tokens": 2000, "ignore_eos": True, "stream": True}
    with httpx.Client(base_url=serve_url, timeout=60) as c:
        with c.stream("POST", "/v1/chat/completions", json=body) as resp:
            lines = resp.iter_lines()
            for _ in range(6):
                next(lines)
    stats = _wait_idle()
    assert stats.num_running == 0 and stats.num_free_blocks == stats.num_blocks, stats


def test_metrics_include_engine_metrics_with_vllm_names(http: httpx.Client) -> None:
    http.post("/v1/chat/completions", json={"model": MODEL, "messages": PARIS, "max_tokens": 4})
    text = http.get("/metrics").text
    for name in (
        "vllm:num_requests_running",
        "vllm:kv_cache_usage_perc",
        "vllm:prefix_cache_hits_total",
        "vllm:generation_tokens_total",
        "vllm:time_to_first_token_seconds_bucket",
        "ascend_router_requests_total",
    ):
        assert name in text, name
    assert f'model_name="{MODEL}"' in text
    assert text.count("# TYPE vllm:num_requests_running gauge") == 1


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_masked_alternatives_have_finite_logprobs(http: httpx.Client, stream: bool) -> None:
    """A grammar masks most of the vocabulary (-inf): JSON carries -9999.0 instead (found by
    fuzzing: the non-streamed body failed to serialise)."""
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "Give me a JSON object."}],
        "response_format": {"type": "json_object"},
        "logprobs": True,
        "top_logprobs": 20,
        "max_tokens": 4,
        "stream": stream,
    }
    if stream:
        status, data = post_stream(http, "/v1/chat/completions", body)
    else:
        resp = http.post("/v1/chat/completions", json=body)
        status, data = resp.status_code, ([resp.json()], True)
    assert status == 200, data
    values = [lp for doc in data[0] for lp in _logprobs(doc)]
    assert values and all(-9999.0 <= v <= 0.0 for v in values), values
    assert -9999.0 in values, "expected masked alternatives among the top 20"


def _logprobs(doc: object) -> list[float]:
    """Every `logprob` value in a response document."""
    if isinstance(doc, dict):
        own = [doc["logprob"]] if "logprob" in doc else []
        return own + [v for value in doc.values() for v in _logprobs(value)]
    if isinstance(doc, list):
        return [v for item in doc for v in _logprobs(item)]
    return []


def test_tokenize_equals_prefill_and_detokenize(client: openai.OpenAI, http: httpx.Client) -> None:
    """/tokenize gives the ids the engine prefills (chat: `usage.prompt_tokens`; prompt: the
    completion endpoint's), routed like the request; /detokenize inverts it; bad input is a
    400 in OpenAI's shape and the server goes on serving."""
    resp = client.chat.completions.create(model=MODEL, messages=PARIS, max_tokens=1)
    chat = http.post("/tokenize", json={"model": MODEL, "messages": PARIS, "return_prompt": True})
    assert chat.status_code == 200 and chat.headers["x-ascend-router-model"] == MODEL
    data = chat.json()
    assert data["count"] == len(data["tokens"]) == resp.usage.prompt_tokens
    assert data["prompt"].rstrip().endswith("assistant")
    text = "The capital of France is"
    done = client.completions.create(model=MODEL, prompt=text, max_tokens=1)
    plain = http.post(
        "/tokenize", json={"model": MODEL, "prompt": text, "add_special_tokens": False}
    )
    assert plain.json()["count"] == done.usage.prompt_tokens
    back = http.post("/detokenize", json={"model": MODEL, "tokens": plain.json()["tokens"]})
    assert back.json() == {"prompt": text}
    auto = http.post("/tokenize", json={"prompt": text, "return_token_strs": True})
    assert auto.status_code == 200 and len(auto.json()["token_strs"]) == auto.json()["count"]
    for path, body, param in [
        ("/tokenize", {"model": MODEL, "messages": []}, "messages"),
        (
            "/tokenize",
            {"model": MODEL, "messages": PARIS, "chat_template_kwargs": {"tools": 1}},
            "chat_template_kwargs",
        ),
        ("/detokenize", {"model": MODEL, "tokens": [10**9]}, "tokens"),
        ("/detokenize", {"model": MODEL}, "tokens"),
    ]:
        bad = http.post(path, json=body)
        assert bad.status_code == 400, (path, body, bad.text)
        assert bad.json()["error"]["param"] == param
    assert http.post("/tokenize", json={"model": "nope", "prompt": "x"}).status_code == 404
    assert http.post("/tokenize", json={"model": MODEL, "prompt": text}).status_code == 200


def test_greedy_tokens_over_http_equal_the_engines_offline(
    client: openai.OpenAI, http: httpx.Client
) -> None:
    """The serving path (router, the gRPC stream between replicas, SSE) changes no token:
    greedy completions over HTTP, streamed and not, equal what the model's engine, built in
    this process from the served config, generates offline for the same prompt ids."""
    spec = next(m for m in local_args()["models"] if m["model_id"] == MODEL)
    config = ModelDeploymentConfig.model_validate(spec)
    engine = LLMEngine(config.source.resolve(), config.engine)
    params = SamplingParams(max_tokens=24, temperature=0.0, ignore_eos=True)
    texts = ["The capital of France is", "def fibonacci(n):", "Once upon a time, in a"]
    for i, text in enumerate(texts):
        ids = http.post("/tokenize", json={"model": MODEL, "prompt": text}).json()["tokens"]
        engine.add_request(f"offline-{i}", ids, params)
        offline: list[int] = []
        while engine.has_unfinished():
            for out in engine.step():
                offline.extend(out.new_token_ids)
        assert len(offline) == 24
        want = http.post("/detokenize", json={"model": MODEL, "tokens": offline}).json()
        body = {"model": MODEL, "prompt": ids, "max_tokens": 24, "temperature": 0}
        extra = {"ignore_eos": True}
        done = client.completions.create(**body, extra_body=extra)
        assert done.usage is not None and done.usage.completion_tokens == 24
        assert done.choices[0].text == want["prompt"], text
        streamed = client.completions.create(**body, stream=True, extra_body=extra)
        assert "".join(c.choices[0].text for c in streamed if c.choices) == want["prompt"], text
