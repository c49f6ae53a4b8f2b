"""A timed stream's per-token stamps (`deployments.streaming.token_timing`) turned into each
token's time per stage of the serving path.

Every SSE line is stamped by the client with `time.monotonic()` as it arrives; each content
event carries the replica's stamps and the router's relay stamps (comment lines). For token `k`
of a stream (after its first, whose gap is TTFT):

| stage | from | to |
|---|---|---|
| `tpot` | client got token k-1 | client got token k (the time per output token) |
| `engine_step` | its step began | its output was built |
| `engine_between_steps` | token k-1's output was built | token k's step began |
| `replica_handoff` | output built (engine thread) | the replica's event loop took it |
| `replica_output` | taken | chunk built: detokenise, stop strings, tool parser, chunk object |
| `replica_encode` | chunk built | SSE bytes made (the replica's batching queue and encoding) |
| `replica_to_router` | SSE bytes made | the router took them (Ray's stream: serialisation, a hop) |
| `router` | taken | the router handed them on |
| `proxy_and_client` | handed on | the line reached the client (Ray's hop, the proxy, HTTP) |
| `client` | | the client parsing the event's JSON (measured on the client after the stream) |
| `outside_step` | | `tpot - engine_step`: all of a token's time that is not its engine step |

At one stream the stages of a token run in sequence after its step while the next step already
runs, so a token's time is its step plus the time between steps (`engine_step +
engine_between_steps` ≈ `tpot`): work after the step costs a token only where it delays the next
step (a shared core, the GIL) or where it takes longer than a step. The per-stage medians say
where the rest goes.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from deployments.streaming.token_timing import RELAY_COMMENT, REPLICA_COMMENT

STAGES: tuple[str, ...] = (
    "tpot",
    "engine_step",
    "engine_between_steps",
    "replica_handoff",
    "replica_output",
    "replica_encode",
    "replica_to_router",
    "router",
    "proxy_and_client",
    "client",
    "outside_step",
)
"""The stages reported, in path order (see the module docstring)."""


@dataclass
class StampedEvent:
    """One content event of a stream as the client saw it.

    Attributes:
        arrived: when its `data:` line reached the client (`time.monotonic()` s).
        data: the line's JSON text.
        replica: the replica's stamps (`TokenTiming.comment`), None when absent.
        relay: the router's stamps of the item that carried it, None when absent.
    """

    arrived: float
    data: str
    replica: dict[str, float | None] | None = None
    relay: dict[str, float] | None = None


@dataclass
class StampedStream:
    """The lines of one stream, collected as they arrive (`add_line`).

    Attributes:
        events: the content events (those with stamps or text), in arrival order.
    """

    events: list[StampedEvent] = field(default_factory=list)
    _replica: dict[str, float | None] | None = None
    _relay: dict[str, float] | None = None

    def add_line(self, line: str, arrived: float) -> bool:
        """Take one SSE line that arrived at `arrived`; False once the stream's `[DONE]` came."""
        if line.startswith(RELAY_COMMENT):
            self._relay = json.loads(line[len(RELAY_COMMENT) :])
        elif line.startswith(REPLICA_COMMENT):
            self._replica = json.loads(line[len(REPLICA_COMMENT) :])
        elif line.startswith("data:"):
            data = line[5:].strip()
            if data == "[DONE]":
                return False
            if self._replica is not None:
                self.events.append(StampedEvent(arrived, data, self._replica, self._relay))
            self._replica = None
        return True


def _gap(stamps: dict[str, Any] | None, start: str, end: str) -> float | None:
    if stamps is None or stamps.get(start) is None or stamps.get(end) is None:
        return None
    return float(stamps[end]) - float(stamps[start])


def token_stages(stream: StampedStream) -> list[dict[str, float]]:
    """Each stamped token's time per stage (s), from the stream's second stamped event on (the
    first has no previous token: its time is TTFT). A stage whose stamps are missing (no relay
    stamps on the Python API, say) is left out of that token's dict."""
    rows: list[dict[str, float]] = []
    for prev, ev in zip(stream.events, stream.events[1:]):
        r, p = ev.replica or {}, prev.replica or {}
        row: dict[str, float] = {"tpot": ev.arrived - prev.arrived}
        stages = {
            "engine_step": _gap(r, "step_started", "step_ended"),
            "replica_handoff": _gap(r, "step_ended", "received"),
            "replica_output": _gap(r, "received", "built"),
            "replica_encode": _gap(r, "built", "encoded"),
            "router": _gap(ev.relay, "received", "sent"),
        }
        if p.get("step_ended") is not None and r.get("step_started") is not None:
            stages["engine_between_steps"] = float(r["step_started"]) - float(p["step_ended"])
        if ev.relay is not None and r.get("encoded") is not None:
            stages["replica_to_router"] = ev.relay["received"] - float(r["encoded"])
            stages["proxy_and_client"] = ev.arrived - ev.relay["sent"]
        row.update({k: v for k, v in stages.items() if v is not None})
        if "engine_step" in row:
            row["outside_step"] = row["tpot"] - row["engine_step"]
        rows.append(row)
    return rows


def client_parse_s(streams: Iterable[StampedStream], time_fn: Any) -> list[float]:
    """The time the client takes to parse each event's JSON (`json.loads`, as the OpenAI SDK
    does per event), measured with `time_fn` (e.g. `time.perf_counter`), in seconds."""
    out = []
    for stream in streams:
        for ev in stream.events:
            t0 = time_fn()
            json.loads(ev.data)
            out.append(time_fn() - t0)
    return out


def stage_medians(rows: Sequence[dict[str, float]], client: Sequence[float]) -> dict[str, Any]:
    """The median of each stage over `rows` and the client's parse times, in milliseconds, with
    the number of tokens each median is over."""
    out: dict[str, Any] = {}
    for stage in STAGES:
        values = list(client) if stage == "client" else [r[stage] for r in rows if stage in r]
        out[stage] = {
            "median_ms": statistics.median(values) * 1000 if values else None,
            "tokens": len(values),
        }
    return out
