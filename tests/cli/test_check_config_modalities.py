"""`ascend-router check-config` holds each model's `input_modalities` to its checkpoint, as the
replica does at start-up, so a config that would fail a deployment fails the check first."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

SHIPPED = Path(__file__).resolve().parents[2] / "configs" / "multimodal.yaml"


def check(config: dict, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "serve.yaml"
    path.write_text(yaml.safe_dump(config))
    cmd = [sys.executable, "-m", "cli.main", "check-config", str(path)]
    return subprocess.run(cmd, capture_output=True, text=True, check=False)


@pytest.fixture
def config(tmp_path: Path) -> dict:
    """configs/multimodal.yaml with its tiny checkpoints as bare config.json files."""
    doc = yaml.safe_load(SHIPPED.read_text())
    for m in doc["applications"][0]["args"]["models"]:
        if m["source"].get("path"):
            ckpt = tmp_path / Path(m["source"]["path"]).name
            ckpt.mkdir()
            (ckpt / "config.json").write_text(json.dumps({"model_type": ckpt.name}))
            m["source"]["path"] = str(ckpt)
    return doc


def models(doc: dict) -> dict[str, dict]:
    return {m["model_id"]: m for m in doc["applications"][0]["args"]["models"]}


def test_the_shipped_config_passes(config: dict, tmp_path: Path) -> None:
    done = check(config, tmp_path)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize(
    ("model", "declared", "takes"),
    [
        ("smollm2-small", ["text", "image"], "['text']"),  # a GGUF text model
        ("tiny-qwen2-5-vl", ["text"], "['image', 'text']"),
        ("tiny-qwen2-audio", ["text", "image"], "['audio', 'text']"),
    ],
)
def test_a_mismatch_fails_the_check_naming_the_fix(
    config: dict, tmp_path: Path, model: str, declared: list[str], takes: str
) -> None:
    models(config)[model]["input_modalities"] = declared
    if model != "smollm2-small":  # keep the policy's own checks (targets per modality) happy
        config["applications"][0]["args"]["policy"]["rules"] = []
    done = check(config, tmp_path)
    assert done.returncode == 1
    assert f"model {model!r}" in done.stderr and f"set input_modalities: {takes}" in done.stderr
