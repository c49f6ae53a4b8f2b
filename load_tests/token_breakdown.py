"""`python -m load_tests.token_breakdown`: where each streamed token's time goes, stage by stage.

Streams greedy chat requests (`ignore_eos`, a fixed number of output tokens, open questions of
`load_tests.text_prompts` made distinct per request) with the header `x-ascend-router-timing: 1`
to a running server (`serve run configs/local.yaml`), so that every event carries the times its
token passed the engine step, the replica's output processing, the replica→router hop and the
router (`deployments.streaming.token_timing`); the client stamps each line's arrival. For each
concurrency level it reports, per output token, the median time of each stage of
`load_tests.token_stamps` (engine step, time between steps, the replica's hand-off, output
processing and encoding, the hop to the router, the router, the proxy and HTTP, the client's
parse) and the TPOT, in milliseconds, and the CPU time each process group of the host used per
output token over the level (`load_tests.process_cpu`: the model replicas, the router, the HTTP
proxy, the controller, Ray, this client), with its share of a core. The levels run one after
the other, after one warm-up request; the server and this client must share a host (the stamps
are CLOCK_MONOTONIC), which should otherwise be quiet.

Example (the issue #32 figures):
    serve run configs/local.yaml
    python -m load_tests.token_breakdown --model smollm2-long --concurrency 1 16 \
        --requests 8 --max-tokens 128 --label after

Writes `load_tests/results/token-breakdown-<UTC timestamp>.json`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import time
from collections.abc import Sequence
from typing import Any

import httpx

from deployments.streaming.token_timing import TIMING_HEADER
from load_tests.client import check_loopback, request_body
from load_tests.process_cpu import cpu_by_group, cpu_seconds
from load_tests.results import RESULTS_DIR, new_document, result_path
from load_tests.text_prompts import text_message
from load_tests.token_stamps import (
    STAGES,
    StampedStream,
    client_parse_s,
    stage_medians,
    token_stages,
)


def build_parser() -> argparse.ArgumentParser:
    """The CLI flags."""
    p = argparse.ArgumentParser(
        prog="python -m load_tests.token_breakdown",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--base-url", default="http://127.0.0.1:8000/v1", help="OpenAI base URL")
    p.add_argument("--model", default="smollm2-long", help="model id (or alias)")
    p.add_argument("--concurrency", type=int, nargs="+", default=[1, 16], help="levels")
    p.add_argument("--requests", type=int, default=8, help="requests per level (at least c)")
    p.add_argument("--max-tokens", type=int, default=128, help="output tokens per request")
    p.add_argument("--seed", type=int, default=0, help="prompt variation seed")
    p.add_argument("--label", default="", help="a name for this run (e.g. before / after)")
    return p


async def timed_stream(client: httpx.AsyncClient, url: str, body: dict[str, Any]) -> StampedStream:
    """POST one streaming request asking for timestamps; every line stamped on arrival.

    Raises:
        RuntimeError: the server answered with an error status.
    """
    stream = StampedStream()
    async with client.stream("POST", url, json=body, headers={TIMING_HEADER: "1"}) as resp:
        if resp.status_code != 200:
            text = (await resp.aread()).decode(errors="replace")[:300]
            raise RuntimeError(f"HTTP {resp.status_code}: {text}")
        async for line in resp.aiter_lines():
            if not stream.add_line(line, time.monotonic()):
                break
    return stream


async def run_level(
    client: httpx.AsyncClient,
    url: str,
    model: str,
    concurrency: int,
    requests: int,
    max_tokens: int,
    rng: random.Random,
) -> dict[str, Any]:
    """`requests` streams, `concurrency` at a time; the stage medians over all their tokens."""
    sem = asyncio.Semaphore(concurrency)

    async def one() -> StampedStream:
        body = request_body("chat", model, text_message("free", rng), "", max_tokens)
        async with sem:
            return await timed_stream(client, url, body)

    cpu_before, start = cpu_seconds(), time.monotonic()
    streams = await asyncio.gather(*(one() for _ in range(max(requests, concurrency))))
    wall, used = time.monotonic() - start, cpu_by_group(cpu_before, cpu_seconds())
    tokens = sum(len(s.events) for s in streams)
    rows = [row for s in streams for row in token_stages(s)]
    medians = stage_medians(rows, client_parse_s(streams, time.perf_counter))
    cpu = {g: {"ms_per_token": 1000 * v / tokens, "cores": v / wall} for g, v in used.items()}
    return {
        "concurrency": concurrency,
        "requests": len(streams),
        "output_tokens": tokens,
        "output_tok_s": tokens / wall,
        "stages": medians,
        "cpu": dict(sorted(cpu.items(), key=lambda kv: -kv[1]["cores"])),
    }


def print_levels(levels: Sequence[dict[str, Any]]) -> None:
    """One row per stage, one column per level (median ms per token), then each process
    group's CPU time per output token (ms) and its share of a core."""
    print("stage (median ms)".ljust(24) + "".join(f"c{lv['concurrency']:<15}" for lv in levels))
    for stage in STAGES:
        cells = []
        for lv in levels:
            v = lv["stages"][stage]["median_ms"]
            cells.append(("-" if v is None else f"{v:.3f}").ljust(16))
        print(stage.ljust(24) + "".join(cells))
    print("output tok/s".ljust(24) + "".join(f"{lv['output_tok_s']:<16.1f}" for lv in levels))
    print("CPU ms/token (cores)")
    groups = dict.fromkeys(g for lv in levels for g in lv["cpu"])
    for group in groups:
        cells = []
        for lv in levels:
            c = lv["cpu"].get(group)
            cells.append(
                "-".ljust(16)
                if c is None
                else f"{c['ms_per_token']:.3f} ({c['cores']:.2f})".ljust(16)
            )
        print(f"  {group}".ljust(24) + "".join(cells))


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    """Warm up, run every level, and return the result document."""
    base = check_loopback(args.base_url)
    url = base + "/chat/completions"
    rng = random.Random(args.seed)
    limits = httpx.Limits(max_connections=max(args.concurrency) + 4)
    async with httpx.AsyncClient(timeout=600, limits=limits) as client:
        await timed_stream(client, url, request_body("chat", args.model, "Hello", "", 8))
        levels = [
            await run_level(client, url, args.model, c, args.requests, args.max_tokens, rng)
            for c in args.concurrency
        ]
    workload = {"endpoint": "chat", "max_tokens": args.max_tokens, "requests": args.requests}
    return new_document(
        "token-breakdown",
        workload,
        label=args.label,
        base_url=base,
        model=args.model,
        levels=levels,
    )


def main(argv: Sequence[str] | None = None) -> None:
    """CLI entry point."""
    args = build_parser().parse_args(argv)
    doc = asyncio.run(main_async(args))
    print_levels(doc["levels"])
    path = result_path("token-breakdown", "json", RESULTS_DIR)
    path.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
