"""The server's own view after a level: KV usage, requests still running, preemptions.

Read from the Prometheus text at `<root>/metrics` (the router serves every model replica's
`vllm:*` metrics there, one series per replica), parsed with `prometheus_client`'s text parser.
Counts are summed over a model's replicas and KV usage is the fullest replica's. A level that
loses nothing leaves no request running and (prefix-cached blocks being free) 0 % KV usage.

With speculative decoding the counters of drafts, draft tokens and accepted tokens come along
too; `spec_decode_delta` turns two snapshots into a level's acceptance rate.
"""

from __future__ import annotations

import asyncio
import time

import httpx
from prometheus_client.parser import text_string_to_metric_families

_WANTED = {
    "vllm:kv_cache_usage_perc": "kv_cache_usage_perc",
    "vllm:num_requests_running": "num_requests_running",
    "vllm:num_requests_waiting": "num_requests_waiting",
    "vllm:num_preemptions_total": "num_preemptions_total",
    "vllm:spec_decode_num_drafts_total": "spec_decode_num_drafts",
    "vllm:spec_decode_num_draft_tokens_total": "spec_decode_num_draft_tokens",
    "vllm:spec_decode_num_accepted_tokens_total": "spec_decode_num_accepted_tokens",
}
"""Sample names (not family names, which the parser derives differently per exposition)."""
_FULLEST = {"kv_cache_usage_perc"}
"""Figures taken as the maximum over replicas (the others are summed)."""


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
            if key is None or sample.labels.get("model_name") != model:
                continue
            seen = found.get(key)
            combine = max if key in _FULLEST else sum
            found[key] = sample.value if seen is None else combine((seen, sample.value))
    return found or None


async def prefix_cache_by_replica(
    client: httpx.AsyncClient, base_url: str, model: str
) -> dict[str, tuple[float, float]]:
    """Replica id -> (`vllm:prefix_cache_queries`, `vllm:prefix_cache_hits`) of `model`, in
    blocks since the replica started; empty when `/metrics` serves none."""
    resp = await client.get(metrics_url(base_url))
    counts: dict[str, list[float]] = {}
    names = {"vllm:prefix_cache_queries_total": 0, "vllm:prefix_cache_hits_total": 1}
    for family in text_string_to_metric_families(resp.text):
        for sample in family.samples:
            slot = names.get(sample.name)
            if slot is None or sample.labels.get("model_name") != model:
                continue
            counts.setdefault(sample.labels.get("replica", ""), [0.0, 0.0])[slot] += sample.value
    return {replica: (q, h) for replica, (q, h) in counts.items()}


_SPEC_COUNTS = {
    "drafts": "spec_decode_num_drafts",
    "draft_tokens": "spec_decode_num_draft_tokens",
    "accepted_tokens": "spec_decode_num_accepted_tokens",
}


def spec_decode_figures(counts: dict[str, float]) -> dict[str, float | None]:
    """`counts` (drafts, draft_tokens, accepted_tokens) plus the acceptance rate (accepted /
    proposed draft tokens) and mean acceptance length (1 + accepted / drafts)."""
    drafts, proposed, accepted = (counts[k] for k in _SPEC_COUNTS)
    return {
        **counts,
        "acceptance_rate": accepted / proposed if proposed else None,
        "mean_acceptance_length": 1 + accepted / drafts if drafts else None,
    }


def spec_decode_delta(
    before: dict[str, float] | None, after: dict[str, float] | None
) -> dict[str, float | None] | None:
    """The speculation between two snapshots (`before` None: since start-up), or None when the
    server reports no speculation counters (speculation off, or not our server)."""
    if not after or _SPEC_COUNTS["draft_tokens"] not in after:
        return None
    base = before or {}
    return spec_decode_figures(
        {k: after.get(name, 0.0) - base.get(name, 0.0) for k, name in _SPEC_COUNTS.items()}
    )


async def settled_snapshot(
    client: httpx.AsyncClient, base_url: str, model: str, settle_s: float = 5.0
) -> dict[str, float] | None:
    """`snapshot` once the server shows nothing running or waiting, or after `settle_s` seconds.

    Our router serves each replica's figures as the replica last pushed them (every 2 s by
    default, `configs/monitoring.py`), so right after a level they may still show its last
    requests; a request really left running still shows once `settle_s` has passed.
    """
    deadline = time.monotonic() + settle_s
    while True:
        found = await snapshot(client, base_url, model)
        busy = found is not None and (
            found.get("num_requests_running") or found.get("num_requests_waiting")
        )
        if not busy or time.monotonic() >= deadline:
            return found
        await asyncio.sleep(0.25)
