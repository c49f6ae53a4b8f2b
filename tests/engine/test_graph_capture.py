"""Decode graphs compile in the background (`engine.graph_capture`) while the engine serves.

A graph-mode engine answers before its graphs are compiled; its greedy tokens equal an eager
engine's (up to near-ties of transformers' own logits, top-2 gap < 1e-4, the tolerance of
`test_decode_graphs.py`) whichever of its steps ran eager and which replayed a graph; every size
is put in use once compiled, each switch logged; a size that fails to compile in the background
is logged and stays eager while the others are put in use (before serving, it fails start-up).
"""

from __future__ import annotations

import logging
import random
import shutil
import time
from pathlib import Path
from typing import Any

import pytest
import torch
from engine_helpers import assert_same_until_tie, greedy, run_to_completion
from transformers import AutoModelForCausalLM

from configs.engine_config import EngineConfig
from engine.decode_graphs import DecodeGraphSpec
from engine.graph_capture import DecodeGraphCapture, wait_for_decode_graphs
from engine.llm_engine import LLMEngine
from fixtures.tiny_checkpoints import SMALL_VOCAB, make_tiny_checkpoint
from npu_ops.graph_mode import CPP_COMPILERS

pytestmark = pytest.mark.skipif(
    not any(shutil.which(c) for c in CPP_COMPILERS), reason="no C++ compiler for torch.compile"
)
SIZES = [1, 4, 16]


def _config(**kw: Any) -> EngineConfig:
    return EngineConfig(
        dtype="float32", num_kv_blocks=160, block_size=8, max_model_len=128,
        enable_prefix_caching=False, **kw,
    )  # fmt: skip


def _generate(engine: LLMEngine, prompts: list[list[int]]) -> dict[str, list[int]]:
    for i, p in enumerate(prompts):
        engine.add_request(str(i), p, greedy(12, ignore_eos=True))
    return run_to_completion(engine)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_checkpoint("llama", tmp_path_factory.mktemp("llama"), real_vocab=False)


def test_engine_answers_before_its_graphs_compile_then_switches_size_by_size(
    checkpoint: Path, caplog: pytest.LogCaptureFixture
) -> None:
    rng = random.Random(3)
    prompts = [[rng.randrange(3, SMALL_VOCAB) for _ in range(rng.randrange(3, 20))] for _ in "abc"]
    hf = AutoModelForCausalLM.from_pretrained(
        checkpoint, dtype=torch.float32, attn_implementation="sdpa"
    ).eval()
    eager = LLMEngine(str(checkpoint), _config())
    want = _generate(eager, prompts)
    eager.shutdown()
    torch._dynamo.reset()
    caplog.set_level(logging.INFO, logger="engine.graph_capture")
    engine = LLMEngine(str(checkpoint), _config(enforce_eager=False, graph_batch_sizes=SIZES))
    try:
        first = _generate(engine, prompts)  # while the graphs compile
        in_use_at_answer = engine.executor.decode_graphs_in_use()
        assert in_use_at_answer != frozenset(SIZES), "answered only once every graph was in use"
        assert wait_for_decode_graphs(engine.executor, SIZES, 600)
        assert engine.stats().decode_graphs_in_use == len(SIZES)  # the metric's source
        then = _generate(engine, prompts)  # 3 sequences: the graph of 4 rows, then 1
        for i, p in enumerate(prompts):
            assert_same_until_tie(first[str(i)], want[str(i)], p, hf)
            assert_same_until_tie(then[str(i)], want[str(i)], p, hf)
        _wait_for_log(caplog, "3 of 3 decode graphs in use after")
        switches = [r.getMessage() for r in caplog.records if " rows in use after " in r.message]
        assert [m.split()[3] for m in switches] == [str(s) for s in SIZES]
    finally:
        engine.shutdown()


def _wait_for_log(caplog: pytest.LogCaptureFixture, text: str, timeout_s: float = 60.0) -> None:
    """Block until a record containing `text` was logged (by the capture thread)."""
    deadline = time.monotonic() + timeout_s
    while not any(text in r.getMessage() for r in caplog.records):
        assert time.monotonic() < deadline, f"no log record {text!r} after {timeout_s} s"
        time.sleep(0.05)


def test_a_size_that_fails_to_compile_in_the_background_stays_eager(
    checkpoint: Path, caplog: pytest.LogCaptureFixture
) -> None:
    torch._dynamo.reset()
    engine = LLMEngine(str(checkpoint), _config(enforce_eager=False, graph_batch_sizes=[1]))
    try:
        assert wait_for_decode_graphs(engine.executor, [1], 600)
        # size 2 is no graph of this runner: its capture raises, size 1 is compiled already
        capture = DecodeGraphCapture(engine.executor, DecodeGraphSpec((1, 2), 16), lambda n: None)
        with caplog.at_level(logging.INFO, logger="engine.graph_capture"):
            capture.start()
            assert capture.wait(600)
        failed = [r for r in caplog.records if r.levelno == logging.ERROR]
        assert len(failed) == 1 and "decode graph of 2 rows failed" in failed[0].getMessage()
        assert "no decode graph of size 2" in str(failed[0].exc_info[1])
        assert engine.executor.decode_graphs_in_use() == frozenset({1})
        # before serving (tensor-parallel ranks capture so), a failure fails start-up
        before = DecodeGraphCapture(engine.executor, DecodeGraphSpec((2,), 16), lambda n: None)
        with pytest.raises(ValueError, match="no decode graph of size 2"):
            before.run()
    finally:
        engine.shutdown()
