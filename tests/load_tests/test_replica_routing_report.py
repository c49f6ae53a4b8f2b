"""The replica-routing and priority-overload benchmarks' arithmetic on recorded requests (no
server): per-replica hit rates from `/metrics` deltas, TTFT summaries and ratios, and the Serve
args each mode or phase runs."""

from __future__ import annotations

from load_tests.client import RequestRecord
from load_tests.priority_overload import PRIORITIES, build_parser, serve_args
from load_tests.replica_routing import app_args, summary, system_prompt, table


def record(ttft_s: float, replica: str, prompt: int, cached: int) -> RequestRecord:
    rec = RequestRecord(start=0.0, end=ttft_s + 0.5, chunk_times=[ttft_s, ttft_s + 0.1])
    rec.replica, rec.prompt_tokens, rec.cached_tokens, rec.output_tokens = (
        replica,
        prompt,
        cached,
        2,
    )
    return rec


def test_summary_counts_per_replica_hits_and_later_turns() -> None:
    records = [
        (0, record(1.0, "a", 100, 0)),
        (1, record(0.2, "a", 150, 96)),
        (0, record(1.2, "b", 100, 0)),
        (1, record(0.3, "b", 150, 96)),
    ]
    before = {"a": (10.0, 2.0), "b": (0.0, 0.0)}
    after = {"a": (30.0, 12.0), "b": (20.0, 6.0)}
    result = summary(records, 4.0, before, after)
    assert result["replicas"] == {
        "a": {"requests": 2, "hit_rate": 0.5},
        "b": {"requests": 2, "hit_rate": 0.3},
    }
    assert result["prefix_hit_rate"] == 16 / 40
    assert result["cached_token_share"] == 192 / 500
    assert result["cached_token_share_after_first_turn"] == 192 / 300
    assert result["ttft_after_first_turn_ms"]["p50"] == 250.0
    assert result["requests_per_s"] == 1.0
    text = table({"default": result, "prefix_aware": result})
    assert "1.00" in text and "prefix_aware" in text


def test_modes_and_phases_change_only_what_they_say() -> None:
    assert app_args("prefix_aware")["models"][0]["routing"]["replica"] == "prefix_aware"
    session = app_args("session")["models"][0]["routing"]
    assert (session["replica"], session["session_affinity"]) == ("power_of_two", True)
    args = build_parser().parse_args(["--max-ongoing", "3"])
    loaded = serve_args(args, priorities=True)
    assert loaded["priorities"] == PRIORITIES
    assert loaded["models"][0]["deployment"]["max_ongoing_requests"] == 3
    assert "priorities" not in serve_args(args, priorities=False)
    assert system_prompt(1, 120) != system_prompt(2, 120)  # conversations share no prefix
