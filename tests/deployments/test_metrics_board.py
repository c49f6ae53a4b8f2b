"""The metrics board's bookkeeping (`ReplicaReports`) on a fake clock, the monitoring settings, and
how `admit` groups the samples of one prompt."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from configs.monitoring import MonitoringConfig
from deployments.handlers.choices import sample_groups
from deployments.metrics.board import ReplicaReports
from engine.sampling_params import SamplingParams


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_board_serves_each_replicas_latest_push_of_the_asked_models() -> None:
    clock = Clock()
    board = ReplicaReports(ttl_s=10, clock=clock)
    board.push("a1", "model-a", b"first")
    board.push("a1", "model-a", b"second")
    board.push("a2", "model-a", b"other replica")
    board.push("b1", "model-b", b"model b")
    assert sorted(board.latest({"model-a"})) == [b"other replica", b"second"]
    assert board.latest({"model-b", "model-c"}) == [b"model b"]


def test_a_silent_replica_is_dropped_after_the_ttl_and_a_leaving_one_at_once() -> None:
    clock = Clock()
    board = ReplicaReports(ttl_s=10, clock=clock)
    board.push("stale", "m", b"stale")
    board.push("leaving", "m", b"leaving")
    clock.now += 6
    board.push("live", "m", b"live")
    board.drop("leaving")
    board.drop("never-pushed")
    assert sorted(board.latest({"m"})) == [b"live", b"stale"]
    clock.now += 5  # 11 s since "stale" pushed, 5 s since "live" did
    assert board.latest({"m"}) == [b"live"]
    board.push("stale", "m", b"back")  # a replica that reports again is served again
    assert sorted(board.latest({"m"})) == [b"back", b"live"]


def test_the_ttl_must_span_several_pushes() -> None:
    assert MonitoringConfig().replica_ttl_s >= 2 * MonitoringConfig().push_interval_s
    with pytest.raises(ValidationError, match="replica_ttl_s"):
        MonitoringConfig(push_interval_s=5, replica_ttl_s=6)


def test_the_choices_of_one_prompt_form_one_sample_group() -> None:
    a, b = [1, 2, 3], [1, 2, 3]  # equal but distinct prompts: two groups
    p = SamplingParams()
    groups = sample_groups([(a, p), (a, p), (a, p), (b, p), (b, p), ([7], p)])
    assert groups[0] is groups[1] is groups[2] and groups[0] is not None
    assert groups[0].size == 3
    assert groups[3] is groups[4] and groups[3] is not groups[0] and groups[3].size == 2
    assert groups[5] is None
    assert sample_groups([(a, p)]) == [None]
