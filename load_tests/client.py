"""One streaming OpenAI request, timed chunk by chunk (httpx, server-sent events).

Works against any OpenAI-compatible server (ours, llama.cpp's `llama-server`, vLLM): it sends
`max_tokens`, `ignore_eos: true` (a vLLM/llama.cpp extension that fixes the output length) and
`stream_options.include_usage` (token counts), and falls back to counting content chunks when a
server reports no usage.
"""

from __future__ import annotations

import ipaddress
import json
import time
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import urlsplit

import httpx

from load_tests.stats import inter_token_latencies, tpot, ttft

Endpoint = Literal["completions", "chat"]


def check_loopback(base_url: str) -> str:
    """Return `base_url` without a trailing slash if its host is a loopback address.

    Raises:
        ValueError: the URL is not http(s) or its host is not loopback (localhost, 127.0.0.0/8,
            ::1): these benchmarks only ever load servers on this machine.
    """
    parts = urlsplit(base_url)
    host = parts.hostname or ""
    if parts.scheme not in ("http", "https"):
        raise ValueError(f"base URL {base_url!r} is not http(s)://host:port[/v1]")
    loopback = host == "localhost"
    if not loopback:
        try:
            loopback = ipaddress.ip_address(host).is_loopback
        except ValueError:
            loopback = False
    if not loopback:
        raise ValueError(
            f"base URL {base_url!r}: host {host!r} is not a loopback address; load tests only "
            "target servers on this machine (use 127.0.0.1)"
        )
    return base_url.rstrip("/")


@dataclass(frozen=True)
class Target:
    """An OpenAI endpoint to load.

    Attributes:
        base_url: e.g. `http://127.0.0.1:8000/v1` (loopback only).
        model: the `model` field sent.
        label: name used in tables, JSON and charts.
    """

    base_url: str
    model: str
    label: str

    @classmethod
    def parse(cls, spec: str) -> Target:
        """Parse `URL,MODEL,LABEL` (LABEL optional, defaults to MODEL).

        Raises:
            ValueError: fewer than two fields, or a non-loopback URL.
        """
        fields = [f.strip() for f in spec.split(",")]
        if len(fields) not in (2, 3) or not all(fields):
            raise ValueError(f"target {spec!r}: expected URL,MODEL[,LABEL]")
        label = fields[2] if len(fields) == 3 else fields[1]
        return cls(check_loopback(fields[0]), fields[1], label)


@dataclass
class RequestRecord:
    """Timing of one request; times are `time.perf_counter()` seconds.

    Attributes:
        start: when the request was sent.
        end: when the stream ended (or the request failed).
        chunk_times: arrival time of each chunk carrying generated text.
        output_tokens: completion tokens (server `usage` when given, else the chunk count).
        usage_reported: whether `output_tokens` came from the server's usage block.
        prompt_tokens: prompt tokens from `usage`, None if not reported.
        cached_tokens: prompt tokens served from the prefix cache
            (`usage.prompt_tokens_details.cached_tokens`), None if not reported.
        replica: the replica that answered (`x-ascend-router-replica`), None if not named.
        status: the HTTP status (0 when no response came).
        retry_after_s: the `Retry-After` header's seconds, if the response had one.
        error: None on success, else a short description.
    """

    start: float
    end: float = 0.0
    chunk_times: list[float] = field(default_factory=list)
    output_tokens: int = 0
    usage_reported: bool = False
    prompt_tokens: int | None = None
    cached_tokens: int | None = None
    replica: str | None = None
    status: int = 0
    retry_after_s: float | None = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        """Completed without error."""
        return self.error is None

    @property
    def ttft(self) -> float | None:
        """Time to first token (s)."""
        return ttft(self.start, self.chunk_times)

    @property
    def tpot(self) -> float | None:
        """Time per output token after the first (s/token)."""
        first = self.chunk_times[0] if self.chunk_times else None
        return tpot(self.start, self.end, first, self.output_tokens)

    @property
    def itl(self) -> list[float]:
        """Gaps between content chunks (s)."""
        return inter_token_latencies(self.chunk_times)

    @property
    def e2e(self) -> float:
        """End-to-end latency (s)."""
        return self.end - self.start


def request_body(
    endpoint: Endpoint, model: str, prompt: str, system: str, max_tokens: int
) -> dict[str, Any]:
    """The JSON body of one greedy, fixed-length streaming request.

    `system` non-empty puts a shared prefix first: as a system message for chat, or prepended
    to the prompt (already part of `prompt` for completions, see `workload.build_prompts`).
    """
    body: dict[str, Any] = {
        "model": model,
        "max_tokens": max_tokens,
        "temperature": 0.0,
        "stream": True,
        "stream_options": {"include_usage": True},
        "ignore_eos": True,
    }
    if endpoint == "chat":
        messages = [{"role": "system", "content": system}] if system else []
        body["messages"] = [*messages, {"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt
    return body


def _chunk_text(event: dict[str, Any]) -> str:
    choices = event.get("choices") or []
    if not choices:
        return ""
    choice = choices[0]
    if "delta" in choice:
        return (choice.get("delta") or {}).get("content") or ""
    return choice.get("text") or ""


async def stream_request(
    client: httpx.AsyncClient,
    target: Target,
    endpoint: Endpoint,
    prompt: str,
    system: str,
    max_tokens: int,
) -> RequestRecord:
    """Send one streaming request and time every content chunk.

    Never raises for server or network failures: they end up in `RequestRecord.error`. The
    event loop is bounded by `4 * max_tokens + 64` events.
    """
    path = "/chat/completions" if endpoint == "chat" else "/completions"
    body = request_body(endpoint, target.model, prompt, system, max_tokens)
    return await stream_body(client, target.base_url + path, body)


async def stream_body(
    client: httpx.AsyncClient,
    url: str,
    body: dict[str, Any],
    headers: dict[str, str] | None = None,
) -> RequestRecord:
    """POST one streaming request body (`stream: true`, `max_tokens` set) to `url` with
    `headers`, and time every content chunk; never raises (as `stream_request`)."""
    max_tokens = int(body["max_tokens"])
    rec = RequestRecord(start=time.perf_counter())
    max_events = 4 * max_tokens + 64
    try:
        async with client.stream("POST", url, json=body, headers=headers) as resp:
            rec.status = resp.status_code
            rec.replica = resp.headers.get("x-ascend-router-replica")
            retry_after = resp.headers.get("retry-after")
            if retry_after is not None and retry_after.isdigit():
                rec.retry_after_s = float(retry_after)
            if resp.status_code != 200:
                text = (await resp.aread()).decode(errors="replace")[:200]
                rec.error = f"HTTP {resp.status_code}: {text}"
                return rec
            events = 0
            async for line in resp.aiter_lines():
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    break
                events += 1
                if events > max_events:
                    rec.error = f"more than {max_events} stream events"
                    break
                event = json.loads(data)
                if "error" in event:
                    rec.error = f"stream error: {json.dumps(event['error'])[:200]}"
                    break
                if _chunk_text(event):
                    rec.chunk_times.append(time.perf_counter())
                usage = event.get("usage")
                if usage and usage.get("completion_tokens") is not None:
                    rec.output_tokens = int(usage["completion_tokens"])
                    rec.prompt_tokens = usage.get("prompt_tokens")
                    details = usage.get("prompt_tokens_details") or {}
                    rec.cached_tokens = details.get("cached_tokens")
                    rec.usage_reported = True
    except (httpx.HTTPError, json.JSONDecodeError) as exc:
        rec.error = f"{type(exc).__name__}: {exc}"[:200]
    finally:
        rec.end = time.perf_counter()
    if not rec.usage_reported:
        rec.output_tokens = len(rec.chunk_times)
    if rec.error is None and not rec.chunk_times:
        rec.error = "no content chunks"
    return rec
