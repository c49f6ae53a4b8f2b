"""`python -m load_tests.priority_overload`: a steady tenant's latency while another floods.

One model (configs/replicas.yaml's SmolLM2-135M, int4) on 2 replicas, each taking
`max_ongoing` requests at once with `max_queued` more in the router's queue (power-of-two
replica choice, so prefix routing plays no part). Two tenants (`x-ascend-router-tenant`):
`steady` sends `steady_requests` streamed requests one after another; `flood` keeps `flood`
streamed requests in flight (closed loop; after a 429 a flood worker waits what `Retry-After`
says, as the OpenAI SDKs do). Every prompt is distinct (no prefix-cache hits); answers are greedy,
`ignore_eos`, `steady_tokens` / `flood_tokens` long.

Three phases, one run:

1. `unloaded`: `steady` alone, with priorities on;
2. `priority`: `steady` while `flood` floods, with `priorities: {levels: [interactive, batch],
   reserved_slots: 1}`, `steady` placed at `interactive` and `flood` at `batch`;
3. `fifo` (the peer): the same flood, no `priorities` (one level: first come, first served).

Reported: `steady`'s TTFT p50/p99 and error count per phase, `flood`'s answers and 429s, and the
ratios of the loaded phases' `steady` TTFT p99 to the unloaded one (target: `priority` <= 2).

Example:
    python -m load_tests.priority_overload

Writes `load_tests/results/priority-overload-<UTC timestamp>.json`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path
from typing import Any

import httpx

from load_tests.client import RequestRecord, stream_body
from load_tests.replica_routing import app_args, own_serve, wait_healthy
from load_tests.report import ratio
from load_tests.results import RESULTS_DIR, new_document, result_path
from load_tests.stats import summarize

TENANT = "x-ascend-router-tenant"
PRIORITIES = {
    "levels": ["interactive", "batch"],
    "default": "interactive",
    "reserved_slots": 1,
    "tenants": {"steady": {"level": "interactive"}, "flood": {"level": "batch"}},
}


def build_parser() -> argparse.ArgumentParser:
    """The CLI flags."""
    p = argparse.ArgumentParser(
        prog="python -m load_tests.priority_overload",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--steady-requests", type=int, default=16)
    p.add_argument("--steady-tokens", type=int, default=16)
    p.add_argument("--flood", type=int, default=32, help="flood requests in flight")
    p.add_argument("--flood-tokens", type=int, default=32)
    p.add_argument("--max-ongoing", type=int, default=4, help="per replica")
    p.add_argument("--max-queued", type=int, default=8, help="router queue per model")
    p.add_argument("--port", type=int, default=8126)
    p.add_argument("--results-dir", type=Path, default=RESULTS_DIR)
    return p


def body(model: str, text: str, max_tokens: int) -> dict[str, Any]:
    """A greedy streamed chat request of exactly `max_tokens` tokens."""
    return {
        "model": model,
        "messages": [{"role": "user", "content": text}],
        "max_tokens": max_tokens,
        "temperature": 0.0,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }


async def phase(url: str, model: str, args: argparse.Namespace, flood: bool) -> dict[str, Any]:
    """One phase's `steady` records and `flood` counts."""
    chat = f"{url}/v1/chat/completions"
    steady: list[RequestRecord] = []
    flood_status: dict[int, int] = {}
    done = asyncio.Event()
    limits = httpx.Limits(max_connections=args.flood + 8)
    async with httpx.AsyncClient(timeout=600, limits=limits, trust_env=False) as client:

        async def flooder(worker: int) -> None:
            n = 0
            while not done.is_set():
                text = f"Flood {worker}.{n}: list the planets of the solar system in order."
                rec = await stream_body(
                    client, chat, body(model, text, args.flood_tokens), {TENANT: "flood"}
                )
                flood_status[rec.status] = flood_status.get(rec.status, 0) + 1
                n += 1
                if rec.status == 429:
                    await asyncio.sleep(rec.retry_after_s or 1.0)

        workers = [asyncio.create_task(flooder(w)) for w in range(args.flood if flood else 0)]
        await asyncio.sleep(5 if flood else 0)  # the flood fills the slots and the queue first
        for i in range(args.steady_requests):
            text = f"Steady {i}: name three colours of the rainbow."
            rec = await stream_body(
                client, chat, body(model, text, args.steady_tokens), {TENANT: "steady"}
            )
            steady.append(rec)
        done.set()
        await asyncio.gather(*workers)
    ttft = [r.ttft * 1e3 for r in steady if r.ttft is not None]
    return {
        "steady_ttft_ms": summarize(ttft).to_dict(),
        "steady_errors": sum(1 for r in steady if r.error is not None),
        "steady_statuses": sorted({r.status for r in steady}),
        "flood_statuses": {str(k): v for k, v in sorted(flood_status.items())},
    }


def serve_args(args: argparse.Namespace, priorities: bool) -> dict[str, Any]:
    """configs/replicas.yaml's args: power of two, the phase's limits and priorities."""
    config = app_args("default")
    model = config["models"][0]
    model["deployment"] = {
        **model["deployment"],
        "max_ongoing_requests": args.max_ongoing,
        "max_queued_requests": args.max_queued,
    }
    if priorities:
        config["priorities"] = PRIORITIES
    return config


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Serve and load every phase; the result document."""
    from ray import serve

    from router.app import APP_NAME, build_app

    url = f"http://127.0.0.1:{args.port}"
    phases: dict[str, dict[str, Any]] = {}
    with own_serve(args.port):
        for name, priorities, flood in (
            ("unloaded", True, False),
            ("priority", True, True),
            ("fifo", False, True),
        ):
            config = serve_args(args, priorities)
            model = config["models"][0]["model_id"]
            if name != "priority":  # `priority` reuses the unloaded phase's application
                serve.run(build_app(config), name=APP_NAME, route_prefix="/")
                asyncio.run(wait_healthy(url))
            start = time.perf_counter()
            phases[name] = asyncio.run(phase(url, model, args, flood))
            print(f"{name}: done in {time.perf_counter() - start:.1f} s", flush=True)
    unloaded = phases["unloaded"]["steady_ttft_ms"]["p99"]
    ratios = {
        f"{name}_p99_over_unloaded": ratio(phases[name]["steady_ttft_ms"]["p99"], unloaded)
        for name in ("priority", "fifo")
    }
    workload = {k: v for k, v in vars(args).items() if k not in ("results_dir", "port")}
    return new_document(
        "priority-overload",
        workload,
        serve_config="configs/replicas.yaml",
        priorities=PRIORITIES,
        phases=phases,
        ratios=ratios,
    )


def table(doc: dict[str, Any]) -> str:
    """A plain-text table of the phases and ratios."""
    lines = [f"{'phase':9} {'TTFT p50':>9} {'p99':>8} {'errors':>6}  flood statuses"]
    for name, p in doc["phases"].items():
        t = p["steady_ttft_ms"]
        lines.append(
            f"{name:9} {t['p50']:>9.0f} {t['p99']:>8.0f} {p['steady_errors']:>6}  "
            f"{p['flood_statuses']}"
        )
    r = doc["ratios"]
    lines.append(
        f"steady TTFT p99 over unloaded: priority {r['priority_p99_over_unloaded']:.2f}, "
        f"fifo {r['fifo_p99_over_unloaded']:.2f} (ms; steady tenant)"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark, print the table, write the JSON."""
    args = build_parser().parse_args(argv)
    doc = run(args)
    print(table(doc))
    path = result_path("priority-overload", "json", args.results_dir)
    path.write_text(json.dumps(doc, indent=2))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
