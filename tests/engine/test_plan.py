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
from engine.planning.memory_plan import ACTIVATION_RESERVE_BYTES, GiB, plan_deployment
from engine.planning.model_facts import model_facts

PROD = Path(__file__).resolve().parents[2] / "configs" / "prod.yaml"


def _prod_doc() -> dict:
    return yaml.safe_load(PROD.read_text())


def _write(doc: dict, path: Path) -> Path:
    path.write_text(yaml.safe_dump(doc))
    return path


def test_prod_fits(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_command(plan_cmd, ["plan", str(PROD)]) == 0
    out = capsys.readouterr().out
    for model in ("qwen2.5-7b-instruct", "deepseek-v2-lite-chat", "phi-3-mini-4k-instruct"):
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
    from engine.tiny_checkpoints import make_tiny_checkpoint

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
