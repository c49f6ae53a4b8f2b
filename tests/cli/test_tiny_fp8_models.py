"""`ascend-router make-tiny-models` writes the FP8 families: DeepSeek's official FP8 layouts
(`fixtures.fp8_checkpoints`) with the family's real tokenizer, detected from `config.json`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from safetensors import safe_open

from cli import tiny_models_cmd
from cli.main import main
from engine.quantization.fp8_config import checkpoint_quantization
from fixtures.fp8_checkpoints import FP8_FAMILIES


def test_fp8_families_equal_the_fixture_s() -> None:
    assert tiny_models_cmd.FP8_FAMILIES == FP8_FAMILIES


def test_cli_writes_the_fp8_families(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    families = "deepseek_v3_fp8,deepseek_v4_fp8"
    assert main(["make-tiny-models", "--out", str(tmp_path), "--families", families]) == 0
    printed = capsys.readouterr().out
    for family, expert_dtype in (("deepseek_v3_fp8", "fp8"), ("deepseek_v4_fp8", "fp4")):
        path = tmp_path / family
        assert f"{path}: " in printed
        config = json.loads((path / "config.json").read_text())
        fmt = checkpoint_quantization(config, path / "config.json")
        assert fmt is not None and fmt.expert_dtype == expert_dtype
        assert (path / "tokenizer.json").is_file()
        dtypes = set()
        for shard in path.glob("*.safetensors"):
            with safe_open(str(shard), framework="pt") as f:
                dtypes |= {f.get_slice(n).get_dtype() for n in f.keys()}
        assert "F8_E4M3" in dtypes
