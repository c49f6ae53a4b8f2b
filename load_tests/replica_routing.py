"""`python -m load_tests.replica_routing`: replica choice on shared-prefix multi-turn traffic.

One model (configs/replicas.yaml's SmolLM2-135M, int4) on 2 replicas, served three ways one
after another in one run, each on freshly started replicas (empty prefix caches):

- `default`: Ray Serve's power of two choices (`routing: {replica: power_of_two,
  session_affinity: false}`), the peer every other mode is a ratio of;
- `prefix_aware`: `routing: {replica: prefix_aware, session_affinity: false}`;
- `session`: power of two plus session affinity, each conversation sending its id as
  `x-session-id`.

Workload: after `warmup` short requests (unmeasured; their prompts share nothing with the
rest), `conversations` conversations, each with its own system prompt of about
`system_tokens` tokens (distinct words, so conversations share no prefix) and a history that
grows by one user and one assistant message per turn. Turns are interleaved: round `t` sends
turn `t` of every conversation, `concurrency` requests at a time, in an order shuffled per
round; the next round starts when the last answer is in. Every request streams (greedy,
`max_tokens`, `ignore_eos`) and its answer goes into the history.

Reported per mode: TTFT p50/p99 over every request and over turns after the first (those can
hit a cache), requests/s over the mode's wall time, the prefix-cache hit rate of each replica
(hits / queries in blocks, from `/metrics`) and overall, and the share of prompt tokens
reported cached (`usage.prompt_tokens_details.cached_tokens`), over every request and over turns
after the first (the first turn of a conversation has nothing to hit). Ratios: each mode's TTFT p50
and p99 over `default`'s.

Example:
    python -m load_tests.replica_routing --conversations 8 --turns 4

Writes `load_tests/results/replica-routing-<UTC timestamp>.json`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import yaml

from load_tests.client import RequestRecord, stream_body
from load_tests.report import ratio
from load_tests.results import RESULTS_DIR, new_document, result_path
from load_tests.server_metrics import prefix_cache_by_replica
from load_tests.stats import summarize

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / "configs" / "replicas.yaml"
MODES: dict[str, dict[str, Any]] = {
    "default": {"replica": "power_of_two", "session_affinity": False},
    "prefix_aware": {"replica": "prefix_aware", "session_affinity": False},
    "session": {"replica": "power_of_two", "session_affinity": True},
}
"""Mode -> the model's `routing`."""


def build_parser() -> argparse.ArgumentParser:
    """The CLI flags."""
    p = argparse.ArgumentParser(
        prog="python -m load_tests.replica_routing",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--modes", nargs="+", default=list(MODES), choices=list(MODES))
    p.add_argument("--conversations", type=int, default=8)
    p.add_argument("--turns", type=int, default=4)
    p.add_argument("--system-tokens", type=int, default=1000, help="about; own per conversation")
    p.add_argument("--max-tokens", type=int, default=16, help="output tokens per answer")
    p.add_argument("--concurrency", type=int, default=4, help="requests in flight")
    p.add_argument("--warmup", type=int, default=4, help="short unmeasured requests first")
    p.add_argument("--seed", type=int, default=0, help="round orders")
    p.add_argument("--port", type=int, default=8126)
    p.add_argument("--results-dir", type=Path, default=RESULTS_DIR)
    return p


def system_prompt(conversation: int, tokens: int) -> str:
    """A system prompt of about `tokens` SmolLM2 tokens, its own words for each conversation
    (a numbered rule per ~12 tokens)."""
    rules = (
        f"Rule {conversation}.{i}: when asked about item {i * 7 + conversation}, answer briefly."
        for i in range(max(1, tokens // 12))
    )
    return " ".join(rules)


async def run_workload(
    url: str, model: str, args: argparse.Namespace, session: bool
) -> tuple[list[tuple[int, RequestRecord]], float]:
    """Every request's (turn, record) and the wall time (s); raises on a failed request."""
    rng = random.Random(args.seed)
    histories = [
        [{"role": "system", "content": system_prompt(c, args.system_tokens)}]
        for c in range(args.conversations)
    ]
    records: list[tuple[int, RequestRecord]] = []
    gate = asyncio.Semaphore(args.concurrency)
    limits = httpx.Limits(max_connections=args.concurrency + 4)
    async with httpx.AsyncClient(timeout=600, limits=limits, trust_env=False) as client:

        async def one(c: int, turn: int) -> None:
            history = histories[c]
            history.append({"role": "user", "content": f"Turn {turn}: tell me about item {c}."})
            body = {
                "model": model,
                "messages": history,
                "max_tokens": args.max_tokens,
                "temperature": 0.0,
                "ignore_eos": True,
                "stream": True,
                "stream_options": {"include_usage": True},
            }
            headers = {"x-session-id": f"conversation-{c}"} if session else None
            async with gate:
                rec = await stream_body(client, f"{url}/v1/chat/completions", body, headers)
            if rec.error is not None:
                raise RuntimeError(f"conversation {c} turn {turn}: {rec.error}")
            history.append({"role": "assistant", "content": f"Item {c}, turn {turn}: noted."})
            records.append((turn, rec))

        async def warm(i: int) -> None:
            messages = [{"role": "user", "content": f"Warm-up {i}: say hello."}]
            body = {"model": model, "messages": messages, "max_tokens": 4, "stream": True}
            async with gate:
                await stream_body(client, f"{url}/v1/chat/completions", body)

        await asyncio.gather(*(warm(i) for i in range(args.warmup)))
        start = time.perf_counter()
        for turn in range(args.turns):
            order = list(range(args.conversations))
            rng.shuffle(order)
            await asyncio.gather(*(one(c, turn) for c in order))
        wall = time.perf_counter() - start
    return records, wall


def summary(
    records: list[tuple[int, RequestRecord]],
    wall_s: float,
    before: dict[str, tuple[float, float]],
    after: dict[str, tuple[float, float]],
) -> dict[str, Any]:
    """One mode's figures (module docstring); `before`/`after`: replica -> (prefix-cache
    queries, hits) in blocks."""

    def ms(values: Sequence[float]) -> dict[str, Any]:
        return summarize([v * 1e3 for v in values]).to_dict()

    ttft = [r.ttft for _, r in records if r.ttft is not None]
    later = [r.ttft for t, r in records if t > 0 and r.ttft is not None]
    replicas: dict[str, dict[str, float | None]] = {}
    total_q = total_h = 0.0
    for replica, (queries, hits) in after.items():
        q0, h0 = before.get(replica, (0.0, 0.0))
        dq, dh = queries - q0, hits - h0
        total_q, total_h = total_q + dq, total_h + dh
        served = sum(1 for _, r in records if r.replica == replica)
        replicas[replica] = {"requests": served, "hit_rate": dh / dq if dq else None}

    def cached_share(turns: set[int]) -> float | None:
        chosen = [r for t, r in records if t in turns]
        prompt = sum(r.prompt_tokens or 0 for r in chosen)
        return sum(r.cached_tokens or 0 for r in chosen) / prompt if prompt else None

    every = {t for t, _ in records}
    return {
        "requests": len(records),
        "wall_s": wall_s,
        "requests_per_s": len(records) / wall_s,
        "ttft_ms": ms(ttft),
        "ttft_after_first_turn_ms": ms(later),
        "prefix_hit_rate": total_h / total_q if total_q else None,
        "cached_token_share": cached_share(every),
        "cached_token_share_after_first_turn": cached_share(every - {0}),
        "replicas": replicas,
    }


def table(modes: dict[str, dict[str, Any]]) -> str:
    """A plain-text table of every mode, with ratios to `default`."""
    base = modes.get("default")
    lines = [
        f"{'mode':13} {'TTFT p50':>9} {'p99':>8} {'later p50':>9} {'req/s':>6} {'hit':>5} "
        f"{'cached':>6} {'later':>6} {'p50 x':>6} {'p99 x':>6}  per replica (requests, hit rate)"
    ]
    for name, m in modes.items():
        t, later = m["ttft_ms"], m["ttft_after_first_turn_ms"]
        x50 = ratio(t["p50"], base["ttft_ms"]["p50"]) if base else None
        x99 = ratio(t["p99"], base["ttft_ms"]["p99"]) if base else None
        per = ", ".join(f"{r['requests']}/{_pct(r['hit_rate'])}" for r in m["replicas"].values())
        lines.append(
            f"{name:13} {t['p50']:>9.0f} {t['p99']:>8.0f} {later['p50']:>9.0f} "
            f"{m['requests_per_s']:>6.2f} {_pct(m['prefix_hit_rate']):>5} "
            f"{_pct(m['cached_token_share']):>6} "
            f"{_pct(m['cached_token_share_after_first_turn']):>6} {_x(x50):>6} {_x(x99):>6}  {per}"
        )
    return "\n".join(lines) + "\n(TTFT in ms; x: ratio to default)"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def _x(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def app_args(mode: str) -> dict[str, Any]:
    """configs/replicas.yaml's args with the model routed as `mode` says."""
    args: dict[str, Any] = yaml.safe_load(CONFIG.read_text())["applications"][0]["args"]
    (model,) = args["models"]
    model["routing"] = {**model["routing"], **MODES[mode]}
    return args


async def wait_healthy(url: str, timeout_s: float = 300) -> None:
    """Return once `url`'s `/health` says `ok`.

    Raises:
        TimeoutError: not within `timeout_s` seconds.
    """
    deadline = time.monotonic() + timeout_s
    async with httpx.AsyncClient(timeout=30, trust_env=False) as client:
        while True:
            try:
                if (await client.get(f"{url}/health")).json().get("status") == "ok":
                    return
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"{url} not healthy in {timeout_s} s")
            await asyncio.sleep(1)


async def _prefix_counts(url: str, model: str) -> dict[str, tuple[float, float]]:
    await asyncio.sleep(3)  # replicas push their metrics every 2 s (configs/monitoring.py)
    async with httpx.AsyncClient(timeout=30, trust_env=False) as client:
        return await prefix_cache_by_replica(client, url, model)


@contextmanager
def own_serve(port: int) -> Iterator[None]:
    """A Ray instance of this process's own with Serve's HTTP proxy on `port`, shut down
    afterwards."""
    import ray
    from ray import serve

    ray.init(address="local", num_cpus=4, include_dashboard=False, log_to_driver=False)
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    try:
        yield
    finally:
        serve.shutdown()
        ray.shutdown()


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Serve and load every mode in turn; the result document."""
    from ray import serve

    from router.app import APP_NAME, build_app

    url = f"http://127.0.0.1:{args.port}"
    modes: dict[str, dict[str, Any]] = {}
    with own_serve(args.port):
        for mode in args.modes:
            config = app_args(mode)
            model = config["models"][0]["model_id"]
            serve.run(build_app(config), name=APP_NAME, route_prefix="/")
            asyncio.run(wait_healthy(url))
            before = asyncio.run(_prefix_counts(url, model))
            records, wall = asyncio.run(run_workload(url, model, args, mode == "session"))
            after = asyncio.run(_prefix_counts(url, model))
            modes[mode] = summary(records, wall, before, after)
            print(f"{mode}: done in {wall:.1f} s", flush=True)
            serve.delete(APP_NAME)
    workload = {k: v for k, v in vars(args).items() if k not in ("results_dir", "port")}
    return new_document(
        "replica-routing", workload, serve_config="configs/replicas.yaml", modes=modes
    )


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark, print the table, write the JSON."""
    args = build_parser().parse_args(argv)
    doc = run(args)
    print(table(doc["modes"]))
    path = result_path("replica-routing", "json", args.results_dir)
    path.write_text(json.dumps(doc, indent=2))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
