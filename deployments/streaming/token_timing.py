"""Per-token timestamps carried with a streamed chunk, for `load_tests.token_breakdown`.

A caller that sends the header `x-ascend-router-timing: 1` gets, in front of each SSE event of
a chat stream, SSE comment lines (`: ...`, which every SSE client ignores: WHATWG HTML,
"Server-sent events", 9.2.6) with the times the event's token passed each point of the path:

    : ascend-router-replica {"step_started": ..., "step_ended": ..., "received": ...,
      "built": ..., "encoded": ...}
    : ascend-router-relay {"received": ..., "sent": ...}
    data: {...the chunk...}

Replica: the engine step that produced the token began (`step_started`, before scheduling) and
the token's output was built (`step_ended`: forward pass and sampling done); the replica's event
loop took it from the engine thread (`received`); the chunk was built (`built`: detokenised,
stop strings and the tool-call parser applied, chunk object made); its SSE bytes were made and
handed to Ray (`encoded`). Router: it took the bytes from the replica's stream (`received`) and
handed them on to the HTTP proxy (`sent`); one relay comment leads each item the router relays,
which may hold several events. Times are `time.monotonic()` seconds, CLOCK_MONOTONIC, one clock
for every process of a host, so the stamps compare only on one host. Without the header nothing
is added.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

TIMING_HEADER: Final = "x-ascend-router-timing"
"""The request header that asks for the timestamps (value `1`)."""

REPLICA_COMMENT: Final = ": ascend-router-replica "
"""Prefix of the replica's comment line (a JSON object follows)."""

RELAY_COMMENT: Final = ": ascend-router-relay "
"""Prefix of the router's comment line (a JSON object follows)."""


def wants_timing(headers: Mapping[str, str]) -> bool:
    """Whether a request's headers (lower-case names, as Starlette's) ask for the timestamps."""
    return headers.get(TIMING_HEADER) == "1"


@dataclass(frozen=True)
class TokenTiming:
    """When one chunk's token passed the engine and the replica's output processing.

    Attributes:
        step_started: its engine step began (`time.monotonic()` s; None when no step made it).
        step_ended: its output was built in the engine (s; None as above).
        received: the replica's event loop took the output (s).
    """

    step_started: float | None
    step_ended: float | None
    received: float

    def comment(self, built: float, encoded: float) -> str:
        """The replica's SSE comment line (with its newline); `built`: when the chunk was built
        from the output, `encoded`: when the event's bytes were made (`time.monotonic()` s)."""
        stamps = {
            "step_started": self.step_started,
            "step_ended": self.step_ended,
            "received": self.received,
            "built": built,
            "encoded": encoded,
        }
        return f"{REPLICA_COMMENT}{json.dumps(stamps)}\n"


def relay_comment(received: float) -> bytes:
    """The router's SSE comment line for an item it took from a replica at `received`
    (`time.monotonic()` s), stamped as sent now."""
    stamps = {"received": received, "sent": time.monotonic()}
    return f"{RELAY_COMMENT}{json.dumps(stamps)}\n".encode()
