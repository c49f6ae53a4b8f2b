"""`load_tests.spec_decode_bench`'s measurement at toy sizes: a tiny Llama whose greedy output
repeats itself, so prompt lookup finds drafts (the real run loads SmolLM2 int4)."""

from __future__ import annotations

from pathlib import Path

from configs.engine_config import EngineConfig
from engine.llm_engine import LLMEngine
from fixtures.tiny_checkpoints import make_tiny_checkpoint
from load_tests.spec_decode_bench import Modes, build_parser, engine_fields, measure


def test_both_modes_generate_the_same_tokens_and_on_reports_acceptance(tmp_path: Path) -> None:
    checkpoint = str(make_tiny_checkpoint("llama", tmp_path / "llama", real_vocab=False))
    spec = engine_fields(build_parser().parse_args(["--k", "3"]))["speculative"]
    engine = LLMEngine(
        checkpoint,
        EngineConfig(
            dtype="float32", max_model_len=96, speculative={**spec, "prompt_lookup_min": 1}
        ),
    )
    prompts = {"copy": [5, 6, 7, 8, 9] * 4, "free": [11, 3, 200, 17]}
    rows = measure(Modes(engine), prompts, output_len=24, repeats=2)
    assert [r["workload"] for r in rows] == ["copy", "free"]
    for row in rows:
        assert row["greedy_tokens_equal"]
        assert row["output_tokens"]["on"] == row["output_tokens"]["off"]
        assert row["tpot_ms"]["on"] > 0 and row["tpot_best_ratio_on_off"] > 0
    copy = rows[0]
    assert copy["drafts"] > 0 and 0 < copy["acceptance_rate"] <= 1
    assert copy["mean_acceptance_length"] == 1 + copy["accepted_tokens"] / copy["drafts"]
