"""One bad request never takes a model out of service, on the real stack.

The local app answers malformed requests with 4xx OpenAI errors and keeps its health. A second
application (`/faults`) serves `faulty` (the real engine with injected faults,
`tests.faulty_engine`) in front of `steady`: a request's own fault fails it alone, a failed
first step falls over, and a dead engine loop ends its waiting requests at once, marks the model
down, and Serve's replacement replica serves again.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import pytest
import ray
from dashboards import Exposition
from serve_helpers import FAST, MODEL, local_args, side_app, side_model, wait_healthy

from router.dispatch import FALLBACK_HEADER, MODEL_HEADER
from tests.faulty_engine import LOOP_FAULT, REQUEST_FAULT, STALL_FAULT, STALL_S, STEP_FAULT

pytestmark = pytest.mark.serve

HI = [{"role": "user", "content": "Say hello."}]
OK_BODY = {"messages": HI, "max_tokens": 4}
ERROR_KEYS = {"message", "type", "param", "code"}


def _error(resp: httpx.Response, status: int) -> dict[str, Any]:
    assert resp.status_code == status, resp.text
    err = resp.json()["error"]
    assert set(err) == ERROR_KEYS and err["message"], err
    assert "Traceback" not in err["message"] and "Error(" not in err["message"], err
    return err


@pytest.fixture(scope="module", autouse=True)
def _all_serving(http: httpx.Client) -> None:
    wait_healthy(http)


def _health_ok(http: httpx.Client) -> None:
    body = http.get("/health").json()
    assert (body["status"], body["down"]) == ("ok", {}), body


def _engine_running(http: httpx.Client, model: str) -> float | None:
    """Requests in the running batches of `model`'s replicas, from `/metrics` (None: none
    reported)."""
    rows = Exposition.parse(http.get("/metrics").text).samples.get("vllm:num_requests_running")
    values = [v for labels, v in rows or [] if labels["model_name"] == model]
    return sum(values) if values else None


@pytest.mark.parametrize("value", [True, -1, 1.5, "x", [None]], ids=str)
@pytest.mark.parametrize("model", [FAST, None], ids=["fast", "auto"])
@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_malformed_json_schema_is_400_and_health_stays(
    http: httpx.Client, value: Any, model: str | None, stream: bool
) -> None:
    body: dict[str, Any] = {**OK_BODY, "stream": stream}
    body["response_format"] = {"type": "json_schema", "json_schema": value}
    if model:
        body["model"] = model
    err = _error(http.post("/v1/chat/completions", json=body), 400)
    assert err["param"].startswith("response_format.json_schema"), err
    _health_ok(http)
    assert http.post("/v1/chat/completions", json={**OK_BODY, "model": FAST}).status_code == 200


def test_deep_bodies_routes_and_methods_get_openai_errors(http: httpx.Client) -> None:
    deep = b'{"messages": ' + b"[" * 5000 + b"]" * 5000 + b"}"
    err = _error(http.post("/v1/chat/completions", content=deep), 400)
    assert err["code"] == "nesting_too_deep" and "max_json_depth" in err["message"]
    assert _error(http.get("/v1/nothing-here"), 404)["code"] == "not_found"
    assert _error(http.get("/v1/chat/completions"), 405)["code"] == "method_not_allowed"
    assert _error(http.post("/v1/chat/completions", content=b"{"), 400)["code"] == "invalid_json"
    _health_ok(http)


def test_limits_are_configurable_and_named(serve_url: str) -> None:
    from serve_helpers import extra_router

    limits = {"max_body_bytes": 2000, "max_messages": 2, "max_tools": 1}
    with extra_router(serve_url, "limited", {**local_args(), "request_limits": limits}) as url:
        with httpx.Client(base_url=url, timeout=60) as client:
            big = {**OK_BODY, "messages": [{"role": "user", "content": "x" * 3000}]}
            err = _error(client.post("/v1/chat/completions", json=big), 413)
            assert "max_body_bytes" in err["message"]
            many = {**OK_BODY, "messages": HI * 3}
            err = _error(client.post("/v1/chat/completions", json=many), 400)
            assert err["param"] == "messages" and "max_messages" in err["message"]
            fn = {"type": "function", "function": {"name": "f"}}
            tools = {**OK_BODY, "model": MODEL, "tools": [fn, fn]}
            err = _error(client.post("/v1/chat/completions", json=tools), 400)
            assert err["param"] == "tools" and "max_tools" in err["message"]


# ---- the fault-injection application ------------------------------------------------------


@pytest.fixture(scope="module")
def faults(serve_url: str) -> Iterator[httpx.Client]:
    """A client on the `/faults` application (deleted afterwards)."""
    faulty = side_model("faulty", engine_class="tests.faulty_engine:FaultyEngine")
    timeouts = {"first_token_timeout_s": 10, "inter_token_timeout_s": 4, "health_cooldown_s": 1}
    with side_app(serve_url, "faults", [faulty, side_model("steady")], **timeouts) as client:
        yield client


def _chat(client: httpx.Client, seed: int | None = None, **body: Any) -> httpx.Response:
    request = {"model": "faulty", "messages": HI, "max_tokens": 16, "ignore_eos": True, **body}
    if seed is not None:
        request["seed"] = seed
    return client.post("/v1/chat/completions", json=request)


def test_a_requests_own_fault_fails_it_alone(faults: httpx.Client) -> None:
    with ThreadPoolExecutor(4) as pool:
        futures = [pool.submit(_chat, faults, REQUEST_FAULT if i == 1 else None) for i in range(4)]
        responses = [f.result() for f in futures]
    err = _error(responses[1], 500)
    rid = responses[1].headers["x-request-id"]
    assert err["code"] == "internal_error" and rid in err["message"], err
    assert responses[1].headers[MODEL_HEADER] == "faulty"
    assert FALLBACK_HEADER not in responses[1].headers, "a request's own fault is not retried"
    for i in (0, 2, 3):
        assert responses[i].status_code == 200, responses[i].text
        assert responses[i].json()["usage"]["completion_tokens"] == 16
    _health_ok(faults)
    assert _chat(faults).status_code == 200
    # the traceback is in the server log, under the request id the client got
    logs = Path(ray._private.worker._global_node.get_session_dir_path()) / "logs"
    deadline = time.monotonic() + 30
    while not _traceback_logged(logs, rid):
        assert time.monotonic() < deadline, f"no log line with {rid} and its traceback"
        time.sleep(1)


def _traceback_logged(logs: Path, rid: str) -> bool:
    for path in logs.rglob("*"):
        if not path.is_file() or path.suffix not in (".log", ".err", ".out"):
            continue
        lines = path.read_text(errors="replace").splitlines()
        for i, line in enumerate(lines):
            if rid in line and any("Traceback" in n for n in lines[i + 1 : i + 3]):
                return True
    return False


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_a_failed_first_step_falls_over(faults: httpx.Client, stream: bool) -> None:
    body = {"messages": HI, "max_tokens": 8, "seed": STEP_FAULT, "stream": stream}
    with faults.stream("POST", "/v1/chat/completions", json=body) as resp:
        text = resp.read().decode()
    assert resp.status_code == 200, text
    assert (resp.headers[MODEL_HEADER], resp.headers[FALLBACK_HEADER]) == ("steady", "faulty")
    assert "[DONE]" in text if stream else json.loads(text)["model"] == "steady"
    _health_ok(faults)  # an engine error is not a replica fault


def test_a_stalled_stream_ends_with_an_error_and_frees_its_request(faults: httpx.Client) -> None:
    body = {"model": "faulty", "messages": HI, "max_tokens": 50, "stream": True}
    start = time.monotonic()
    with faults.stream("POST", "/v1/chat/completions", json={**body, "seed": STALL_FAULT}) as resp:
        events = [line[len("data: ") :] for line in resp.iter_lines() if line.startswith("data: ")]
    assert time.monotonic() - start < STALL_S, "the stall was waited out, not timed out"
    assert events[-1] == "[DONE]" and "no output for 4" in events[-2], events[-2:]
    assert json.loads(events[-2])["error"]["code"] == "engine_error"
    deadline = time.monotonic() + 3 * STALL_S  # the abort lands after the stalled step
    while _engine_running(faults, "faulty") != 0:
        assert time.monotonic() < deadline, "the stalled request still runs in the engine"
        time.sleep(1)
    _health_ok(faults)


def test_a_dead_engine_loop_fails_fast_and_the_replica_is_replaced(faults: httpx.Client) -> None:
    long = {"model": "faulty", "messages": HI, "max_tokens": 600, "ignore_eos": True}
    with ExitStack() as stack:
        client = stack.enter_context(httpx.Client(base_url=faults.base_url, timeout=120))
        held = []
        for _ in range(2):  # two streams that are decoding when the loop dies
            body = {**long, "stream": True}
            resp = stack.enter_context(client.stream("POST", "/v1/chat/completions", json=body))
            assert resp.status_code == 200
            lines = resp.iter_lines()
            assert next(lines).startswith("data: ")
            held.append(lines)
        start = time.monotonic()
        killer = _chat(faults, LOOP_FAULT)
        for lines in held:
            events = [line[len("data: ") :] for line in lines if line.startswith("data: ")]
            assert events[-1] == "[DONE]"
            assert json.loads(events[-2])["error"]["code"] == "engine_unavailable", events[-2]
        waited = time.monotonic() - start
    assert waited < 20, f"waiting streams took {waited:.0f} s to end"
    assert _error(killer, 503)["code"] == "model_unavailable"
    body = faults.get("/health").json()
    assert body["status"] == "degraded" and "faulty" in body["down"], body
    moved = faults.post("/v1/chat/completions", json={"messages": HI, "max_tokens": 4})
    assert moved.status_code == 200 and moved.headers[MODEL_HEADER] == "steady"
    deadline = time.monotonic() + 300  # Serve's health check replaces the replica
    while faults.get("/health").json()["status"] != "ok":
        assert time.monotonic() < deadline, faults.get("/health").json()
        time.sleep(2)
    assert _chat(faults).status_code == 200
