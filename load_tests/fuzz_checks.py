"""Send fuzz examples over HTTP and check the server's answers; steady valid streams alongside.

For every example: no 5xx (nor a dropped connection), and every 4xx and 200 in the shape of the
endpoint's API (`load_tests.fuzz_shapes`: OpenAI's or Anthropic's error object, a stream without
an error event that ends as its API ends one). Every `check_every` examples: `GET /health` has
the `status` and `down` it had at the start, and a small valid chat request is served (200).
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import seed as hypothesis_seed
from hypothesis import strategies as st

from load_tests.client import RequestRecord, Target, stream_request
from load_tests.fuzz_requests import FuzzExample, valid_request
from load_tests.fuzz_shapes import answer_problem

SUPPRESSED = [
    HealthCheck.too_slow,  # every example is an HTTP round trip
    HealthCheck.data_too_large,
    HealthCheck.large_base_example,
    HealthCheck.filter_too_much,
]
BODY_KEEP = 4000
"""Bodies up to this many bytes are kept whole in a violation (to replay them)."""


@dataclass(frozen=True)
class Violation:
    """A broken expectation.

    Attributes:
        kind: `5xx`, `transport`, `error_body`, `stream_error`, `bad_200`, `health_changed` or
            `valid_failed`.
        family: The mutator family of the example sent (or just before, for the periodic
            checks).
        status: The HTTP status, None when there was none.
        detail: What was wrong (the response, cut).
        path: The route the example went to.
        body: The example's body (whole up to `BODY_KEEP` bytes, else its start and size).
    """

    kind: str
    family: str
    status: int | None
    detail: str
    path: str
    body: str

    def as_dict(self) -> dict[str, Any]:
        """JSON form for the report."""
        return dict(self.__dict__)


def status_class(status: int | None) -> str:
    """`2xx`, `4xx`, `5xx`, `other`, or `none` (no answer)."""
    if status is None:
        return "none"
    return f"{status // 100}xx" if status // 100 in (2, 4, 5) else "other"


@dataclass
class FuzzStats:
    """Counts of one fuzz run."""

    examples: int = 0
    expected_invalid: int = 0
    statuses: Counter[str] = field(default_factory=Counter)
    families: dict[str, Counter[str]] = field(default_factory=dict)
    health_checks: int = 0
    health_changes: int = 0
    valid_checks: int = 0
    valid_failures: int = 0
    accepted_invalid: list[str] = field(default_factory=list)
    violations: list[Violation] = field(default_factory=list)
    started: float = field(default_factory=time.perf_counter)

    def record(self, example: FuzzExample, status: int | None) -> None:
        """Count one example and its answer."""
        self.examples += 1
        self.expected_invalid += example.expected_invalid
        cls = status_class(status)
        self.statuses[cls] += 1
        fam = self.families.setdefault(example.family, Counter())
        fam.update({"sent": 1, "expected_invalid": int(example.expected_invalid), cls: 1})
        if example.expected_invalid and cls == "2xx" and len(self.accepted_invalid) < 20:
            self.accepted_invalid.append(f"{example.path} {example.preview(300)}")

    @property
    def invalid_share(self) -> float:
        """Share of examples the local checks call invalid."""
        return self.expected_invalid / self.examples if self.examples else 0.0

    def summary(self) -> dict[str, Any]:
        """The report's JSON summary."""
        kinds = Counter(v.kind for v in self.violations)
        return {
            "examples": self.examples,
            "invalid_share": round(self.invalid_share, 4),
            "status_classes": dict(self.statuses),
            "health_checks": self.health_checks,
            "health_changes": self.health_changes,
            "valid_checks": self.valid_checks,
            "valid_failures": self.valid_failures,
            "violations_by_kind": dict(kinds),
            "per_mutator": {k: dict(v) for k, v in sorted(self.families.items())},
            "accepted_invalid_samples": self.accepted_invalid,
            "duration_s": round(time.perf_counter() - self.started, 2),
        }


def _body_text(example: FuzzExample) -> str:
    return example.preview(BODY_KEEP)


class RequestPathChecker:
    """Sends examples to one server and checks every answer.

    Args:
        client: An httpx client whose `base_url` is the server (`http://127.0.0.1:PORT`).
        models: Served model ids; the valid probe request goes to each in turn.
        check_every: Check `/health` and the valid probe after every this many examples.
        probe_max_tokens: `max_tokens` of the valid probe.
    """

    def __init__(
        self,
        client: httpx.Client,
        models: Sequence[str],
        check_every: int = 1,
        probe_max_tokens: int = 2,
    ) -> None:
        self.client = client
        self.models = list(models)
        self.check_every = max(1, check_every)
        self.probe_max_tokens = probe_max_tokens
        self.stats = FuzzStats()
        self.health: tuple[Any, Any] | None = None

    def health_state(self) -> tuple[Any, Any]:
        """`(status, down)` of `GET /health`."""
        doc = self.client.get("/health").json()
        return doc.get("status"), doc.get("down")

    def start(self) -> None:
        """Record the health baseline (after one valid request, so every model has served)."""
        for model in self.models:
            self.client.post("/v1/chat/completions", json=valid_request(model, 1))
        self.health = self.health_state()

    def _violation(self, kind: str, ex: FuzzExample, status: int | None, detail: str) -> None:
        self.stats.violations.append(
            Violation(kind, ex.family, status, detail[:600], ex.path, _body_text(ex))
        )

    def send(self, example: FuzzExample) -> int | None:
        """POST one example and check its answer; returns the status (None: no answer)."""
        headers = {"content-type": "application/json"}
        try:
            resp = self.client.post(example.path, content=example.body, headers=headers)
        except httpx.HTTPError as exc:
            self._violation("transport", example, None, f"{type(exc).__name__}: {exc}")
            return None
        status = resp.status_code
        if status >= 500:
            self._violation("5xx", example, status, resp.text)
        else:
            problem = answer_problem(example.endpoint, resp)
            if problem is not None:
                self._violation(problem[0], example, status, problem[1])
        return status

    def periodic(self, example: FuzzExample) -> None:
        """The `/health` comparison and the valid probe, attributed to `example`."""
        self.stats.health_checks += 1
        try:
            state = self.health_state()
        except (httpx.HTTPError, json.JSONDecodeError) as exc:
            state = ("unreachable", repr(exc))
        if state != self.health:
            self.stats.health_changes += 1
            self._violation("health_changed", example, None, f"{self.health} -> {state}")
            self.health = state  # report each change once
        model = self.models[self.stats.valid_checks % len(self.models)]
        self.stats.valid_checks += 1
        body = valid_request(model, self.probe_max_tokens)
        try:
            resp = self.client.post("/v1/chat/completions", json=body)
            ok, detail = resp.status_code == 200, f"HTTP {resp.status_code}: {resp.text[:300]}"
        except httpx.HTTPError as exc:
            ok, detail = False, f"{type(exc).__name__}: {exc}"
        if not ok:
            self.stats.valid_failures += 1
            self._violation("valid_failed", example, None, f"{model}: {detail}")

    def check(self, example: FuzzExample) -> None:
        """Send `example`, count it, and run the periodic checks when due."""
        if self.health is None:
            self.start()
        self.stats.record(example, self.send(example))
        if self.stats.examples % self.check_every == 0:
            self.periodic(example)


def run_examples(
    strategy: st.SearchStrategy[FuzzExample],
    on_example: Callable[[FuzzExample], None],
    max_examples: int,
    seed: int | None = None,
) -> None:
    """Draw `max_examples` examples with hypothesis and hand each to `on_example`.

    Generation only (no shrinking, no example database); `on_example` should record problems
    rather than raise. `seed` None derandomizes (a fixed seed from the function).
    """

    @settings(
        max_examples=max_examples,
        database=None,
        deadline=None,
        derandomize=seed is None,
        phases=[Phase.generate],
        suppress_health_check=SUPPRESSED,
        print_blob=False,
    )
    @given(strategy)
    def _run(example: FuzzExample) -> None:
        on_example(example)

    (_run if seed is None else hypothesis_seed(seed)(_run))()


STREAM_PROMPT = "Tell me a short story about a lighthouse keeper."


@dataclass
class LoadStreams:
    """Steady valid streamed chat requests, back to back, while the fuzzer runs.

    Use as a context manager: `per_model` streams per model run in a background thread (one
    asyncio loop, `load_tests.client.stream_request`) until the block ends.

    Attributes:
        base_url: The server (`http://127.0.0.1:PORT`).
        models: Model ids to stream from.
        per_model: Concurrent streams per model (0: none).
        max_tokens: Tokens per request (fixed with `ignore_eos`).
    """

    base_url: str
    models: Sequence[str]
    per_model: int = 2
    max_tokens: int = 32
    records: list[RequestRecord] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __enter__(self) -> LoadStreams:
        if self.per_model > 0:
            self._thread = threading.Thread(target=lambda: asyncio.run(self._main()), daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=600)

    async def _main(self) -> None:
        limits = httpx.Limits(max_connections=len(self.models) * self.per_model + 2)
        async with httpx.AsyncClient(timeout=300, limits=limits, trust_env=False) as client:
            workers = [
                self._worker(client, Target(f"{self.base_url}/v1", model, model))
                for model in self.models
                for _ in range(self.per_model)
            ]
            await asyncio.gather(*workers)

    async def _worker(self, client: httpx.AsyncClient, target: Target) -> None:
        while not self._stop.is_set():
            rec = await stream_request(client, target, "chat", STREAM_PROMPT, "", self.max_tokens)
            self.records.append(rec)

    @property
    def errors(self) -> list[str]:
        """The failed requests' errors."""
        return [r.error for r in self.records if r.error is not None]

    def summary(self) -> dict[str, Any]:
        """Requests, errors and a few error samples."""
        return {
            "streams_per_model": self.per_model,
            "max_tokens": self.max_tokens,
            "requests": len(self.records),
            "errors": len(self.errors),
            "error_samples": self.errors[:10],
        }
