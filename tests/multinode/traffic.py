"""Steady chat traffic from a few client threads, every request's outcome recorded."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

REQUEST_TIMEOUT_S = 90.0  # a request still open after this counts as hung


@dataclass(frozen=True)
class Outcome:
    """One request: when it started and ended (`time.monotonic()`), whether it streamed, the
    HTTP status, the model that answered (`x-ascend-router-model`), the fallback chain
    (`x-ascend-router-fallback`), and the error message if it ended in one (an error status, or
    an error event in the stream)."""

    start: float
    end: float
    stream: bool
    status: int
    model: str
    fallback: str
    error: str | None

    @property
    def completed(self) -> bool:
        return self.status == 200 and self.error is None


def chat(client: httpx.Client, model: str, stream: bool, max_tokens: int) -> Outcome:
    """One chat request and its outcome; transport failures count as errors (status 0)."""
    body = {"model": model, "messages": [{"role": "user", "content": "Tell me about Paris."}],
            "max_tokens": max_tokens, "temperature": 0, "stream": stream}  # fmt: skip
    start = time.monotonic()
    status, headers, error = 0, httpx.Headers(), None
    try:
        with client.stream("POST", "/v1/chat/completions", json=body) as resp:
            status, headers = resp.status_code, resp.headers
            if status != 200:
                error = resp.read().decode()
            elif stream:
                error = _stream_error(resp)
            else:
                resp.read()
    except httpx.HTTPError as exc:
        error = f"{type(exc).__name__}: {exc}"
    model_used = headers.get("x-ascend-router-model", "")
    fallback = headers.get("x-ascend-router-fallback", "")
    return Outcome(start, time.monotonic(), stream, status, model_used, fallback, error)


def _stream_error(resp: httpx.Response) -> str | None:
    done = False
    for line in resp.iter_lines():
        if line == "data: [DONE]":
            done = True
        elif line.startswith("data: "):
            event: dict[str, Any] = json.loads(line[len("data: ") :])
            if "error" in event:
                return str(event["error"].get("message"))
    return None if done else "stream ended without [DONE]"


@dataclass
class Traffic:
    """`threads` clients sending `model` requests back to back (every other one streamed)
    until `stop()`.

    Args:
        url: the application's base URL.
        model: the `model` of every request.
        threads: concurrent clients.
        max_tokens: tokens asked per request.
    """

    url: str
    model: str
    threads: int = 3
    max_tokens: int = 48
    outcomes: list[Outcome] = field(default_factory=list)
    running: dict[int, tuple[float, bool]] = field(default_factory=dict)  # thread -> start, stream
    _stop: threading.Event = field(default_factory=threading.Event)
    _workers: list[threading.Thread] = field(default_factory=list)

    def start(self) -> Traffic:
        for i in range(self.threads):
            worker = threading.Thread(target=self._run, args=(i,), daemon=True)
            worker.start()
            self._workers.append(worker)
        return self

    def _run(self, index: int) -> None:
        with httpx.Client(base_url=self.url, timeout=REQUEST_TIMEOUT_S) as client:
            stream = index % 2 == 0
            while not self._stop.is_set():
                self.running[index] = (time.monotonic(), stream)
                self.outcomes.append(chat(client, self.model, stream, self.max_tokens))
                del self.running[index]
                stream = not stream

    def streaming_for(self, seconds: float) -> bool:
        """Whether a streamed request has been running for at least `seconds`."""
        now = time.monotonic()
        return any(stream and now - start >= seconds for start, stream in self.running.values())

    def stop(self) -> list[Outcome]:
        """Stop sending and wait for the requests in flight; every outcome, in end order.

        Raises:
            AssertionError: a client thread is still waiting on a request (a hang).
        """
        self._stop.set()
        for worker in self._workers:
            worker.join(REQUEST_TIMEOUT_S + 10)
            assert not worker.is_alive(), "a request hung"
        return sorted(self.outcomes, key=lambda o: o.end)
