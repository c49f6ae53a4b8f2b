"""The GGUF cache (engine/gguf_cache.py): a converted SmolLM2 GGUF loads the same tensors,
config and tokenizer as the file read directly; replicas starting together convert it once;
failures fall back to the file, with the errors the file gives."""

from __future__ import annotations

import logging
import os
import shutil
import threading
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

import engine.gguf_cache
from configs.engine_config import EngineConfig
from engine.checkpoint_ref import CheckpointRef
from engine.gguf_cache import CACHE_ENV, loadable
from engine.llm_engine import LLMEngine
from engine.model_loader import eos_token_ids, load_config

TEXTS = [
    "Hello world!",
    "  <|im_start|>user\nçé 漢字 \t\n\n def f(x):\n    return x  # 😀</s>",
    "<|im_end|><|endoftext|>",
]
ENGINE_CONFIG = EngineConfig(max_model_len=256, kv_cache_memory_bytes=16 << 20)


@pytest.fixture(scope="module")
def converted(
    smollm2_path: str, tmp_path_factory: pytest.TempPathFactory
) -> tuple[CheckpointRef, list[logging.LogRecord]]:
    """SmolLM2's GGUF converted into a fresh cache by two threads at once (as two replicas
    starting together would), and the cache's log records."""
    root = tmp_path_factory.mktemp("gguf-cache")
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append  # type: ignore[method-assign]
    logging.getLogger("engine.gguf_cache").addHandler(handler)
    logging.getLogger("engine.gguf_cache").setLevel(logging.INFO)
    results: list[CheckpointRef] = []
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(CACHE_ENV, str(root))
        ref = CheckpointRef.from_path(smollm2_path)
        threads = [threading.Thread(target=lambda: results.append(loadable(ref))) for _ in "ab"]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    logging.getLogger("engine.gguf_cache").removeHandler(handler)
    assert len(results) == 2 and results[0] == results[1], results
    return results[0], records


def test_two_loads_at_once_convert_once(
    converted: tuple[CheckpointRef, list[logging.LogRecord]], smollm2_path: str
) -> None:
    ref, records = converted
    assert ref.gguf_file is None and ref.origin == Path(smollm2_path).resolve()
    assert sum("converted" in r.getMessage() for r in records) == 1, records
    assert sorted(p.name for p in ref.directory.iterdir()) == [
        "chat_template.jinja", "config.json", "gguf-cache.json", "model.safetensors",
        "tokenizer.json", "tokenizer_config.json",
    ]  # fmt: skip
    assert all(p.stat().st_mode & 0o777 == 0o644 for p in ref.directory.iterdir())
    assert not list(ref.directory.parent.glob("*.tmp"))


def test_converted_tensors_config_and_tokenizer_equal_the_files(
    converted: tuple[CheckpointRef, list[logging.LogRecord]], smollm2_path: str
) -> None:
    ref, _ = converted
    direct = CheckpointRef.from_path(smollm2_path)
    a = AutoModelForCausalLM.from_pretrained(
        direct.directory, dtype=torch.float32, **direct.kwargs()
    )
    b = AutoModelForCausalLM.from_pretrained(ref.directory, dtype=torch.float32)
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)  # bit for bit, tied head included
    ca, cb = load_config(direct).to_dict(), load_config(ref).to_dict()
    ca.pop("_name_or_path"), cb.pop("_name_or_path")
    assert ca == cb
    assert eos_token_ids(direct, load_config(direct)) == eos_token_ids(ref, load_config(ref))
    ta = AutoTokenizer.from_pretrained(direct.directory, **direct.kwargs())
    tb = AutoTokenizer.from_pretrained(ref.directory)
    assert [ta.encode(t) for t in TEXTS] == [tb.encode(t) for t in TEXTS]
    assert ta.all_special_tokens == tb.all_special_tokens and len(ta) == len(tb)
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]
    assert ta.apply_chat_template(
        messages, tokenize=False, add_generation_prompt=True
    ) == tb.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


def test_off_and_oversized_files_are_read_directly(
    smollm2_path: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ref = CheckpointRef.from_path(smollm2_path)
    monkeypatch.setenv(CACHE_ENV, "off")
    assert loadable(ref) is ref
    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    monkeypatch.setattr(engine.gguf_cache, "MAX_GGUF_BYTES", 1 << 20)
    assert loadable(ref) is ref and not list(tmp_path.iterdir())


def test_unreadable_files_give_the_same_errors_and_leave_nothing(
    smollm2_path: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "cache"
    monkeypatch.setenv(CACHE_ENV, str(cache))
    # a GGUF cut inside its tensor data: the header reads, the tensors do not
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(Path(smollm2_path).read_bytes()[: 60 << 20])
    with pytest.raises(ValueError) as with_cache:
        LLMEngine(str(cut), ENGINE_CONFIG)
    monkeypatch.setenv(CACHE_ENV, "off")
    with pytest.raises(ValueError) as without:
        LLMEngine(str(cut), ENGINE_CONFIG)
    assert str(with_cache.value) == str(without.value) and str(cut) in str(without.value)
    assert not [p for p in cache.iterdir() if not p.name.endswith(".lock")]
    # a file that is no GGUF at all fails at its config, with or without the cache
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"PK\x03\x04 not a gguf")
    monkeypatch.setenv(CACHE_ENV, str(cache))
    with pytest.raises(ValueError, match="junk.gguf"):
        loadable(CheckpointRef.from_path(junk))


def test_a_damaged_copy_is_converted_again_and_a_changed_file_replaces_its_copy(
    smollm2_path: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "cache"
    monkeypatch.setenv(CACHE_ENV, str(cache))
    gguf = tmp_path / "model.gguf"
    shutil.copyfile(smollm2_path, gguf)
    ref = CheckpointRef.from_path(gguf)
    first = loadable(ref).directory
    weights = first / "model.safetensors"
    with weights.open("r+b") as f:  # a truncated copy (a full disk, a crash) is not reused
        f.truncate(weights.stat().st_size // 2)
    assert loadable(ref).directory == first
    b = AutoModelForCausalLM.from_pretrained(first, dtype=torch.float32)  # whole again
    assert b.model.embed_tokens.weight.shape[0] == 49152
    (first / "config.json").unlink()
    assert loadable(ref).directory == first and (first / "config.json").is_file()
    os.utime(gguf)  # a replaced (here: touched) file converts again; its old copy goes
    second = loadable(ref).directory
    assert second != first and not first.exists()
    assert [p.name for p in cache.iterdir() if p.is_dir()] == [second.name]
