"""A checkpoint whose `model_type` the engine does not serve is refused at start-up, before any
weight loads, with a `ValueError` naming the type, the reason and the supported ones."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from cli_helpers import run_command
from gguf import GGUFWriter
from transformers import DeepseekV4Config, DeepseekV32Config
from transformers.models.auto.configuration_auto import CONFIG_MAPPING
from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

import engine.engine_builder
from cli import plan_cmd
from configs.engine_config import EngineConfig
from engine.architectures import REFUSED_MODEL_TYPES, SUPPORTED_MODEL_TYPES
from engine.checkpoint_ref import CheckpointRef
from engine.llm_engine import LLMEngine
from engine.model_loader import load_config
from engine.multimodal.families import FAMILIES
from fixtures.tiny_checkpoints import FAMILY_CONFIGS, make_tiny_checkpoint
from fixtures.tiny_multimodal import MULTIMODAL_FAMILIES

PROD = Path(__file__).resolve().parents[2] / "configs" / "prod.yaml"
SUPPORTED_LIST = "Supported: " + ", ".join(sorted(SUPPORTED_MODEL_TYPES))
ENGINE_CONFIG = EngineConfig(dtype="float32", max_model_len=64, num_kv_blocks=8)

# DeepSeek-V4 at tiny sizes, the body of a DeepSeek-V4.1 config.json (transformers has no V4.1)
_V4_TINY: dict[str, Any] = {
    "vocab_size": 512,
    "hidden_size": 32,
    "moe_intermediate_size": 32,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 1,
    "head_dim": 16,
    "q_lora_rank": 16,
    "n_routed_experts": 4,
    "num_experts_per_tok": 2,
    "o_groups": 2,
    "o_lora_rank": 16,
    "index_n_heads": 2,
    "index_head_dim": 16,
    "index_topk": 4,
    "sliding_window": 8,
    "hc_mult": 2,
    "hc_sinkhorn_iters": 2,
    "num_nextn_predict_layers": 0,
    "max_position_embeddings": 256,
}


@pytest.fixture
def no_weight_loading(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail the test if the engine gets as far as loading weights."""

    def load_model(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("weights loaded before the architecture was refused")

    monkeypatch.setattr(engine.engine_builder, "load_model", load_model)


def _refusal(path: Path) -> str:
    with pytest.raises(ValueError) as info:
        LLMEngine(str(path), ENGINE_CONFIG)
    text = str(info.value)
    assert "\n" not in text, text
    assert SUPPORTED_LIST in text, text
    return text


def _v41_config(path: Path) -> None:
    # no transformers class; a V4 config.json with the newer type is what such a checkpoint has
    DeepseekV4Config(**_V4_TINY).save_pretrained(path)
    config = json.loads((path / "config.json").read_text())
    config.update(model_type="deepseek_v41", architectures=["DeepseekV41ForCausalLM"])
    (path / "config.json").write_text(json.dumps(config))


@pytest.mark.parametrize(
    ("model_type", "write", "named", "reason"),
    [
        (
            "deepseek_v32",
            lambda p: DeepseekV32Config(num_hidden_layers=2).save_pretrained(p),
            "model_type 'deepseek_v32' (DeepseekV32ForCausalLM)",
            "lightning indexer",
        ),
        (
            "deepseek_v41",
            _v41_config,
            "model_type 'deepseek_v41' (DeepseekV41ForCausalLM)",
            "no model class for it",
        ),
    ],
)
def test_a_config_of_a_refused_type_is_refused_from_config_json_alone(
    model_type: str,
    write: Any,
    named: str,
    reason: str,
    tmp_path: Path,
    no_weight_loading: None,
) -> None:
    write(tmp_path / model_type)
    text = _refusal(tmp_path / model_type)
    assert f"{named} is not supported by this engine" in text and reason in text, text


def test_a_gguf_of_an_unserved_architecture_is_refused(
    tmp_path: Path, no_weight_loading: None
) -> None:
    # GGUF's `general.architecture` qwen2moe is transformers' qwen2_moe: not one we check
    path = tmp_path / "tiny-qwen2moe.gguf"
    writer = GGUFWriter(str(path), "qwen2moe")
    writer.add_vocab_size(8)
    writer.add_context_length(64)
    writer.add_embedding_length(16)
    writer.add_block_count(1)
    writer.add_feed_forward_length(32)
    writer.add_head_count(4)
    writer.add_head_count_kv(2)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_expert_count(4)
    writer.add_expert_used_count(2)
    writer.add_tensor("token_embd.weight", np.zeros((8, 16), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    text = _refusal(path)
    assert text.startswith(f"{path}: model_type 'qwen2_moe' (Qwen2MoeForCausalLM)"), text
    assert "unverified" in text


def test_every_supported_type_is_a_transformers_causal_lm_with_a_tested_tiny_checkpoint() -> None:
    for model_type in SUPPORTED_MODEL_TYPES:
        assert model_type in CONFIG_MAPPING, model_type
        assert model_type in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES or model_type in FAMILIES, model_type
    # tests/engine/test_families.py runs each text family against transformers' generate,
    # tests/engine/test_multimodal_engine.py each image or audio family
    assert set(SUPPORTED_MODEL_TYPES) == set(FAMILY_CONFIGS) | set(MULTIMODAL_FAMILIES)
    assert set(MULTIMODAL_FAMILIES) == set(FAMILIES)
    assert not set(SUPPORTED_MODEL_TYPES) & set(REFUSED_MODEL_TYPES)


def test_supported_checkpoints_still_start(tmp_path: Path, smollm2_path: str) -> None:
    # SmolLM2's GGUF (general.architecture llama) passes the check: its config only, since
    # conftest's make_engine tests load its weights already
    assert load_config(CheckpointRef.from_path(smollm2_path)).model_type == "llama"
    path = make_tiny_checkpoint("deepseek_v3", tmp_path / "v3", real_vocab=False)
    LLMEngine(str(path), ENGINE_CONFIG).shutdown()  # DeepSeek MLA + MoE still starts


def test_plan_says_the_same_for_a_local_refused_checkpoint(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    DeepseekV32Config(num_hidden_layers=2).save_pretrained(tmp_path / "v32")
    doc = yaml.safe_load(PROD.read_text())
    # models[1] is deepseek-v2-lite-chat; its checkpoint becomes a local V3.2 one
    doc["applications"][0]["args"]["models"][1]["source"] = {"path": str(tmp_path / "v32")}
    config = tmp_path / "v32.yaml"
    config.write_text(yaml.safe_dump(doc))
    assert run_command(plan_cmd, ["plan", str(config)]) == 2
    err = capsys.readouterr().err
    assert "model_type 'deepseek_v32' (DeepseekV32ForCausalLM) is not supported" in err, err
    assert "lightning indexer" in err, err
    assert SUPPORTED_LIST in err, err
