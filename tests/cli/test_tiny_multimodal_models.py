"""`ascend-router make-tiny-models` writes the multimodal families: weights, preprocessor, the
family's real tokenizer and the chat template that places its media placeholders."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest
from transformers import AutoConfig, AutoFeatureExtractor, AutoImageProcessor, AutoTokenizer

from cli import tiny_models_cmd
from cli.main import main
from fixtures.tiny_multimodal import MULTIMODAL_FAMILIES

PLACEHOLDERS = {
    "qwen2_5_vl": ("image_url", "<|vision_start|><|image_pad|><|vision_end|>"),
    "qwen2_audio": ("input_audio", "<|audio_bos|><|AUDIO|><|audio_eos|>"),
}


def test_multimodal_families_equal_the_fixture_s() -> None:
    assert tiny_models_cmd.MULTIMODAL_FAMILIES == MULTIMODAL_FAMILIES


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    out = tmp_path_factory.mktemp("tiny")
    families = ",".join(MULTIMODAL_FAMILIES)
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main(["make-tiny-models", "--out", str(out), "--families", families]) == 0
    return out, buf.getvalue()


@pytest.mark.parametrize("family", MULTIMODAL_FAMILIES)
def test_cli_writes_weights_preprocessor_tokenizer_and_template(
    written: tuple[Path, str], family: str
) -> None:
    out, printed = written
    path = out / family
    assert f"{path}: " in printed
    assert AutoConfig.from_pretrained(path).model_type == family
    assert json.loads((path / "model.safetensors.index.json").read_text())["weight_map"]
    preprocessor = json.loads((path / "preprocessor_config.json").read_text())
    if family == "qwen2_5_vl":
        assert type(AutoImageProcessor.from_pretrained(path)).__name__.startswith("Qwen2VL")
        assert preprocessor["patch_size"] == 14 and preprocessor["merge_size"] == 2
    else:
        extractor = AutoFeatureExtractor.from_pretrained(path)
        assert (extractor.sampling_rate, extractor.feature_size) == (16000, 128)
    tokenizer = AutoTokenizer.from_pretrained(path)
    part, placeholder = PLACEHOLDERS[family]
    media = {"type": part, part: {}}  # OpenAI's part shape; the template reads its key
    messages = [{"role": "user", "content": [media, {"type": "text", "text": "hi"}]}]
    prompt = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert placeholder in prompt
    assert not list(out.glob(".*.partial"))
