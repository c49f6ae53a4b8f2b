"""Graph mode (`enforce_eager=False`): the compiled decoder picks the eager decoder's tokens.

Compiling even a tiny model with `torch.compile` takes tens of seconds on a loaded 2-core host,
so this is one short test (one prefill and one batched-decode graph); it is skipped where no C++
compiler exists for inductor.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from engine_helpers import greedy, run_to_completion

from configs.engine_config import EngineConfig
from engine.llm_engine import LLMEngine
from engine.model_runner import ModelRunner
from engine.tiny_checkpoints import make_tiny_checkpoint
from npu_ops.graph_mode import CPP_COMPILERS

PROMPTS = [[1, 5, 9, 200, 33, 17], [1, 400, 401, 402], [1, 77, 3, 3, 90, 12, 300, 8]]


def generate(engine: LLMEngine, tag: str) -> list[list[int]]:
    for i, prompt in enumerate(PROMPTS):
        engine.add_request(f"{tag}{i}", prompt, greedy(6, ignore_eos=True))
    out = run_to_completion(engine)
    return [out[f"{tag}{i}"] for i in range(len(PROMPTS))]


@pytest.mark.skipif(
    not any(shutil.which(c) for c in CPP_COMPILERS), reason="no C++ compiler for torch.compile"
)
def test_compiled_decoder_generates_the_eager_tokens(tmp_path: Path) -> None:
    src = make_tiny_checkpoint("qwen2", tmp_path, real_vocab=False, seed=0)
    config = EngineConfig(dtype="float32", num_kv_blocks=64, block_size=8, max_model_len=256)
    engine = LLMEngine(str(src), config)
    want = generate(engine, "eager")
    shard = engine.executor
    eager = shard.runner  # type: ignore[attr-defined]
    # what allocate_kv builds once EngineConfig.enforce_eager reaches it
    shard.runner = ModelRunner(  # type: ignore[attr-defined]
        eager.model, eager.kv_caches, eager.block_size, eager.device, enforce_eager=False
    )
    assert generate(engine, "compiled") == want
