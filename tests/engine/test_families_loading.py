"""A broken checkpoint fails at engine start with a one-line `ValueError` naming what is wrong."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from configs.engine_config import EngineConfig
from engine.llm_engine import LLMEngine
from fixtures.tiny_checkpoints import make_tiny_checkpoint


def _edit_config(path: Path, **fields: object) -> None:
    config = json.loads((path / "config.json").read_text())
    config.update(fields)
    (path / "config.json").write_text(json.dumps(config))


def _drop_last_shard(path: Path) -> None:
    shards = sorted(path.glob("model-*.safetensors"))
    assert len(shards) >= 2, "the factory writes a sharded checkpoint"
    shards[-1].unlink()


BREAKAGES: dict[str, tuple[Callable[[Path], None], str]] = {
    "missing-shard": (_drop_last_shard, r"model-(\d{5})-of-\1\.safetensors: shard listed in"),
    "unknown-model-type": (
        lambda p: _edit_config(p, model_type="qwen99", architectures=["Qwen99ForCausalLM"]),
        r"config\.json: model_type 'qwen99' is not an architecture",
    ),
    "wrong-architectures": (
        lambda p: _edit_config(p, architectures=["LlamaForCausalLM"]),
        r"config\.json: architectures \['LlamaForCausalLM'\] do not match model_type 'qwen2'",
    ),
    "shape-mismatch": (
        lambda p: _edit_config(p, intermediate_size=96),
        r"\.safetensors: tensor model\.layers\.0\.mlp\.\w+_proj\.weight has shape "
        + r"\[\d+, \d+\] but config\.json implies",
    ),
}


@pytest.mark.parametrize("breakage", sorted(BREAKAGES))
def test_broken_checkpoint_is_a_one_line_value_error(breakage: str, tmp_path: Path) -> None:
    path = make_tiny_checkpoint("qwen2", tmp_path / "ckpt", real_vocab=False)
    config = EngineConfig(dtype="float32", max_model_len=64, num_kv_blocks=8)
    LLMEngine(str(path), config).shutdown()  # intact, it loads
    breaker, message = BREAKAGES[breakage]
    breaker(path)
    with pytest.raises(ValueError) as info:
        LLMEngine(str(path), config)
    text = str(info.value)
    assert "\n" not in text, text
    assert re.search(message, text), text
    assert str(path) in text, "the message names the checkpoint's file"
