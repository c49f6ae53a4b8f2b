"""`ascend-router plan`: weights, KV per token, blocks and concurrency per deployment."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml
from cli_helpers import run_command
from safetensors.torch import save_file

from cli import plan_cmd
from configs.model_config import ModelDeploymentConfig
from configs.serve_file import load_app_config, pick_model
from operate.planning.hub_configs import hub_checkpoint
from operate.planning.memory_plan import ACTIVATION_RESERVE_BYTES, GiB, plan_deployment
from operate.planning.model_facts import model_facts

PROD = Path(__file__).resolve().parents[2] / "configs" / "prod.yaml"


def _prod_doc() -> dict:
    return yaml.safe_load(PROD.read_text())


def _write(doc: dict, path: Path) -> Path:
    path.write_text(yaml.safe_dump(doc))
    return path


def test_prod_fits(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_command(plan_cmd, ["plan", str(PROD)]) == 0
    out = capsys.readouterr().out
    models = ("qwen2.5-7b-instruct", "deepseek-v2-lite-chat", "phi-3-mini-4k-instruct")
    for model in (*models, "deepseek-v4-flash"):
        assert model in out
    assert "CANNOT FIT" not in out and "| NO" not in out


def test_qwen_plan_follows_the_documented_formulas() -> None:
    model = pick_model(load_app_config(PROD), "qwen2.5-7b-instruct")
    plan = plan_deployment(model, model_facts(model))
    weights = 7615616512 * 2  # bfloat16
    per_token = 28 * 4 * (128 + 128) * 2  # layers × kv heads × (k + v) × bytes
    budget = int(64 * GiB * 0.9) - weights - ACTIVATION_RESERVE_BYTES
    blocks = budget // (per_token * 128)
    assert (plan.weights_per_rank, plan.kv_bytes_per_token, plan.kv_budget) == (
        weights,
        per_token,
        budget,
    )
    assert plan.num_blocks == blocks and plan.blocks_per_seq == 32768 // 128
    assert plan.max_seqs_full_context == blocks // 256 and plan.fits


def test_tensor_parallel_splits_weights_and_replicates_the_mla_latent() -> None:
    model = pick_model(load_app_config(PROD), "deepseek-v2-lite-chat")
    plan = plan_deployment(model, model_facts(model))
    assert plan.weights_per_rank == -(-15706484224 * 2 // 4)
    # (kv_lora_rank + qk_rope_head_dim) x layers x bf16 on every rank, not the expanded
    # 27 x (16 // 4) x (192 + 128) x 2 = 69,120 per rank
    assert plan.kv_bytes_per_token == (512 + 64) * 27 * 2 == 31104


def test_prod_plan_prints_the_latent_kv_figure_for_deepseek(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert run_command(plan_cmd, ["plan", str(PROD)]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if "deepseek" in line)
    assert "| 30.4 KiB " in row, row


def test_mla_shape_fields_come_together(tmp_path: Path) -> None:
    doc = _prod_doc()
    doc["applications"][0]["args"]["models"][1]["shape"].pop("qk_rope_head_dim")
    with pytest.raises(ValueError, match="kv_lora_rank and qk_rope_head_dim together"):
        load_app_config(_write(doc, tmp_path / "half-mla.yaml"))


def test_a_local_deepseek_checkpoint_plans_its_latent(tmp_path: Path) -> None:
    from fixtures.tiny_checkpoints import make_tiny_checkpoint

    path = make_tiny_checkpoint("deepseek_v2", tmp_path / "dsv2", real_vocab=False)
    model = ModelDeploymentConfig.model_validate(
        {"model_id": "tiny-dsv2", "source": {"path": str(path)}, "tensor_parallel_size": 2}
    )
    facts = model_facts(model)
    # attention ops see 4 heads of 16 + 8 (K) and 16 (V); the cache holds 32 + 8 per layer
    assert (facts.num_kv_heads, facts.k_head_dim, facts.v_head_dim) == (4, 24, 16)
    assert (facts.kv_lora_rank, facts.qk_rope_head_dim) == (32, 8)
    spec = facts.kv_spec(torch.bfloat16, 2)
    assert spec.latent and spec.bytes_per_token() == 2 * (32 + 8) * 2


def test_a_copy_that_cannot_fit_fails_with_the_reason(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = _prod_doc()
    doc["applications"][0]["args"]["models"][0]["device_memory_bytes"] = 16 * GiB
    assert run_command(plan_cmd, ["plan", str(_write(doc, tmp_path / "small.yaml"))]) == 1
    out = capsys.readouterr().out
    assert "CANNOT FIT qwen2.5-7b-instruct: weights 14.19 GiB per rank" in out
    assert "raise tensor_parallel_size" in out
    assert "CANNOT FIT deepseek" not in out


def test_a_context_too_long_for_the_kv_budget_fails(tmp_path: Path) -> None:
    doc = _prod_doc()
    phi = doc["applications"][0]["args"]["models"][2]
    phi["engine"]["max_model_len"] = 200_000
    config = load_app_config(_write(doc, tmp_path / "long.yaml"))
    model = pick_model(config, "phi-3-mini-4k-instruct")
    plan = plan_deployment(model, model_facts(model))
    assert not plan.fits and "lower engine.max_model_len" in plan.problems[0]


def test_default_card_memory_applies_without_device_memory_bytes(tmp_path: Path) -> None:
    doc = _prod_doc()
    for m in doc["applications"][0]["args"]["models"]:
        m.pop("device_memory_bytes")
    config = load_app_config(_write(doc, tmp_path / "default.yaml"))
    model = config.models[0]
    assert plan_deployment(model, model_facts(model)).memory_source == "default for Ascend 910B"
    assert plan_deployment(model, model_facts(model), "910B4").device_memory == 32 * GiB
    with pytest.raises(ValueError, match="unknown card"):
        plan_deployment(model, model_facts(model), "H100")


def test_shapes_come_from_a_local_checkpoint_config(tmp_path: Path) -> None:
    ckpt = tmp_path / "tiny-llama"
    ckpt.mkdir()
    (ckpt / "config.json").write_text(
        json.dumps(
            {
                "model_type": "llama",
                "architectures": ["LlamaForCausalLM"],
                "hidden_size": 64,
                "num_attention_heads": 8,
                "num_key_value_heads": 2,
                "num_hidden_layers": 3,
                "intermediate_size": 128,
                "vocab_size": 100,
                "max_position_embeddings": 2048,
            }
        )
    )
    save_file({"a": torch.zeros(10, 20), "b": torch.zeros(7)}, str(ckpt / "model.safetensors"))
    model = ModelDeploymentConfig.model_validate(
        {"model_id": "tiny", "source": {"path": str(ckpt)}}
    )
    facts = model_facts(model)
    assert facts.num_parameters == 207 and facts.max_model_len == 2048
    assert (facts.num_layers, facts.num_kv_heads, facts.k_head_dim) == (3, 2, 8)
    assert "checkpoint config" in facts.shape_source and facts.hf_config is not None


def test_a_remote_checkpoint_without_shape_cannot_be_planned() -> None:
    model = ModelDeploymentConfig.model_validate({"model_id": "x", "source": {"path": "/nope"}})
    with pytest.raises(ValueError, match="no `shape` section"):
        model_facts(model)


def test_plan_rejects_unreadable_and_invalid_configs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_command(plan_cmd, ["plan", str(tmp_path / "missing.yaml")]) == 2
    bad = _write(
        {"applications": [{"name": "x", "import_path": "elsewhere:app"}]}, tmp_path / "b.yaml"
    )
    assert run_command(plan_cmd, ["plan", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "cannot read" in err and "no application with import_path" in err


# DeepSeek-V4-Flash in bfloat16 (fact sheet shared/research/deepseek-v4.md, 7.3): 21 ratio-4 layers
# cache one 512-wide entry and one 128-wide indexer key per 4 tokens, 20 ratio-128 layers one
# 512-wide entry per 128 tokens
V4_FLASH_BYTES_PER_TOKEN = 21 * (512 + 128) * 2 / 4 + 20 * 512 * 2 / 128
# per token of the sliding window, every rank: 43 layers' 512-wide K=V, the ratio-4 compressors'
# kv and gate projections (2 x 512 each, windows overlap), the indexer's (2 x 128 each), the
# ratio-128 compressors' (512 each)
V4_FLASH_SLIDING_BYTES_PER_TOKEN = (43 * 512 + 21 * 2 * 1024 + 21 * 2 * 256 + 20 * 2 * 512) * 2


def _v4_plan():  # type: ignore[no-untyped-def]
    model = pick_model(load_app_config(PROD), "deepseek-v4-flash")
    return model, plan_deployment(model, model_facts(model))


def test_prod_names_v4_flash_w8a8_on_one_node_from_its_stored_config() -> None:
    model, plan = _v4_plan()
    assert hub_checkpoint(model.source.path or "").repo == "Eco-Tech/DeepSeek-V4-Flash-w8a8-mtp"
    assert (model.family, model.tensor_parallel_size, model.expert_parallel) == (
        "deepseek_v4",
        8,
        True,
    )
    assert (model.engine.block_size, model.engine.max_model_len) == (128, 1 << 20)
    assert "stored config of Eco-Tech/DeepSeek-V4-Flash-w8a8-mtp" in plan.shape_source
    config = model_facts(model).hf_config
    assert config is not None and config.model_type == "deepseek_v4"
    # the fact sheet's section 2
    layer_types = list(config.layer_types)
    assert (len(layer_types), layer_types[:2]) == (43, ["sliding_attention"] * 2)
    assert layer_types.count("compressed_sparse_attention") == 21
    assert layer_types.count("heavily_compressed_attention") == 20
    assert layer_types[-1] == "compressed_sparse_attention"
    assert dict(config.compress_rates) == {
        "compressed_sparse_attention": 4,
        "heavily_compressed_attention": 128,
    }
    assert (config.head_dim, config.index_head_dim, config.sliding_window) == (512, 128, 128)
    assert (config.hidden_size, config.vocab_size, config.max_position_embeddings) == (
        4096,
        129280,
        1048576,
    )
    assert (config.n_routed_experts, config.num_experts_per_tok) == (256, 6)
    assert (config.moe_intermediate_size, config.q_lora_rank) == (2048, 1024)
    assert (config.o_groups, config.o_lora_rank, config.index_n_heads) == (8, 1024, 64)
    assert (config.index_topk, config.hc_mult, config.num_nextn_predict_layers) == (512, 4, 1)
    assert config.mlp_layer_types[:4] == ["hash_moe"] * 3 + ["moe"]


def test_v4_flash_weights_are_w8a8_and_sharded_as_the_engine_shards() -> None:
    _, plan = _v4_plan()
    facts = model_facts(pick_model(load_app_config(PROD), "deepseek-v4-flash"))
    weights = facts.weights
    assert weights is not None and weights.total == plan.weights_total
    # 284B parameters (the MTP layer is not built), nearly all int8, the rest bfloat16
    assert 283e9 < weights.num_parameters < 286e9 and weights.int8_parameters > 0.99 * 283e9
    # the rest in bfloat16, or float32 where transformers keeps it so (hyper-connection mixers,
    # norms, sinks), plus buffers (the hash layers' token-to-expert tables)
    float_params = weights.num_parameters - weights.int8_parameters
    assert weights.int8_parameters + 2 * float_params <= plan.weights_total
    assert plan.weights_total < weights.int8_parameters + 4 * float_params + (64 << 20)
    # embeddings, LM head, compressors, indexers and the K=V head are on every rank
    assert plan.weights_total / 8 < plan.weights_per_rank < plan.weights_total / 7


def test_v4_flash_kv_per_token_and_sequences_follow_the_hybrid_geometry() -> None:
    model, plan = _v4_plan()
    assert plan.kv_bytes_per_token == V4_FLASH_BYTES_PER_TOKEN == 6880
    assert plan.kv_bytes_per_block == 6880 * 128
    assert plan.sliding_bytes_per_block == V4_FLASH_SLIDING_BYTES_PER_TOKEN * 128
    # sliding pool: twice 32 sequences x 2 blocks (span 127 tokens + the next token's block),
    # plus a step's 8192 / 128 new blocks, plus one per sequence (HybridKVSpec.sliding_blocks_for)
    assert (plan.sliding_blocks_per_seq, plan.sliding_blocks) == (2, 2 * 32 * 2 + 64 + 32)
    pool = plan.sliding_blocks * plan.sliding_bytes_per_block
    budget = int(64 * GiB * 0.9) - plan.weights_per_rank - ACTIVATION_RESERVE_BYTES - pool
    blocks = budget // (6880 * 128)
    assert (plan.kv_budget, plan.num_blocks) == (budget, blocks)
    for tokens, full_blocks in ((128 * 1024, 1024), (1 << 20, 8192)):
        expected = min(blocks // full_blocks, plan.sliding_blocks // 2)
        assert plan.blocks_for(tokens) == full_blocks and plan.seqs_at(tokens) == expected >= 1
    assert plan.max_seqs_full_context == plan.seqs_at(1 << 20) and plan.fits
    need = plan.weights_per_rank + ACTIVATION_RESERVE_BYTES + pool + 8192 * 6880 * 128
    assert plan.min_free_per_rank() == need


def test_v4_flash_plan_gets_the_blocks_the_engine_would_allot() -> None:
    from engine.kv_budget import MemoryProfile, num_kv_blocks

    model, plan = _v4_plan()
    spec = model_facts(model).kv_spec(torch.bfloat16, 8, model.engine)
    assert spec.hybrid and spec.sliding_blocks == plan.sliding_blocks
    # the engine's start-up budget, with the planner's reserve as the measured peak
    profile = MemoryProfile(64 * GiB, plan.weights_per_rank, ACTIVATION_RESERVE_BYTES)
    assert num_kv_blocks(model.engine, spec, 1 << 20, profile) == plan.num_blocks


def test_prod_plan_prints_v4_flash_kv_and_sequences_at_128k_and_1m(
    capsys: pytest.CaptureFixture[str],
) -> None:
    _, plan = _v4_plan()
    assert run_command(plan_cmd, ["plan", str(PROD)]) == 0
    lines = capsys.readouterr().out.splitlines()
    header = [c.strip() for c in lines[0].split("|")]

    def cells(prefix: str) -> dict[str, str]:
        row = next(x for x in lines if x.startswith(prefix))
        return dict(zip(header, (c.strip() for c in row.split("|"))))

    v4 = cells("deepseek-v4-flash ")
    assert v4["KV/TOKEN/RANK"] == "6.7 KiB (6,880 B)"
    assert v4["SEQS @ 128K"] == str(plan.seqs_at(128 * 1024))
    assert v4["SEQS @ 1M"] == str(plan.seqs_at(1 << 20))
    assert v4["KV BLOCKS/RANK"] == f"{plan.num_blocks} x 128 + 224 sliding"
    assert v4["FITS"] == "yes"
    # contexts beyond a deployment's max_model_len are not planned
    assert cells("qwen2.5-7b-instruct ")["SEQS @ 128K"] == "-"
    hybrid = next(x for x in lines if x.startswith("deepseek-v4-flash: KV cache hybrid"))
    assert "sliding-window pool 224 blocks" in hybrid and "1M: 8192 + 2 blocks" in hybrid
    budget = next(x for x in lines if x.startswith("deepseek-v4-flash: shapes from"))
    assert " - sliding-window pool " in budget


@pytest.mark.parametrize(
    ("path", "known"),
    [
        ("/models/DeepSeek-V4-Flash-w8a8-mtp", True),
        ("/models/deepseek-v4-flash-w8a8-mtp/", True),
        ("Eco-Tech/DeepSeek-V4-Flash-w8a8-mtp", True),
        ("/models/DeepSeek-V4-Flash", False),
        ("/models/DeepSeek-V2-Lite-Chat", False),
    ],
)
def test_stored_hub_configs_match_by_hub_id_or_directory_name(path: str, known: bool) -> None:
    assert (hub_checkpoint(path) is not None) is known


def test_a_v4_block_size_that_splits_a_compression_window_cannot_be_planned(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = _prod_doc()
    doc["applications"][0]["args"]["models"][3]["engine"]["block_size"] = 64
    assert run_command(plan_cmd, ["plan", str(_write(doc, tmp_path / "bs64.yaml"))]) == 2
    out, err = capsys.readouterr()
    assert "deepseek-v4-flash: block_size 64 is not a multiple of DeepSeek-V4's compress " in err
    assert "qwen2.5-32b-instruct" in out and "2 x 2" in out  # the others are still planned
