"""Graph mode (`enforce_eager: false`): decode steps replay graphs captured per batch size.

One tiny 2-layer Llama-family checkpoint in float32, graphs of 1, 4 and 16 rows (compiled once
for the module, in the background after engine start-up; the tests wait for them). Greedy tokens
must equal those of an eager engine on the same checkpoint, up to near-ties of transformers' own
logits (top-2 gap < 1e-4), for decode batches of 1, 3 (padded to 4) and 16, and when a running
batch moves between sizes. Once compiled nothing may recompile, the graphs hold no graph break,
and every block is freed.
"""

from __future__ import annotations

import random
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from engine_helpers import (
    assert_same_until_tie,
    greedy,
    run_to_completion,
    step,
)
from transformers import AutoModelForCausalLM

from configs.engine_config import EngineConfig
from engine.decode_graphs import DecodeGraphSpec, pad_decode_step
from engine.graph_capture import wait_for_decode_graphs
from engine.llm_engine import LLMEngine
from engine.step_input import StepInput
from fixtures.tiny_checkpoints import SMALL_VOCAB, make_tiny_checkpoint
from npu_ops.graph_mode import CPP_COMPILERS

SIZES = [1, 4, 16]
needs_compiler = pytest.mark.skipif(
    not any(shutil.which(c) for c in CPP_COMPILERS), reason="no C++ compiler for torch.compile"
)


def _config(**kw: Any) -> EngineConfig:
    return EngineConfig(
        dtype="float32", num_kv_blocks=160, block_size=8, max_model_len=128,
        enable_prefix_caching=False, **kw,
    )  # fmt: skip


class Engines:
    """An eager and a graph-mode engine on one checkpoint, and transformers' model of it."""

    def __init__(self, path: Path) -> None:
        self.eager = LLMEngine(str(path), _config())
        torch._dynamo.reset()
        torch._dynamo.utils.counters.clear()
        self.graph = LLMEngine(str(path), _config(enforce_eager=False, graph_batch_sizes=SIZES))
        assert wait_for_decode_graphs(self.graph.executor, SIZES, 600)  # compiled in background
        self.graph_breaks = sum(torch._dynamo.utils.counters["graph_break"].values())
        self.hf = AutoModelForCausalLM.from_pretrained(
            path, dtype=torch.float32, attn_implementation="sdpa"
        ).eval()
        runner = self.graph.executor.runner  # type: ignore[attr-defined]
        self.replays: list[int] = []
        compiled = runner.graph_decoder

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.replays.append(kwargs["input_ids"].shape[1])
            return compiled(*args, **kwargs)

        runner.graph_decoder = counted


@pytest.fixture(scope="module")
def engines(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engines]:
    path = make_tiny_checkpoint("llama", tmp_path_factory.mktemp("llama"), real_vocab=False)
    torch._dynamo.config.error_on_recompile = False
    pair = Engines(path)
    torch._dynamo.config.error_on_recompile = True  # every later compile is a test failure
    yield pair
    torch._dynamo.config.error_on_recompile = False
    pair.eager.shutdown()
    pair.graph.shutdown()


def _prompts(n: int, seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(3, SMALL_VOCAB) for _ in range(rng.randrange(3, 20))] for _ in range(n)]


def _generate(
    engine: LLMEngine,
    prompts: list[list[int]],
    max_tokens: Callable[[int], int],
    join_after: int = 0,
) -> dict[str, list[int]]:
    """Greedy tokens per request; with `join_after`, requests past the first join one by one,
    each after `join_after` more steps (the running batch grows across graph sizes)."""
    out: dict[str, list[int]] = {}
    for i, p in enumerate(prompts):
        engine.add_request(str(i), p, greedy(max_tokens(i), ignore_eos=True))
        for _ in range(join_after):
            step(engine, out)
    run_to_completion(engine, out)
    assert engine.block_manager.num_free_blocks == engine.block_manager.num_blocks
    return out


def _assert_same(engines: Engines, prompts: list[list[int]], **kw: Any) -> None:
    want = _generate(engines.eager, prompts, **kw)
    got = _generate(engines.graph, prompts, **kw)
    for i, p in enumerate(prompts):
        assert_same_until_tie(got[str(i)], want[str(i)], p, engines.hf)


@needs_compiler
@pytest.mark.parametrize("batch", [1, 3, 16])
def test_graph_decode_equals_eager(engines: Engines, batch: int) -> None:
    engines.replays.clear()
    _assert_same(engines, _prompts(batch, seed=batch), max_tokens=lambda i: 12)
    bucket = next(s for s in SIZES if s >= batch)
    assert engines.replays and set(engines.replays) == {bucket}


@needs_compiler
def test_batch_moves_between_graph_sizes_mid_generation(engines: Engines) -> None:
    engines.replays.clear()
    # 16 requests finishing one after another: the batch shrinks through sizes 16, 4 and 1
    _assert_same(engines, _prompts(16, seed=7), max_tokens=lambda i: 2 + 2 * i)
    assert {16, 4, 1} <= set(engines.replays)
    engines.replays.clear()
    # requests joining a running batch one by one: it grows through sizes 1, 4 and 16
    _assert_same(engines, _prompts(6, seed=8), max_tokens=lambda i: 30, join_after=3)
    assert {1, 4, 16} <= set(engines.replays)


@needs_compiler
def test_graphs_hold_no_graph_break(engines: Engines) -> None:
    assert engines.graph_breaks == 0


def test_padding_rows_use_the_padding_block_and_produce_no_logits() -> None:
    step_in = StepInput([5, 6], [9, 3], [1, 1], [[2, 7], [4]], [0, 1], [4, 2])
    padded = pad_decode_step(step_in, 4, pad_block=99)
    assert padded.token_ids == [5, 6, 0, 0]
    assert padded.block_tables == [[2, 7], [4], [99], [99]]
    assert padded.starts == [9, 3, 1, 1] and padded.q_lens == [1] * 4
    assert padded.rows == [0, 1]
    with pytest.raises(ValueError, match="padded to 1"):
        pad_decode_step(step_in, 1, pad_block=99)


def test_only_decode_steps_of_generated_tokens_run_as_graphs() -> None:
    spec = DecodeGraphSpec((1, 4, 16), max_blocks_per_seq=16)
    decode = StepInput([5, 6, 7], [9, 3, 4], [1, 1, 1], [[1], [2], [3]], [0, 1, 2], [4, 2, 3])
    assert spec.bucket(decode) == 4
    prefill = StepInput([5, 6], [0], [2], [[1]], [1], [2])
    assert spec.bucket(prefill) is None
    # the last prompt token of a chunked prefill: one token, but a prompt token
    last_prompt_token = StepInput([5], [3], [1], [[1]], [0], [4])
    assert spec.bucket(last_prompt_token) is None
    big = StepInput([1] * 17, [5] * 17, [1] * 17, [[1]] * 17, list(range(17)), [2] * 17)
    assert spec.bucket(big) is None


def test_graph_settings_are_checked() -> None:
    assert EngineConfig(enforce_eager=False, graph_batch_sizes=[8, 1, 2]).graph_batch_sizes == [
        1,
        2,
        8,
    ]
    with pytest.raises(ValueError, match="distinct positive"):
        EngineConfig(graph_batch_sizes=[4, 4])
    with pytest.raises(ValueError, match="batch_invariant: true exclude each other"):
        EngineConfig(enforce_eager=False, batch_invariant=True)
