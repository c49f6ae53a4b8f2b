"""Drive one target through a scenario: concurrency levels, shared-prefix, or burst.

Every level is bounded twice: by its request count and by a wall-clock deadline after which the
requests still in flight are cancelled and counted as errors (`timeout`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass

import httpx

from load_tests.client import Endpoint, RequestRecord, Target, stream_request
from load_tests.level_result import LevelResult, summarize_level
from load_tests.server_metrics import settled_snapshot
from load_tests.workload import Prompt


@dataclass(frozen=True)
class RunOptions:
    """How requests are sent.

    Attributes:
        endpoint: `completions` (raw prompt) or `chat` (chat template applied by the server).
        level_timeout_s: wall-clock budget of one level (s); in-flight requests are cancelled.
        request_timeout_s: httpx timeout of one request (connect/read/write/pool, s).
    """

    endpoint: Endpoint = "completions"
    level_timeout_s: float = 600.0
    request_timeout_s: float = 300.0


def _client(concurrency: int, opts: RunOptions) -> httpx.AsyncClient:
    limits = httpx.Limits(max_connections=concurrency + 4, max_keepalive_connections=concurrency)
    # trust_env=False: never route loopback traffic through a proxy from the environment
    return httpx.AsyncClient(
        timeout=httpx.Timeout(opts.request_timeout_s), limits=limits, trust_env=False
    )


async def _send_all(
    client: httpx.AsyncClient,
    target: Target,
    prompts: Sequence[Prompt],
    concurrency: int,
    opts: RunOptions,
    deadline: float,
) -> list[RequestRecord]:
    """Send `prompts` with at most `concurrency` in flight; cancel whatever passes `deadline`."""
    sem = asyncio.Semaphore(concurrency)
    system_separate = opts.endpoint == "chat"

    async def one(p: Prompt) -> RequestRecord:
        async with sem:
            text = p.question_text if system_separate and p.prefix_text else p.text
            system = p.prefix_text if system_separate else ""
            return await stream_request(client, target, opts.endpoint, text, system, p.output_len)

    tasks = [asyncio.create_task(one(p)) for p in prompts]
    remaining = max(0.0, deadline - time.perf_counter())
    done, pending = await asyncio.wait(tasks, timeout=remaining)
    for t in pending:
        t.cancel()
    now = time.perf_counter()
    records = []
    for t in tasks:
        if t in done and t.exception() is None:
            records.append(t.result())
        else:
            err = "timeout" if t in pending else f"client exception: {t.exception()!r}"
            records.append(RequestRecord(start=now, end=now, error=err))
    if pending:
        await asyncio.gather(*pending, return_exceptions=True)
    return records


async def run_level(
    target: Target, prompts: Sequence[Prompt], concurrency: int, opts: RunOptions
) -> LevelResult:
    """All `prompts` against `target` with bounded concurrency."""
    deadline = time.perf_counter() + opts.level_timeout_s
    async with _client(concurrency, opts) as client:
        records = await _send_all(client, target, prompts, concurrency, opts, deadline)
        server = await settled_snapshot(client, target.base_url, target.model)
    return summarize_level(concurrency, records, server_after=server)


async def run_prefix_level(
    target: Target, prompts: Sequence[Prompt], concurrency: int, opts: RunOptions
) -> LevelResult:
    """Shared-prefix scenario: the first prompt alone (cold prefix), then the rest.

    The result covers every request; `first_ttft_ms` is the cold request's TTFT and
    `rest_ttft_p50_ms` the median TTFT of the following (prefix-warm) ones.
    """
    assert prompts, "the prefix scenario needs at least one prompt"
    deadline = time.perf_counter() + opts.level_timeout_s
    async with _client(concurrency, opts) as client:
        first = await _send_all(client, target, prompts[:1], 1, opts, deadline)
        rest = await _send_all(client, target, prompts[1:], concurrency, opts, deadline)
    return summarize_level(concurrency, first + rest, prefix_first=first[0], prefix_rest=rest)


async def warmup(target: Target, prompt: Prompt, opts: RunOptions) -> RequestRecord:
    """One short request (8 tokens) so lazy initialisation is not measured.

    Only the prompt's own question is sent, so a shared prefix stays cold.
    """
    short = Prompt(prompt.token_ids, prompt.question_text, "", prompt.question_text, 8)
    deadline = time.perf_counter() + min(opts.level_timeout_s, opts.request_timeout_s)
    async with _client(1, opts) as client:
        (rec,) = await _send_all(client, target, [short], 1, opts, deadline)
    return rec
