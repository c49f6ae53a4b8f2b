"""The server's own view after a level: KV usage, requests still running, preemptions.

Read from the Prometheus text at `<root>/metrics` (the router serves every model replica's
`vllm:*` metrics there), parsed with `prometheus_client`'s text parser. A level that loses
nothing leaves no request running and (prefix-cached blocks being free) 0 % KV usage.
"""

from __future__ import annotations

import httpx
from prometheus_client.parser import text_string_to_metric_families

_WANTED = {
    "vllm:kv_cache_usage_perc": "kv_cache_usage_perc",
    "vllm:num_requests_running": "num_requests_running",
    "vllm:num_requests_waiting": "num_requests_waiting",
    "vllm:num_preemptions_total": "num_preemptions_total",
}
"""Sample names (not family names, which the parser derives differently per exposition)."""


def metrics_url(base_url: str) -> str:
    """`http://host:port/v1` -> `http://host:port/metrics`."""
    root = base_url.rstrip("/")
    return (root[: -len("/v1")] if root.endswith("/v1") else root) + "/metrics"


async def snapshot(client: httpx.AsyncClient, base_url: str, model: str) -> dict[str, float] | None:
    """The `vllm:*` gauges/counters of `model` (label `model_name`), or None.

    None when the endpoint serves no `/metrics` or none of these names for that model (e.g. a
    llama.cpp server): the figures are then simply not reported.
    """
    try:
        resp = await client.get(metrics_url(base_url))
    except httpx.HTTPError:
        return None
    if resp.status_code != 200:
        return None
    found: dict[str, float] = {}
    for family in text_string_to_metric_families(resp.text):
        for sample in family.samples:
            key = _WANTED.get(sample.name)
            if key is not None and sample.labels.get("model_name") == model:
                found[key] = sample.value
    return found or None
