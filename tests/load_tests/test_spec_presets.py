"""The speculative-decoding workloads of `load_tests.compare` (presets `copy-heavy`, `free-gen`),
their acceptance figures from server counters, and the on/off Serve config (no Ray)."""

from __future__ import annotations

import pytest
from load_test_helpers import FakeTokenizer, make_levels

from load_tests.compare import add_spec_decode, build_parser, median_levels, scenarios
from load_tests.server_metrics import spec_decode_delta
from load_tests.spec_decode_bench import WORKLOADS
from load_tests.spec_on_off_config import SOURCE, on_off_document
from load_tests.text_prompts import COPY_MESSAGE
from load_tests.workload import WorkloadSpec

_TARGETS = ["--a", "http://127.0.0.1:1/v1,m,a", "--b", "http://127.0.0.1:2/v1,m,b"]


def test_text_presets_build_distinct_copy_and_free_prompts() -> None:
    args = build_parser().parse_args([*_TARGETS, "--presets", "copy-heavy", "free-gen"])
    (copy_name, copy_s), (free_name, free_s) = scenarios(args)
    assert (copy_name, free_name) == ("copy-heavy", "free-gen")
    assert copy_s.opts.endpoint == free_s.opts.endpoint == "chat"
    copies = copy_s.prompts(FakeTokenizer(), 0)
    assert all(p.text.endswith(COPY_MESSAGE) and p.output_len == 128 for p in copies)
    assert len({p.text for p in copies}) == len(copies) == 32  # no prompt cache hits
    assert copies[0].text != copy_s.prompts(FakeTokenizer(), 1)[0].text  # fresh per level
    frees = free_s.prompts(FakeTokenizer(), 0)
    assert all("Write a long story about" in p.text and COPY_MESSAGE not in p.text for p in frees)
    assert WORKLOADS["copy"] == COPY_MESSAGE  # spec_decode_bench uses the same text
    with pytest.raises(ValueError, match="no shared prefix"):
        WorkloadSpec(text="copy", shared_prefix_tokens=8)


def test_text_workload_flag_without_preset() -> None:
    argv = [*_TARGETS, "--text-workload", "copy", "--endpoint", "chat", "--output-len", "16"]
    ((name, s),) = scenarios(build_parser().parse_args(argv))
    assert name is None and s.spec.text == "copy" and s.spec.output_len == 16


def test_acceptance_per_level_and_pooled_over_rounds() -> None:
    def counters(drafts: float, proposed: float, accepted: float) -> dict[str, float]:
        return {
            "spec_decode_num_drafts": drafts,
            "spec_decode_num_draft_tokens": proposed,
            "spec_decode_num_accepted_tokens": accepted,
        }

    assert spec_decode_delta(None, {"num_requests_running": 0}) is None  # no speculation
    rounds = []
    for offset in (0, 100):
        levels = make_levels(1.0)
        levels[0]["server_after"] = counters(10 + offset, 40 + offset, 30 + offset)
        levels[1]["server_after"] = counters(30 + offset, 120 + offset, 50 + offset)
        add_spec_decode(levels, counters(offset, offset, offset))
        rounds.append(levels)
    first, second = rounds[0]
    assert first["spec_decode"]["acceptance_rate"] == 30 / 40
    assert first["spec_decode"]["mean_acceptance_length"] == 1 + 30 / 10
    assert second["spec_decode"]["acceptance_rate"] == 20 / 80
    pooled = median_levels(rounds)
    assert pooled[0]["spec_decode"]["draft_tokens"] == 80
    assert pooled[0]["spec_decode"]["acceptance_rate"] == 60 / 80


def test_on_off_config_adds_a_model_without_speculation() -> None:
    doc = on_off_document(SOURCE, "smollm2-long", port=8123)
    models = {m["model_id"]: m for m in doc["applications"][0]["args"]["models"]}
    assert "speculative" in models["smollm2-long"]["engine"]
    assert "speculative" not in models["smollm2-long-nospec"]["engine"]
    off, on = models["smollm2-long-nospec"]["engine"], dict(models["smollm2-long"]["engine"])
    del on["speculative"]
    assert off == on and doc["http_options"]["port"] == 8123
    with pytest.raises(ValueError, match="speculative"):
        on_off_document(SOURCE.parent / "local.yaml", "smollm2-long")


def test_each_run_draws_its_prompts_unless_seeded() -> None:
    """Without `--seed` two runs send different prompts (a peer's prompt cache kept from an
    earlier run must not answer this one); `--seed` repeats a run's prompts."""

    def seed_of(*extra: str) -> int:
        args = build_parser().parse_args([*_TARGETS, "--presets", "decode-heavy", *extra])
        ((_, s),) = scenarios(args)
        assert s.spec.seed == args.seed
        return s.spec.seed

    assert len({seed_of() for _ in range(4)}) > 1
    assert seed_of("--seed", "7") == seed_of("--seed", "7") == 7
