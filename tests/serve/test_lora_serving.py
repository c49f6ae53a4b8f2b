"""Multi-LoRA serving over real HTTP: SmolLM2 with two start-up adapters (each a model id with
`parent`), routed by id and by policy, mixed with the base model, runtime load and unload while
other requests stream (on two replicas: a load reaches both), refusals as 4xx, and the LoRA
metrics. A side application of its own, with adapters written by `peft` into a temporary
`lora_root`."""

from __future__ import annotations

import os
import re
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import ray
import torch
from dashboards import Exposition, scrape_until
from ray.util import list_named_actors
from safetensors.torch import load_file, save_file
from serve_helpers import FAST, post_stream, side_app, side_model, stream_text, wait_healthy

from fixtures.tiny_adapters import TinyLoraSpec, make_tiny_loras

pytestmark = pytest.mark.serve

BASE = "smollm2-lora"
SYNC_S = 0.5
"""`runtime_sync_s` of the side application: how soon every replica follows a load."""
ADAPTERS = [
    TinyLoraSpec("lora-a", rank=8, seed=1, std=0.2),
    TinyLoraSpec("lora-b", rank=8, seed=2, std=0.2, target_modules=("q_proj", "v_proj")),
    TinyLoraSpec("lora-c", rank=16, seed=3, std=0.2),
    TinyLoraSpec("too-big", rank=32, seed=4),
]
PROMPT = [{"role": "user", "content": "Name three colours."}]


@pytest.fixture(scope="module")
def lora_root(tmp_path_factory: pytest.TempPathFactory, smollm2_path: str) -> Path:
    root = tmp_path_factory.mktemp("loras")
    make_tiny_loras(smollm2_path, root, ADAPTERS)
    for bad in ("nan", "fifo"):  # broken copies of lora-c
        (root / bad).mkdir()
        weights = load_file(str(root / "lora-c" / "adapter_model.safetensors"))
        if bad == "nan":  # 0 * NaN is NaN: it would reach other requests' rows in a batch
            weights = {k: torch.full_like(v, float("nan")) for k, v in weights.items()}
        save_file(weights, str(root / bad / "adapter_model.safetensors"))
    shutil.copy(root / "lora-c" / "adapter_config.json", root / "nan")
    os.mkfifo(root / "fifo" / "adapter_config.json")  # reading it would block forever
    return root


@pytest.fixture(scope="module")
def app(serve_url: str, lora_root: Path) -> Iterator[httpx.Client]:
    lora = {
        "lora_modules": [
            {"name": "lora-a", "path": str(lora_root / "lora-a")},
            {"name": "lora-b", "path": str(lora_root / "lora-b")},
        ],
        "max_loras": 3,
        "max_lora_rank": 16,
        "allow_runtime_lora": True,
        "lora_root": str(lora_root),
        "runtime_sync_s": SYNC_S,
    }
    model = side_model(BASE, FAST)
    model["engine"]["lora"] = lora
    model["deployment"]["num_replicas"] = 2
    model["deployment"]["ray_actor_options"] = {"num_cpus": 0.1}
    policy = {
        "aliases": {"auto": [BASE, "lora-a"]},
        "rules": [{"name": "finance", "when": {"tenant": ["finance"]}, "targets": ["lora-a"]}],
        "default_targets": [BASE],
    }
    with side_app(serve_url, "lora", [model], policy=policy) as client:
        yield client


def chat(client: httpx.Client, model: str, max_tokens: int = 8, **extra: Any) -> httpx.Response:
    body = {"model": model, "messages": PROMPT, "max_tokens": max_tokens, "temperature": 0}
    return client.post("/v1/chat/completions", json={**body, **extra})


def load(client: httpx.Client, name: str, path: str) -> httpx.Response:
    return client.post("/v1/load_lora_adapter", json={"lora_name": name, "lora_path": path})


def unload(client: httpx.Client, name: str) -> httpx.Response:
    return client.post("/v1/unload_lora_adapter", json={"lora_name": name})


def loaded_replicas(client: httpx.Client, name: str) -> set[str]:
    """The replica ids whose metrics list `name` as loaded."""
    text = client.get("/metrics").text
    return {
        re.findall(r'replica="([^"]+)"', line)[0]
        for line in text.splitlines()
        if line.startswith("ascend_router_lora_adapter_loaded{") and f'lora_name="{name}"' in line
    }


def loaded_on(client: httpx.Client, name: str) -> int:
    """Replicas whose metrics list `name` as loaded."""
    return len(loaded_replicas(client, name))


def wait_loaded_on(client: httpx.Client, name: str, replicas: int, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while loaded_on(client, name) != replicas:
        assert time.monotonic() < deadline, f"{name} not on {replicas} replica(s)"
        time.sleep(0.5)


def test_models_lists_adapters_with_parent(app: httpx.Client, lora_root: Path) -> None:
    ids = {m["id"]: m for m in app.get("/v1/models").json()["data"]}
    assert list(ids) == [BASE, "lora-a", "lora-b", "auto"]
    assert ids["lora-a"]["parent"] == ids["lora-b"]["parent"] == BASE
    assert ids[BASE]["parent"] is None
    card = app.get("/v1/models/lora-b").json()
    assert card["root"] == str(lora_root / "lora-b")
    assert card["max_model_len"] == ids[BASE]["max_model_len"]


def test_each_adapter_serves_through_the_openai_client(app: httpx.Client) -> None:
    client = openai.OpenAI(base_url=f"{app.base_url}v1", api_key="unused", max_retries=0)
    texts = {}
    for model in (BASE, "lora-a", "lora-b"):
        raw = client.chat.completions.with_raw_response.create(
            model=model,
            messages=PROMPT,
            max_tokens=12,
            temperature=0,  # type: ignore[arg-type]
        )
        resp = raw.parse()
        assert resp.model == model
        assert raw.headers["x-ascend-router-model"] == model
        texts[model] = resp.choices[0].message.content
        again = client.chat.completions.create(
            model=model,
            messages=PROMPT,
            max_tokens=12,
            temperature=0,  # type: ignore[arg-type]
        )
        assert again.choices[0].message.content == texts[model]  # deterministic per adapter
    assert len(set(texts.values())) == 3, texts  # each adapter changes the answer
    done = client.completions.create(model="lora-b", prompt="Red, green and", max_tokens=4)
    assert done.model == "lora-b" and done.usage is not None
    assert done.usage.completion_tokens == 4


def test_adapters_and_base_stream_together(app: httpx.Client) -> None:
    """Two streams each of the base model and two adapters at once: one mixed batch. (Token
    equality of mixed batches with requests alone is tested on the engine, in fp32:
    tests/engine/test_lora_engine.py.)"""
    results: dict[str, list[str]] = {BASE: [], "lora-a": [], "lora-b": []}

    def run(model: str) -> None:
        body = {"model": model, "messages": PROMPT, "max_tokens": 16, "temperature": 0}
        status, (events, done) = post_stream(app, "/v1/chat/completions", {**body, "stream": True})
        assert status == 200 and done
        assert {e["model"] for e in events} == {model}
        results[model].append(stream_text(events))

    threads = [threading.Thread(target=run, args=(m,)) for _ in range(2) for m in results]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(len(texts) == 2 and all(texts) for texts in results.values()), results
    assert not set(results[BASE]) & set(results["lora-a"])  # the adapter changed the answer


def test_policy_sends_a_tenant_to_its_adapter(app: httpx.Client) -> None:
    body = {"messages": PROMPT, "max_tokens": 4}
    resp = app.post(
        "/v1/chat/completions", json=body, headers={"x-ascend-router-tenant": "finance"}
    )
    assert resp.status_code == 200
    assert resp.headers["x-ascend-router-model"] == "lora-a"
    assert resp.headers["x-ascend-router-rule"] == "finance"
    assert resp.json()["model"] == "lora-a"
    other = app.post("/v1/chat/completions", json=body)
    assert other.headers["x-ascend-router-model"] == BASE


def test_load_serve_unload_reload_while_others_stream(app: httpx.Client, lora_root: Path) -> None:
    errors: list[str] = []
    stop = threading.Event()

    def keep_streaming(model: str) -> None:
        while not stop.is_set():
            body = {"model": model, "messages": PROMPT, "max_tokens": 24, "stream": True}
            status, result = post_stream(app, "/v1/chat/completions", body)
            if status != 200 or not result[1] or any("error" in e for e in result[0]):
                errors.append(f"{model}: {status} {result}")

    assert load(app, "lora-c", "lora-c").status_code == 200  # relative to lora_root
    wait_loaded_on(app, "lora-c", 2)  # the load reached both replicas
    # the two answers compared at the end run alone: a LoRA row's last bits may depend on the
    # adapters of its neighbours in a step, which can flip a greedy token (seen once in CI)
    served = chat(app, "lora-c")
    assert served.status_code == 200 and served.json()["model"] == "lora-c"
    listed = {m["id"]: m for m in app.get("/v1/models").json()["data"]}
    assert listed["lora-c"]["parent"] == BASE
    streams = [threading.Thread(target=keep_streaming, args=(m,)) for m in (BASE, "lora-a")]
    for t in streams:
        t.start()
    try:
        assert unload(app, "lora-c").text == "Success: LoRA adapter 'lora-c' removed successfully."
        gone = chat(app, "lora-c")
        assert gone.status_code == 404 and gone.json()["error"]["code"] == "model_not_found"
        wait_loaded_on(app, "lora-c", 0)
        assert load(app, "lora-c", str(lora_root / "lora-c")).status_code == 200
        reloaded = chat(app, "lora-c")
        assert reloaded.status_code == 200 and reloaded.json()["model"] == "lora-c"
    finally:
        stop.set()
        for t in streams:
            t.join()
    assert (
        chat(app, "lora-c").json()["choices"][0]["message"]["content"]
        == served.json()["choices"][0]["message"]["content"]
    )
    assert not errors, errors[:3]
    assert unload(app, "lora-c").status_code == 200


def test_a_restarted_replica_loads_the_runtime_adapters(app: httpx.Client) -> None:
    """A replica that Serve starts later (here: after one dies) loads the runtime adapters from
    the registry without any request for them."""
    assert load(app, "lora-e", "lora-c").status_code == 200
    wait_loaded_on(app, "lora-e", 2)
    replicas = [
        a
        for a in list_named_actors(all_namespaces=True)
        if a["namespace"] == "serve" and "lora#model-" in a["name"]
    ]
    assert len(replicas) == 2, replicas
    before = loaded_replicas(app, "lora-e")
    ray.kill(ray.get_actor(replicas[0]["name"], namespace="serve"), no_restart=True)
    deadline = time.monotonic() + 180
    while not loaded_replicas(app, "lora-e") - before:  # a new replica id, with lora-e
        assert time.monotonic() < deadline, "no new replica loaded lora-e"
        time.sleep(1)
    wait_healthy(app)
    assert chat(app, "lora-e", 2).status_code == 200
    assert unload(app, "lora-e").status_code == 200


def test_unload_drains_running_requests(app: httpx.Client) -> None:
    assert load(app, "lora-d", "lora-c").status_code == 200
    outcome: dict[str, Any] = {}

    def long_stream() -> None:
        body = {"model": "lora-d", "messages": PROMPT, "max_tokens": 120, "stream": True}
        body["ignore_eos"] = True
        outcome["result"] = post_stream(app, "/v1/chat/completions", body)

    thread = threading.Thread(target=long_stream)
    thread.start()
    time.sleep(1.5)  # the stream is running
    assert unload(app, "lora-d").status_code == 200
    thread.join()
    status, (events, done) = outcome["result"]
    assert status == 200 and done and not any("error" in e for e in events)
    assert events[-1]["choices"][0]["finish_reason"] == "length"
    wait_loaded_on(app, "lora-d", 0)  # unloaded on every replica once the stream ended


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        ({"lora_name": "x1", "lora_path": "/etc"}, 400, "invalid_lora_adapter"),
        ({"lora_name": "x2", "lora_path": "../../.."}, 400, "invalid_lora_adapter"),
        ({"lora_name": "x3", "lora_path": "missing"}, 400, "invalid_lora_adapter"),
        ({"lora_name": "x4", "lora_path": "too-big"}, 400, "invalid_lora_adapter"),
        ({"lora_name": "x7", "lora_path": "nan"}, 400, "invalid_lora_adapter"),
        ({"lora_name": "x8", "lora_path": "fifo"}, 400, "invalid_lora_adapter"),
        ({"lora_name": "lora-a", "lora_path": "lora-c"}, 400, "lora_adapter_exists"),
        ({"lora_name": BASE, "lora_path": "lora-c"}, 400, "lora_adapter_exists"),
        ({"lora_name": "auto", "lora_path": "lora-c"}, 400, "lora_adapter_exists"),
        ({"lora_name": "bad name/x", "lora_path": "lora-c"}, 400, None),
        ({"lora_path": "lora-c"}, 400, None),
        ({"lora_name": "x5", "lora_path": "lora-c", "model": "nope"}, 400, None),
        ({"lora_name": "x6", "lora_path": "lora-c", "extra": 1}, 400, None),
    ],
)
def test_bad_loads_are_4xx_and_leave_nothing(
    app: httpx.Client, body: dict[str, Any], status: int, code: str | None
) -> None:
    resp = app.post("/v1/load_lora_adapter", json=body)
    assert resp.status_code == status, resp.text
    error = resp.json()["error"]
    assert error["code"] == code and error["message"]
    if body.get("lora_name", "lora-a") not in ("lora-a", BASE, "auto"):
        assert chat(app, body["lora_name"]).status_code in (400, 404)  # nothing registered
    assert chat(app, BASE, 2).status_code == 200  # still serving


def test_bad_unloads_are_4xx(app: httpx.Client, serve_url: str) -> None:
    missing = unload(app, "never-loaded")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "model_not_found"
    static = unload(app, "lora-a")
    assert static.status_code == 400 and "start-up" in static.json()["error"]["message"]
    assert chat(app, "lora-a").status_code == 200
    off = httpx.post(f"{serve_url}/v1/load_lora_adapter", json={"lora_name": "z", "lora_path": "z"})
    assert off.status_code == 403 and off.json()["error"]["code"] == "runtime_lora_disabled"


def test_lora_metrics(app: httpx.Client) -> None:
    assert chat(app, "lora-b", 2).status_code == 200

    def counted(exposition: Exposition) -> bool:  # the replica pushes every 2 s
        return exposition.total("ascend_router_lora_requests_total", lora_name="lora-b") > 0

    scrape_until(app, "/metrics", counted, "a lora-b request counted")
    text = app.get("/metrics").text
    counts = [
        line
        for line in text.splitlines()
        if line.startswith("ascend_router_lora_requests_total{") and 'lora_name="lora-b"' in line
    ]
    assert counts and all(f'model_name="{BASE}"' in line for line in counts)
    assert sum(float(line.rsplit(" ", 1)[1]) for line in counts) >= 1
    info = [line for line in text.splitlines() if line.startswith("vllm:lora_requests_info{")]
    # one per replica (a replica killed earlier may linger until the board's TTL)
    assert len(info) >= 2 and all('max_lora="3"' in line for line in info)
    assert loaded_on(app, "lora-a") >= 2
