"""Pipeline parallel == one rank, through the real multi-rank path: stage actors in one Ray
placement group joined by gloo, hidden states sent stage to stage, the batch as micro-batches.

Each comparison runs a continuous batch of several requests with chunked prefill (prompts
longer than the step's token budget) and a prefix-cache hit (a request added later shares its
first block with an earlier one), in float32 on tiny random checkpoints.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from engine_helpers import assert_dead_rank_stops_the_engine, greedy, run_to_completion, step

from configs.engine_config import EngineConfig
from engine.llm_engine import LLMEngine
from engine.parallel.pipeline import split_micro_batches
from engine.parallel.stage_layers import stage_layer_ranges
from engine.step_input import StepInput
from fixtures.tiny_checkpoints import make_tiny_checkpoint, tiny_config

PROMPTS = [[5, 6, 7, 8, 9, 10, 11, 12, 13, 14], [20, 21, 22], [100, 3, 4, 5, 6, 7, 8, 9, 10, 11]]
LATE = [5, 6, 7, 8, 9, 10, 11, 12, 40, 41]
"""Added after the first steps: its first block (8 tokens) is `PROMPTS[0]`'s, a cache hit."""


def _generate(path: Path, tp: int = 1, **fields: Any) -> tuple[dict[str, list[int]], int]:
    """Greedy tokens per request and the prefix-cache hits of one run."""
    config = EngineConfig(
        dtype="float32",
        num_kv_blocks=64,
        block_size=8,
        max_num_batched_tokens=16,
        max_model_len=128,
        rank_num_cpus=0.25,
        **fields,
    )
    engine = LLMEngine(str(path), config, tensor_parallel_size=tp)
    try:
        out: dict[str, list[int]] = {}
        for i, p in enumerate(PROMPTS):
            engine.add_request(str(i), p, greedy(8))
        for _ in range(3):  # PROMPTS[0]'s first block is computed and cached by now
            step(engine, out)
        engine.add_request("late", LATE, greedy(8))
        run_to_completion(engine, out)
        assert engine.block_manager.num_free_blocks == engine.block_manager.num_blocks
        return out, engine.block_manager.stats.hits
    finally:
        engine.shutdown()


@pytest.mark.parametrize("family", ["qwen2", "deepseek_v3"])
def test_tp2_pp2_equals_tp1(ray_session: None, tmp_path: Path, family: str) -> None:
    """Dense (Qwen2) and MoE with MLA (DeepSeek-V3: a dense first layer on stage 0, the MoE
    layer on stage 1): four ranks, each a stage's half of a layer's heads and experts."""
    path = make_tiny_checkpoint(family, tmp_path / family, real_vocab=False)
    expected, hits = _generate(path)
    assert hits >= 1
    assert _generate(path, tp=2, pipeline_parallel_size=2) == (expected, hits)


def test_pp2_even_and_overridden_partitions_equal_tp1(ray_session: None, tmp_path: Path) -> None:
    """Three layers over two stages: the even split (2 + 1) and an override (1 + 2)."""
    import torch
    from transformers import AutoModelForCausalLM

    config = tiny_config("qwen2")
    config.num_hidden_layers = 3
    config.layer_types = ["full_attention"] * 3
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(config).save_pretrained(tmp_path / "three")
    path = tmp_path / "three"
    expected = _generate(path)
    assert _generate(path, pipeline_parallel_size=2) == expected
    assert _generate(path, pipeline_parallel_size=2, pipeline_layer_partition=[1, 2]) == expected


def test_a_dead_stage_stops_the_engine_so_its_health_check_fails(
    ray_session: None, tmp_path: Path
) -> None:
    """The last stage's actor dies: the engine reports dead as for a dead tensor-parallel rank
    (`tests/engine/test_parallel.py`), so the replica's `check_health` fails."""
    path = make_tiny_checkpoint("qwen2", tmp_path / "qwen2", real_vocab=False)
    config = EngineConfig(
        dtype="float32",
        num_kv_blocks=64,
        block_size=8,
        max_model_len=128,
        rank_num_cpus=0.25,
        pipeline_parallel_size=2,
    )
    assert_dead_rank_stops_the_engine(
        lambda: LLMEngine(str(path), config), "rank 1 (pipeline stage 1) of 2 died"
    )


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"pipeline_parallel_size": 2, "pipeline_layer_partition": [2]},
         r"pipeline_layer_partition \[2\] has 1 entries; give one layer count per stage"),
        ({"pipeline_parallel_size": 2, "pipeline_layer_partition": [2, 0]},
         r"every stage needs at least one layer"),
        ({"pipeline_parallel_size": 2, "enforce_eager": False},
         r"pipeline_parallel_size=2 does not run with enforce_eager: false"),
        ({"pipeline_parallel_size": 2, "speculative": {"method": "ngram", "num_speculative_tokens": 2}},
         r"does not run with speculative"),
        ({"pipeline_parallel_size": 2, "lora": {"max_lora_rank": 8}},
         r"does not run with lora"),
    ],
    ids=["partition-length", "empty-stage", "graph-mode", "speculative", "lora"],
)  # fmt: skip
def test_invalid_pipeline_configs_are_refused(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        EngineConfig(**fields)


@pytest.mark.parametrize(
    ("family", "fields", "message"),
    [
        ("qwen2", {"pipeline_parallel_size": 2, "pipeline_layer_partition": [1, 2]},
         r"pipeline_layer_partition \[1, 2\] sums to 3, but the model has 2 decoder layers"),
        ("qwen2", {"pipeline_parallel_size": 3},
         r"pipeline_parallel_size=3 needs at least one decoder layer per stage; the model has 2"),
        ("deepseek_v4", {"pipeline_parallel_size": 2, "block_size": 16},
         r"pipeline_parallel_size > 1 does not run DeepSeek-V4"),
    ],
    ids=["partition-sum", "more-stages-than-layers", "deepseek-v4"],
)  # fmt: skip
def test_pipelines_the_model_cannot_run_fail_before_any_rank_starts(
    tmp_path: Path, family: str, fields: dict[str, Any], message: str
) -> None:
    path = make_tiny_checkpoint(family, tmp_path / family, real_vocab=False)
    config = EngineConfig(dtype="float32", num_kv_blocks=64, max_model_len=128, **fields)
    with pytest.raises(ValueError, match=message):
        LLMEngine(str(path), config)  # no Ray session: it fails before placing ranks


def test_even_split_puts_the_remainder_before_the_last_stage() -> None:
    assert stage_layer_ranges(7, 3) == [range(0, 2), range(2, 5), range(5, 7)]
    assert stage_layer_ranges(8, 3) == [range(0, 3), range(3, 6), range(6, 8)]
    assert stage_layer_ranges(4, 2, [3, 1]) == [range(0, 3), range(3, 4)]


def test_micro_batches_keep_whole_sequences_and_every_row_once() -> None:
    q_lens = [7, 3, 1, 1, 12]
    step = StepInput(
        token_ids=list(range(sum(q_lens))),
        starts=[0, 0, 5, 9, 0],
        q_lens=q_lens,
        block_tables=[[i] for i in range(5)],
        rows=[6, 9, 10, 11, 23],
        prompt_lens=[7, 3, 2, 3, 30],
    )
    batches = split_micro_batches(step, 2)
    assert [b.step.q_lens for b in batches] == [[7, 3, 1, 1], [12]]  # 12 tokens each
    assert [b.rows for b in batches] == [[0, 1, 2, 3], [4]]
    assert [b.step.rows for b in batches] == [[6, 9, 10, 11], [11]]
    assert batches[1].step.token_ids == step.token_ids[12:]
    assert batches[1].step.starts == [0] and batches[1].step.prompt_lens == [30]
    assert len(split_micro_batches(step, 9)) == 5  # at most one per sequence


def test_plan_accounts_per_stage() -> None:
    """`ascend-router plan` of prod.yaml's TP 2 x PP 2 Qwen2.5-32B: a rank holds half of one
    stage's 32 layers' weights and their KV only."""
    from configs.serve_file import load_app_config, pick_model
    from operate.planning.memory_plan import plan_deployment
    from operate.planning.model_facts import model_facts

    prod = Path(__file__).resolve().parents[2] / "configs" / "prod.yaml"
    model = pick_model(load_app_config(prod), "qwen2.5-32b-instruct")
    plan = plan_deployment(model, model_facts(model))
    assert plan.pipeline_stage_layers == (32, 32)
    tp_share = 32763876352 * 2 // 2  # bfloat16 over 2 ranks (even: no rounding)
    assert plan.weights_per_rank == tp_share * 32 // 64
    assert plan.kv_bytes_per_token == 32 * (8 // 2) * (128 + 128) * 2  # layers x kv heads x bf16
    assert plan.fits
