"""Seeded workloads and scenario flags, with a fake word-level tokenizer (no model files)."""

from __future__ import annotations

from pathlib import Path

import pytest
from load_test_helpers import FakeTokenizer, make_compare_doc

from load_tests.charts import plot_runs
from load_tests.online import build_parser
from load_tests.scenario import scenario_from_args
from load_tests.workload import WorkloadSpec, build_prompts


def test_fixed_lengths_and_determinism() -> None:
    spec = WorkloadSpec(num_requests=5, input_len=12, output_len=7, seed=3)
    a = build_prompts(spec, FakeTokenizer())
    b = build_prompts(spec, FakeTokenizer())
    assert [p.token_ids for p in a] == [p.token_ids for p in b]
    assert {p.input_len for p in a} == {12} and {p.output_len for p in a} == {7}
    assert len({tuple(p.token_ids) for p in a}) == 5  # distinct prompts


def test_random_lengths_stay_in_range() -> None:
    spec = WorkloadSpec(num_requests=50, input_len=100, output_len=40, range_ratio=0.5)
    prompts = build_prompts(spec, FakeTokenizer())
    assert all(50 <= p.input_len <= 150 and 20 <= p.output_len <= 60 for p in prompts)
    assert len({p.output_len for p in prompts}) > 1


def test_dataset_like_lengths_are_bounded() -> None:
    spec = WorkloadSpec(num_requests=50, input_len=64, output_len=32, dataset_like=True)
    prompts = build_prompts(spec, FakeTokenizer())
    assert all(4 <= p.input_len <= 256 and 2 <= p.output_len <= 128 for p in prompts)


def test_shared_prefix() -> None:
    spec = WorkloadSpec(num_requests=3, input_len=5, shared_prefix_tokens=40)
    prompts = build_prompts(spec, FakeTokenizer())
    assert len({p.prefix_text for p in prompts}) == 1
    assert all(p.text.startswith(p.prefix_text + "\n\nQuestion ") for p in prompts)
    assert all(p.input_len >= 45 for p in prompts)


def test_invalid_spec() -> None:
    with pytest.raises(ValueError, match="range_ratio"):
        WorkloadSpec(range_ratio=1.5)
    with pytest.raises(ValueError, match="num_requests"):
        WorkloadSpec(num_requests=0)


def test_scenario_flags() -> None:
    base = ["--base-url", "http://127.0.0.1:8000/v1", "--model", "m"]
    s = scenario_from_args(build_parser().parse_args(base))
    assert s.kind == "levels" and s.concurrencies == (1, 4, 16, 32)
    s = scenario_from_args(build_parser().parse_args([*base, "--burst", "200"]))
    assert (s.kind, s.concurrencies, s.spec.num_requests) == ("burst", (200,), 200)
    s = scenario_from_args(build_parser().parse_args([*base, "--shared-prefix-tokens", "1000"]))
    assert s.kind == "shared_prefix" and s.spec.shared_prefix_tokens == 1000
    both = [*base, "--burst", "5", "--shared-prefix-tokens", "10"]
    with pytest.raises(ValueError, match="pick one"):
        scenario_from_args(build_parser().parse_args(both))


def test_levels_get_fresh_prompts() -> None:
    base = ["--base-url", "http://127.0.0.1:8000/v1", "--model", "m", "--num-requests", "2"]
    s = scenario_from_args(build_parser().parse_args(base))
    tok = FakeTokenizer()
    assert s.prompts(tok, 0)[0].token_ids != s.prompts(tok, 1)[0].token_ids
    assert s.prompts(tok, 1)[0].token_ids == s.prompts(tok, 1)[0].token_ids


def test_chart_is_written(tmp_path: Path) -> None:
    png = plot_runs(make_compare_doc(), tmp_path / "chart.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
