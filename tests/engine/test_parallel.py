"""Tensor parallel 2 == 1 (Qwen, Phi-3, DeepSeek-V3/V4) and expert parallel 2 == 1 (DeepSeek-V3/V4),
through the real multi-rank path: rank actors in a Ray placement group joined by a gloo process group."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from engine_helpers import assert_dead_rank_stops_the_engine, greedy, run_to_completion

from configs.engine_config import EngineConfig
from engine.llm_engine import LLMEngine
from fixtures.tiny_checkpoints import make_tiny_checkpoint, tiny_config

PROMPTS = [[5, 6, 7, 8, 9, 10, 11], [20, 21, 22], [100, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13]]


def _generate(path: Path, tp: int, ep: bool, block_size: int = 8) -> dict[str, list[int]]:
    config = EngineConfig(
        dtype="float32",
        num_kv_blocks=64,
        block_size=block_size,
        max_num_batched_tokens=16,
        max_model_len=256,
        rank_num_cpus=0.25,
    )
    engine = LLMEngine(str(path), config, tensor_parallel_size=tp, expert_parallel=ep)
    try:
        for i, p in enumerate(PROMPTS):
            engine.add_request(str(i), p, greedy(12))
        out = run_to_completion(engine)
        assert engine.block_manager.num_free_blocks == engine.block_manager.num_blocks
        return out
    finally:
        engine.shutdown()


@pytest.mark.parametrize(
    ("family", "ep"),
    [
        ("qwen2", False),
        ("phi3", False),
        ("deepseek_v3", True),
        ("deepseek_v3", False),
        # query heads, sinks and output groups split; the one K=V head, compressor and
        # indexer replicated; routed experts split by width (tp2) or by expert (ep2)
        ("deepseek_v4", False),
        ("deepseek_v4", True),
    ],
    ids=[
        "qwen2-tp2",
        "phi3-tp2",
        "deepseek_v3-ep2",
        "deepseek_v3-tp2",
        "deepseek_v4-tp2",
        "deepseek_v4-ep2",
    ],
)
def test_two_ranks_equal_one(ray_session: None, tmp_path: Path, family: str, ep: bool) -> None:
    path = make_tiny_checkpoint(family, tmp_path / family, real_vocab=False)
    block_size = 16 if family == "deepseek_v4" else 8  # whole compression windows per block
    assert _generate(path, 2, ep, block_size) == _generate(path, 1, False, block_size)


def test_fewer_kv_heads_than_ranks_replicates_them(ray_session: None, tmp_path: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM

    config = tiny_config("qwen2")
    config.num_key_value_heads = 1  # GQA with one K/V head: each rank holds a copy
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(config).save_pretrained(tmp_path / "kv1")
    assert _generate(tmp_path / "kv1", 2, False) == _generate(tmp_path / "kv1", 1, False)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"rank_num_cpus": 8}, r"tensor_parallel_size=2 needs 2 x \{'CPU': 8"),
        # one node here: a rank per node cannot be placed
        ({"rank_num_cpus": 0.25, "tensor_parallel_placement": "STRICT_SPREAD"},
         r"needs 2 x \{'CPU': 0.25\} \(STRICT_SPREAD\)"),
    ],
    ids=["missing-resources", "strict-spread-on-one-node"],
)  # fmt: skip
def test_unplaceable_ranks_fail_fast_naming_why(
    ray_session: None, tmp_path: Path, fields: dict[str, Any], message: str
) -> None:
    path = make_tiny_checkpoint("qwen2", tmp_path / "qwen2", real_vocab=False)
    config = EngineConfig(
        dtype="float32", num_kv_blocks=64, max_model_len=256, placement_timeout_s=3, **fields
    )
    with pytest.raises(RuntimeError, match=message):
        LLMEngine(str(path), config, tensor_parallel_size=2)


def test_rank0_hands_out_its_node_ip_as_ray_reports_it(ray_session: None) -> None:
    import ray

    from engine.parallel.worker import RankWorker

    rank0 = ray.remote(RankWorker).options(num_cpus=0.05).remote(0, 2, 1)
    try:
        host, port = ray.get(rank0.open_rendezvous.remote(), timeout=60)
    finally:
        ray.kill(rank0)
    (node,) = ray.nodes()  # the test session's one node
    assert (host, port > 0) == (node["NodeManagerAddress"], True)


def test_rendezvous_host_overrides(monkeypatch: pytest.MonkeyPatch) -> None:
    from engine.parallel.worker import RENDEZVOUS_HOST_ENV, rendezvous_host

    monkeypatch.setenv("HCCL_IF_IP", "10.0.0.9")  # an Ascend setting: not on this CPU host
    detected = rendezvous_host()
    assert detected != "10.0.0.9"
    monkeypatch.setenv(RENDEZVOUS_HOST_ENV, "127.0.0.1")
    assert rendezvous_host() == "127.0.0.1"


def test_a_dead_rank_stops_the_engine_so_its_health_check_fails(
    ray_session: None, tmp_path: Path
) -> None:
    """A rank whose actor dies (its node left, say) fails every later step: the engine must
    stop serving, end its requests with `error_kind="dead"` and report why, so that the
    replica's `check_health` fails and Serve replaces it."""
    path = make_tiny_checkpoint("qwen2", tmp_path / "qwen2", real_vocab=False)
    config = EngineConfig(
        dtype="float32", num_kv_blocks=64, block_size=8, max_model_len=256, rank_num_cpus=0.25
    )
    assert_dead_rank_stops_the_engine(
        lambda: LLMEngine(str(path), config, tensor_parallel_size=2),
        "tensor-parallel rank 1 of 2 died",
    )
