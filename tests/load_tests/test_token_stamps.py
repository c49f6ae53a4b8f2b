"""`load_tests.token_stamps`: a stamped SSE stream read line by line into each token's time per
stage of the serving path."""

from __future__ import annotations

import json
import time

import pytest

from deployments.streaming.token_timing import RELAY_COMMENT, REPLICA_COMMENT
from load_tests.token_stamps import (
    STAGES,
    StampedStream,
    client_parse_s,
    stage_medians,
    token_stages,
)


def _lines(k: int, base: float) -> list[tuple[str, float]]:
    """Token `k`'s lines as they arrive: its step runs base..base+8 ms, then 0.1 ms per stage
    up to the client, which gets it at base + 8.7 ms."""
    replica = {
        "step_started": base,
        "step_ended": base + 0.008,
        "received": base + 0.0081,
        "built": base + 0.0082,
        "encoded": base + 0.0083,
    }
    relay = {"received": base + 0.0084, "sent": base + 0.0085}
    data = json.dumps({"choices": [{"index": 0, "delta": {"content": f"t{k}"}}]})
    arrived = base + 0.0087
    return [
        (RELAY_COMMENT + json.dumps(relay), arrived),
        (REPLICA_COMMENT + json.dumps(replica), arrived),
        (f"data: {data}", arrived),
        ("", arrived),
    ]


def test_stages_of_a_stamped_stream() -> None:
    """Tokens every 9 ms, each a 8 ms step: each stage is the gap between its two stamps,
    `outside_step` is TPOT minus the step, and the stream ends at `[DONE]`."""
    stream = StampedStream()
    lines = [line for k in range(4) for line in _lines(k, 1.0 + 0.009 * k)]
    assert all(stream.add_line(line, t) for line, t in lines)
    assert stream.add_line("data: {}", 2.0)  # an unstamped event (the usage chunk) is not a token
    assert not stream.add_line("data: [DONE]", 2.0)
    rows = token_stages(stream)
    assert len(stream.events) == 4 and len(rows) == 3  # the first token's gap is TTFT
    expected = {
        "tpot": 9.0,
        "engine_step": 8.0,
        "engine_between_steps": 1.0,
        "replica_handoff": 0.1,
        "replica_output": 0.1,
        "replica_encode": 0.1,
        "replica_to_router": 0.1,
        "router": 0.1,
        "proxy_and_client": 0.2,
        "outside_step": 1.0,
    }
    for row in rows:
        assert {k: pytest.approx(v / 1000, abs=1e-9) for k, v in expected.items()} == row
    medians = stage_medians(rows, client_parse_s([stream], time.perf_counter))
    assert list(medians) == list(STAGES)
    assert medians["tpot"] == {"median_ms": pytest.approx(9.0), "tokens": 3}
    assert medians["client"]["tokens"] == 4 and medians["client"]["median_ms"] > 0


def test_missing_relay_stamps_leave_those_stages_out() -> None:
    """Without the router's stamps (a caller of the Python API), only the replica's stages and
    the TPOT are reported."""
    stream = StampedStream()
    for k in range(3):
        for line, t in _lines(k, 0.009 * k)[1:]:
            stream.add_line(line, t)
    rows = token_stages(stream)
    assert rows and all("router" not in r and "proxy_and_client" not in r for r in rows)
    assert all({"tpot", "engine_step", "replica_output", "outside_step"} <= set(r) for r in rows)
    assert stage_medians(rows, [])["router"] == {"median_ms": None, "tokens": 0}
