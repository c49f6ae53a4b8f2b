"""`/metrics` on real Ray Serve against the dashboards that read it: every series that vLLM's own
Grafana dashboards (pinned in tests/data/vllm_dashboards/) and configs/monitoring/ query is
served, with the labels the queries use and figures from the traffic sent; and the engine
metrics cover every replica of a model (a second application runs one model on 2 replicas).

Prometheus and Grafana do not run here: the queries are parsed (promql-parser) and checked
against the exposition text.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import ray
from dashboards import (
    OUR_DASHBOARD,
    VLLM_DASHBOARDS,
    Exposition,
    Selection,
    dashboard_selections,
    scrape_until,
)
from serve_helpers import FAST, MODEL, post_stream, side_app, side_model

from router.app import model_deployment_name

pytestmark = pytest.mark.serve

REPLICAS_APP = "replicas"


def chat(model: str, content: str, **extra: Any) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": content}], **extra}


def finished(exposition: Exposition, model: str) -> float:
    return exposition.total("vllm:request_success_total", model_name=model)


@pytest.fixture(scope="module")
def after_traffic(http: httpx.Client) -> Exposition:
    """`/metrics` of the session app once the traffic below is in its figures: both models,
    chat and legacy completions, streamed and not, `n` = 2, stop and length endings."""
    before = Exposition.parse(http.get("/metrics").text)
    sent = {FAST: 0, MODEL: 0}
    for model in (FAST, MODEL):
        resp = http.post("/v1/chat/completions", json=chat(model, "Say hi.", max_tokens=8))
        assert resp.status_code == 200, resp.text
        status, _ = post_stream(
            http,
            "/v1/chat/completions",
            chat(model, "Count to five.", max_tokens=6, stream=True, temperature=0),
        )
        assert status == 200
        body = {"model": model, "prompt": "The sky is", "max_tokens": 5, "n": 2}
        assert http.post("/v1/completions", json=body).status_code == 200
        sent[model] += 4  # engine requests: 1 + 1 + 2 samples
    return scrape_until(
        http,
        "/metrics",
        lambda e: all(finished(e, m) >= finished(before, m) + n for m, n in sent.items()),
        "the finished requests",
    )


@pytest.mark.parametrize(
    "dashboard", [*VLLM_DASHBOARDS, OUR_DASHBOARD], ids=lambda p: p.name.removesuffix(".json")
)
def test_every_series_a_dashboard_queries_is_served_with_its_labels(
    after_traffic: Exposition, dashboard: Any
) -> None:
    wanted = dashboard_selections(dashboard)
    assert wanted, f"no query found in {dashboard}"
    missing: list[Selection] = []
    for sel in wanted:
        rows = after_traffic.samples.get(sel.metric, [])
        if not rows or not all(sel.labels <= labels.keys() for labels, _ in rows):
            missing.append(sel)
    assert not missing, "\n".join(f"{s.metric} with {sorted(s.labels)}: {s.expr}" for s in missing)


def test_the_dashboards_histograms_hold_the_traffic(after_traffic: Exposition) -> None:
    histograms = {
        s.metric.rsplit("_", 1)[0]
        for d in [*VLLM_DASHBOARDS, OUR_DASHBOARD]
        for s in dashboard_selections(d)
        if s.metric.startswith("vllm:") and s.metric.endswith(("_bucket", "_sum", "_count"))
    }
    assert "vllm:request_queue_time_seconds" in histograms
    for model in (FAST, MODEL):
        for name in sorted(histograms):
            assert after_traffic.total(f"{name}_count", model_name=model) > 0, (name, model)
        # the old TPOT name holds every gap between tokens, as vLLM's ITL does
        itl = after_traffic.total("vllm:inter_token_latency_seconds_count", model_name=model)
        tpot = after_traffic.total("vllm:time_per_output_token_seconds_count", model_name=model)
        per_request = after_traffic.total(
            "vllm:request_time_per_output_token_seconds_count", model_name=model
        )
        assert itl == tpot and itl > per_request > 0


def test_every_vllm_series_names_its_model_and_replica(after_traffic: Exposition) -> None:
    for name, rows in after_traffic.samples.items():
        if not name.startswith("vllm:"):
            continue
        for labels, _ in rows:
            assert {"model_name", "replica"} <= labels.keys(), (name, labels)
            assert labels["model_name"] in (FAST, MODEL)
    reasons = {
        labels["finished_reason"]
        for labels, _ in after_traffic.samples["vllm:request_success_total"]
    }
    assert {"stop", "length", "abort", "error"} <= reasons


# ---- every replica -------------------------------------------------------------------------


def replica_ids(model: str) -> set[str]:
    """The Serve ids of the live replicas of a model of the side app (Ray's named actors)."""
    prefix = f"SERVE_REPLICA::{REPLICAS_APP}#{model_deployment_name(model)}#"
    names = [a["name"] for a in ray.util.list_named_actors(all_namespaces=True)]
    return {n.removeprefix(prefix) for n in names if n.startswith(prefix)}


@pytest.fixture(scope="module")
def two_replicas(serve_url: str) -> Iterator[httpx.Client]:
    """A client on a side application serving `smollm2-fast` on 2 replicas."""
    model = side_model(FAST)
    model["deployment"] = {**model["deployment"], "num_replicas": 2}
    with side_app(serve_url, REPLICAS_APP, [model]) as client:
        yield client


def served_replicas(exposition: Exposition) -> set[str]:
    return {
        labels["replica"]
        for labels, _ in exposition.samples.get("vllm:num_requests_running", [])
        if labels["model_name"] == FAST
    }


def test_metrics_cover_every_replica_and_drop_a_dead_one(two_replicas: httpx.Client) -> None:
    ids = replica_ids(FAST)
    assert len(ids) == 2, ids
    scrape_until(two_replicas, "/metrics", lambda e: served_replicas(e) == ids, f"{sorted(ids)}")

    sent = 8
    for i in range(sent):
        body = chat(FAST, f"Name a colour ({i}).", max_tokens=4, temperature=0)
        assert two_replicas.post("/v1/chat/completions", json=body).status_code == 200
    exposition = scrape_until(
        two_replicas, "/metrics", lambda e: finished(e, FAST) >= sent, f"{sent} finished requests"
    )
    # a correct sum: each replica counts its own requests, and together they count all of them
    assert finished(exposition, FAST) == sent
    per_replica = [
        exposition.total("vllm:request_success_total", model_name=FAST, replica=r) for r in ids
    ]
    assert sum(per_replica) == sent

    # a replica that dies without a word stops pushing: the board drops it after its TTL, and
    # the replica Serve starts in its place reports from its start
    dead = sorted(ids)[0]
    actor = f"SERVE_REPLICA::{REPLICAS_APP}#{model_deployment_name(FAST)}#{dead}"
    ray.kill(ray.get_actor(actor, namespace="serve"), no_restart=True)

    def dead_one_gone(exposition: Exposition) -> bool:
        live = replica_ids(FAST)
        return dead not in live and len(live) == 2 and served_replicas(exposition) == live

    scrape_until(two_replicas, "/metrics", dead_one_gone, f"replica {dead} gone, a new one served")
