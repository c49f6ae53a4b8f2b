"""The router's own series exist from start-up: every `ascend_router_*` series that the shipped
Grafana dashboard queries, with the labels it reads, is in a fresh router's `/metrics` for
configs/local.yaml, before any request (requests per status aside: the status is only known
once a request is answered). tests/serve/test_monitoring.py checks every query after traffic."""

from __future__ import annotations

from app_args import local_app_args

from configs.model_config import RouterAppConfig
from router.metrics import RouterMetrics
from router.priorities import level_names
from tests.serve.dashboards import OUR_DASHBOARD, Exposition, dashboard_selections

PER_STATUS = "ascend_router_requests_total"
FALLBACKS = "ascend_router_fallbacks_total"


def fresh_exposition(args: dict[str, object]) -> Exposition:
    config = RouterAppConfig.model_validate(args)
    metrics = RouterMetrics(config, level_names(config.priorities))
    return Exposition.parse(metrics.render().decode())


def test_every_router_series_the_dashboard_queries_exists_at_zero() -> None:
    exposition = fresh_exposition(local_app_args())
    wanted = [
        s
        for s in dashboard_selections(OUR_DASHBOARD)
        if s.metric.startswith("ascend_router_") and s.metric != PER_STATUS
    ]
    assert {s.metric for s in wanted} >= {
        "ascend_router_fallbacks_total",
        "ascend_router_preprocess_applied_total",
        "ascend_router_preprocess_tokens_saved_total",
        "ascend_router_rate_limited_total",
        "ascend_router_queue_seconds_bucket",
    }
    for sel in wanted:
        rows = exposition.samples.get(sel.metric, [])
        assert rows, f"{sel.metric} has no series before the first event: {sel.expr}"
        assert all(sel.labels <= labels.keys() for labels, _ in rows), sel
        assert all(value == 0 for _, value in rows), sel.metric


def test_series_follow_the_configured_models_limits_and_levels() -> None:
    args = local_app_args() | {
        "rate_limits": {"tenants": {"acme": {"requests_per_minute": 5}}},
        "priorities": {"levels": ["interactive", "batch"], "default": "batch"},
    }
    exposition = fresh_exposition(args)
    fallbacks = {(r["model"], r["reason"]) for r, _ in exposition.samples[FALLBACKS]}
    assert ("smollm2-long", "context") in fallbacks and len(fallbacks) == 2 * 4
    limits = {r["limit"] for r, _ in exposition.samples["ascend_router_rate_limited_total"]}
    assert limits == {"per_key", "per_tenant", "tenant:acme"}
    shed = {(r["model"], r["priority"]) for r, _ in exposition.samples["ascend_router_shed_total"]}
    assert shed == {(m, lvl) for m in ("smollm2-fast", "smollm2-long") for lvl in ("interactive", "batch")}  # fmt: skip
