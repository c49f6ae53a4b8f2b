"""`python -m load_tests.router_overhead`: the latency the router adds over calling a model
deployment directly.

Streamed, greedy, fixed-length chat requests (`ignore_eos`) go, one at a time, interleaved in
rotating order so that drift hits every path alike, with prompts of equal length that differ at
the start (no path reuses another's prefix cache), through

* `direct`: the model deployment's own handle (`model-<id>`, `ModelServer.chat`);
* `router`: the router application's handle (`Router.chat`, the model pinned by id, so the policy
  runs and picks it): the router's added hop and work;
* `http`: the Serve HTTP proxy and the router (`POST /v1/chat/completions`), for reference.

It prints TTFT p50/p99 and time per output token (TPOT) p50 per path, and the router's overhead
(`router` - `direct`): the TTFT difference at p50 and p99 and the TPOT difference (per-token
overhead in streaming). With `--concurrency N`, each path gets N requests at once (paths still take
turns), so the per-token costs are those of N concurrent streams sharing the host; the HTTP path is
then the one whose stream the replica sends as ready SSE bytes (`http` - `direct` is the per-token
cost of the proxy and router together). By default it starts Ray and `configs/local.yaml` itself
(HTTP port 8125) and stops them after; `--address auto` (or `RAY_ADDRESS`) uses a running `serve
run` instead.

Example:
    python -m load_tests.router_overhead --model smollm2-fast --requests 60 --max-tokens 32

Writes `load_tests/results/router-overhead-<UTC timestamp>.json`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import httpx
import yaml

from configs.envs import ray_address
from deployments.protocol.errors import ErrorResponse
from load_tests.client import (
    RequestRecord,
    Target,
    check_loopback,
    request_body,
    stream_request,
)
from load_tests.results import RESULTS_DIR
from load_tests.stats import summarize

PATHS = ("direct", "router", "http")
REPO = Path(__file__).resolve().parents[1]


def build_parser() -> argparse.ArgumentParser:
    """The CLI flags."""
    p = argparse.ArgumentParser(
        prog="python -m load_tests.router_overhead",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--model", default="smollm2-fast", help="model id, called on every path")
    p.add_argument("--requests", type=int, default=60, help="measured requests per path")
    p.add_argument("--warmup", type=int, default=3, help="unmeasured requests per path first")
    p.add_argument("--max-tokens", type=int, default=32, help="output tokens per request")
    p.add_argument("--concurrency", type=int, default=1, help="requests at once per path")
    p.add_argument("--address", default=ray_address(), help="a running cluster (default: own)")
    p.add_argument("--config", type=Path, default=REPO / "configs" / "local.yaml")
    p.add_argument("--port", type=int, default=8125, help="HTTP port when starting Serve")
    p.add_argument("--http-url", default=None, help="router base URL with --address")
    p.add_argument("--results-dir", type=Path, default=RESULTS_DIR)
    return p


async def handle_request(handle: Any, body: dict[str, Any]) -> RequestRecord:
    """One streamed handle call, timed chunk by chunk like `load_tests.client.stream_request`."""
    rec = RequestRecord(start=time.perf_counter())
    async for chunk in handle.options(stream=True).chat.remote(body):
        if isinstance(chunk, ErrorResponse):
            rec.error = str(chunk.error.message)[:200]
            break
        if chunk.choices and chunk.choices[0].delta.content:
            rec.chunk_times.append(time.perf_counter())
        if chunk.usage is not None:
            rec.output_tokens, rec.usage_reported = chunk.usage.completion_tokens, True
    rec.end = time.perf_counter()
    return rec


async def measure(
    handles: dict[str, Any], target: Target, args: argparse.Namespace
) -> dict[str, list[RequestRecord]]:
    """Every path's records, requests interleaved across paths, warm-up dropped."""
    records: dict[str, list[RequestRecord]] = {path: [] for path in PATHS}
    n = args.concurrency
    limits = httpx.Limits(max_connections=n + 4)
    async with httpx.AsyncClient(timeout=300, limits=limits, trust_env=False) as client:

        async def one(path: str, number: int) -> RequestRecord:
            prompt = f"Request {number:05d}: count from one to one hundred in words."
            if path == "http":
                return await stream_request(client, target, "chat", prompt, "", args.max_tokens)
            body = request_body("chat", args.model, prompt, "", args.max_tokens)
            return await handle_request(handles[path], body)

        rounds = args.warmup + -(-args.requests // n)
        for i in range(rounds):
            # order rotates, and every request has its own prompt of the same length, so that
            # no path profits from another's prefix-cached prefill or warmed-up engine
            for j, path in enumerate(PATHS[i % 3 :] + PATHS[: i % 3]):
                first = (3 * i + j) * n
                recs = await asyncio.gather(*(one(path, first + k) for k in range(n)))
                for rec in recs:
                    if rec.error is not None:
                        raise RuntimeError(f"{path} round {i} failed: {rec.error}")
                if i >= args.warmup:
                    records[path].extend(recs)
    return records


def summary(records: dict[str, list[RequestRecord]]) -> dict[str, Any]:
    """TTFT and TPOT summaries (ms) per path, and the router's overhead over `direct`: the
    difference of the percentiles, and the percentiles of the paired differences (request i
    routed minus request i direct, which cancels slow drift of the machine)."""
    paths = {
        path: {"ttft_ms": _ms(recs, "ttft"), "tpot_ms": _ms(recs, "tpot")}
        for path, recs in records.items()
    }
    overhead: dict[str, Any] = {
        f"{metric}_{stat}_ms": paths["router"][metric][stat] - paths["direct"][metric][stat]
        for metric, stat in (("ttft_ms", "p50"), ("ttft_ms", "p99"), ("tpot_ms", "p50"))
    }
    overhead["http_tpot_p50_ms"] = (
        paths["http"]["tpot_ms"]["p50"] - paths["direct"]["tpot_ms"]["p50"]
    )
    for metric in ("ttft", "tpot"):
        pairs = zip(records["router"], records["direct"])
        diffs = [
            (getattr(r, metric) - getattr(d, metric)) * 1e3
            for r, d in pairs
            if getattr(r, metric) is not None and getattr(d, metric) is not None
        ]
        overhead[f"paired_{metric}_diff_ms"] = summarize(diffs).to_dict()
    return {"paths": paths, "router_overhead": overhead}


def _ms(records: list[RequestRecord], metric: str) -> dict[str, Any]:
    values = [getattr(r, metric) * 1e3 for r in records if getattr(r, metric) is not None]
    return summarize(values).to_dict()


def table(result: dict[str, Any]) -> str:
    """A plain-text table of `summary`."""
    lines = [f"{'path':8} {'n':>4} {'TTFT p50':>10} {'TTFT p99':>10} {'TPOT p50':>10}  (ms)"]
    for path, row in result["paths"].items():
        ttft, tpot = row["ttft_ms"], row["tpot_ms"]
        lines.append(
            f"{path:8} {ttft['count']:>4} {ttft['p50']:>10.2f} {ttft['p99']:>10.2f} "
            f"{tpot['p50']:>10.3f}"
        )
    o = result["router_overhead"]
    ttft, tpot = o["paired_ttft_diff_ms"], o["paired_tpot_diff_ms"]
    lines.append(
        f"router - direct: TTFT p50 {o['ttft_ms_p50_ms']:+.2f} ms, TTFT p99 "
        f"{o['ttft_ms_p99_ms']:+.2f} ms, per token (TPOT p50) {o['tpot_ms_p50_ms']:+.3f} ms"
    )
    lines.append(f"http - direct: per token (TPOT p50) {o['http_tpot_p50_ms']:+.3f} ms")
    lines.append(
        f"paired (request i routed - direct): TTFT p50 {ttft['p50']:+.2f} ms, p99 "
        f"{ttft['p99']:+.2f} ms; TPOT p50 {tpot['p50']:+.3f} ms, mean {tpot['mean']:+.3f} ms"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark, print the table, write the JSON."""
    import ray
    from ray import serve

    from router.app import APP_NAME, build_app, model_deployment_name

    args = build_parser().parse_args(argv)
    own = args.address is None
    if own:
        ray.init(include_dashboard=False, log_to_driver=False)
        serve.start(http_options={"host": "127.0.0.1", "port": args.port})
        app_args = yaml.safe_load(args.config.read_text())["applications"][0]["args"]
        serve.run(build_app(app_args), name=APP_NAME, route_prefix="/")
    else:
        ray.init(address=args.address, log_to_driver=False)
    try:
        handles = {
            "direct": serve.get_deployment_handle(model_deployment_name(args.model), APP_NAME),
            "router": serve.get_app_handle(APP_NAME),
        }
        base = args.http_url or f"http://127.0.0.1:{args.port}"
        target = Target(check_loopback(f"{base}/v1"), args.model, "http")
        result = summary(asyncio.run(measure(handles, target, args)))
    finally:
        if own:
            serve.shutdown()
        ray.shutdown()
    print(table(result))
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    args.results_dir.mkdir(parents=True, exist_ok=True)
    path = args.results_dir / f"router-overhead-{stamp}.json"
    doc = {
        "kind": "router_overhead",
        "created": stamp,
        "model": args.model,
        "requests": args.requests,
        "max_tokens": args.max_tokens,
        "concurrency": args.concurrency,
        **result,
    }
    path.write_text(json.dumps(doc, indent=2))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
