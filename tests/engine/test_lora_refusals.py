"""Adapters the engine refuses, each with a `ValueError` naming the option (the HTTP side maps
it to a 4xx), at run time and at start-up; the engine keeps serving after a refusal."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from engine_helpers import greedy, run_to_completion
from lora_helpers import lora_engine
from safetensors.torch import load_file, save_file

from engine.llm_engine import LLMEngine
from fixtures.tiny_adapters import TinyLoraSpec, load_base, write_adapter
from fixtures.tiny_checkpoints import make_tiny_checkpoint


def _peft_adapter(base: torch.nn.Module, out: Path, **config: Any) -> Path:
    """An adapter written by peft with arbitrary `LoraConfig` options."""
    from peft import LoraConfig, get_peft_model

    model = get_peft_model(base, LoraConfig(**config))
    model.save_pretrained(str(out))
    model.unload()
    return out


def _edit_tensors(src: Path, out: Path, edit: Callable[[dict[str, torch.Tensor]], None]) -> Path:
    out.mkdir()
    (out / "adapter_config.json").write_text((src / "adapter_config.json").read_text())
    tensors = load_file(str(src / "adapter_model.safetensors"))
    edit(tensors)
    save_file(tensors, str(out / "adapter_model.safetensors"))
    return out


class Bad:
    """A tiny Qwen3, a good adapter, and one adapter per refused kind."""

    def __init__(self, root: Path) -> None:
        self.path = make_tiny_checkpoint("qwen3", root / "qwen3", real_vocab=False)
        base = load_base(str(self.path))
        self.good = write_adapter(base, TinyLoraSpec("good", rank=8, std=0.5), root)
        q = ["q_proj", "v_proj"]
        self.kinds: dict[str, tuple[Path, str]] = {
            "dora": (
                _peft_adapter(base, root / "dora", target_modules=q, use_dora=True),
                "use_dora",
            ),
            "modules_to_save": (
                _peft_adapter(base, root / "mts", target_modules=q, modules_to_save=["lm_head"]),
                "modules_to_save",
            ),
            "embedding": (
                _peft_adapter(base, root / "emb", target_modules=["embed_tokens", "q_proj"]),
                "embeddings or the LM head",
            ),
            "lm_head": (
                _peft_adapter(base, root / "head", target_modules=["lm_head"]),
                "embeddings or the LM head",
            ),
            "added_tokens": (
                _peft_adapter(base, root / "tok", target_modules=q, trainable_token_indices=[3, 4]),
                "trainable_token_indices",
            ),
            "lora_bias": (
                _peft_adapter(base, root / "bias", target_modules=q, bias="lora_only"),
                "`bias`",
            ),
            "rank": (
                _peft_adapter(base, root / "r16", target_modules=q, r=16),
                "above max_lora_rank 8",
            ),
            "rank_pattern": (
                _peft_adapter(
                    base, root / "rp", target_modules=q, r=4, rank_pattern={"v_proj": 32}
                ),
                "above max_lora_rank 8",
            ),
            "resized_embeddings": (
                _edit_tensors(
                    self.good,
                    root / "resized",
                    lambda t: t.update(
                        {"base_model.model.model.embed_tokens.weight": torch.zeros(600, 16)}
                    ),
                ),
                "embed_tokens.weight",
            ),
            "base_shape": (
                _edit_tensors(self.good, root / "shape", _widen_first_lora_a),
                "another base",
            ),
            "missing": (root / "nowhere", "no adapter_config.json"),
            "nan_weights": (
                _edit_tensors(self.good, root / "nan", _first_lora_b_nan),
                "non-finite",
            ),
            "nan_alpha": (_edit_config(self.good, root / "nan-alpha", lora_alpha="NaN"), "finite"),
            "word_rank": (_edit_config(self.good, root / "word-r", r="eight"), "not a number"),
            "fifo": (_fifo_config(self.good, root / "fifo"), "not a regular file"),
        }
        phi3 = make_tiny_checkpoint("phi3", root / "phi3", real_vocab=False)
        other = write_adapter(
            load_base(str(phi3)), TinyLoraSpec("phi3", target_modules=("qkv_proj",)), root
        )
        self.kinds["base_modules"] = (other, "not a linear layer of the loaded base model")


def _first_lora_b_nan(tensors: dict[str, torch.Tensor]) -> None:
    key = next(k for k in sorted(tensors) if k.endswith("lora_B.weight"))
    tensors[key] = torch.full_like(tensors[key], float("nan"))


def _edit_config(src: Path, out: Path, **fields: Any) -> Path:
    """A copy of `src` whose adapter_config.json has `fields` (JSON written by hand: NaN)."""
    out.mkdir()
    (out / "adapter_model.safetensors").write_bytes(
        (src / "adapter_model.safetensors").read_bytes()
    )
    config = json.loads((src / "adapter_config.json").read_text())
    config.update(fields)
    text = json.dumps(config).replace('"NaN"', "NaN")
    (out / "adapter_config.json").write_text(text)
    return out


def _fifo_config(src: Path, out: Path) -> Path:
    """A copy of `src` whose adapter_config.json is a FIFO (reading it would block)."""
    out.mkdir()
    (out / "adapter_model.safetensors").write_bytes(
        (src / "adapter_model.safetensors").read_bytes()
    )
    os.mkfifo(out / "adapter_config.json")
    return out


def _widen_first_lora_a(tensors: dict[str, torch.Tensor]) -> None:
    key = next(k for k in sorted(tensors) if k.endswith("lora_A.weight"))
    tensors[key] = torch.zeros(tensors[key].shape[0], tensors[key].shape[1] * 2)


@pytest.fixture(scope="module")
def bad(tmp_path_factory: pytest.TempPathFactory) -> Bad:
    return Bad(tmp_path_factory.mktemp("lora-refusals"))


@pytest.fixture(scope="module")
def engine(bad: Bad) -> LLMEngine:
    return lora_engine(bad.path, {"good": bad.good}, {"max_lora_rank": 8})


@pytest.mark.parametrize(
    "kind",
    [
        "dora",
        "modules_to_save",
        "embedding",
        "lm_head",
        "added_tokens",
        "lora_bias",
        "rank",
        "rank_pattern",
        "resized_embeddings",
        "base_shape",
        "base_modules",
        "missing",
        "nan_weights",
        "nan_alpha",
        "word_rank",
        "fifo",
    ],
)
def test_runtime_load_refuses_naming_the_option(bad: Bad, engine: LLMEngine, kind: str) -> None:
    path, option = bad.kinds[kind]
    with pytest.raises(ValueError, match="LoRA adapter 'x'") as info:
        engine.load_lora("x", str(path))
    assert option in str(info.value)
    stats = engine.lora_stats()
    assert stats is not None and stats.registered == ("good",)
    engine.add_request(kind, [5, 6, 7, 8], greedy(3, lora="good"))
    assert len(run_to_completion(engine)[kind]) == 3


def test_start_up_refuses_naming_the_option(bad: Bad) -> None:
    path, option = bad.kinds["dora"]
    with pytest.raises(ValueError, match="use_dora"):
        lora_engine(bad.path, {"good": bad.good, "dora": path}, {"max_lora_rank": 8})


def test_bad_names_are_refused(bad: Bad, engine: LLMEngine) -> None:
    with pytest.raises(ValueError, match="not valid"):
        engine.load_lora("a/b", str(bad.good))
