"""LoRA in the engine beyond numerics: prefix-cache keys, host-memory eviction and its
counters, the `max_loras` cap on a batch, runtime load/unload (also through `AsyncEngine`),
graph mode (tensor parallel: `test_lora_parallel`).

All on a tiny Qwen3 (fp32) with peft-written adapters; the reference for an adapter's tokens
is the same request alone on an engine that holds every adapter (`test_lora_equals_peft`
checks those against peft itself).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import torch
from engine_helpers import greedy, run_to_completion
from lora_helpers import lora_engine, run_one

from configs.engine_config import EngineConfig
from engine.async_engine import AsyncEngine
from engine.graph_capture import wait_for_decode_graphs
from engine.llm_engine import LLMEngine
from engine.request_stream import RequestRejected
from fixtures.tiny_adapters import TinyLoraSpec, load_base, write_adapter
from fixtures.tiny_checkpoints import SMALL_VOCAB, make_tiny_checkpoint

N = 8


class Tiny:
    """A tiny Qwen3 checkpoint, three adapters for it, and each adapter's reference tokens."""

    def __init__(self, root: Path) -> None:
        self.path = make_tiny_checkpoint("qwen3", root / "qwen3", real_vocab=False)
        base = load_base(str(self.path))
        specs = [
            TinyLoraSpec("a", rank=8, std=0.5, seed=11),
            TinyLoraSpec("b", rank=4, target_modules=("q_proj", "v_proj"), std=0.5, seed=12),
            TinyLoraSpec("c", rank=16, target_modules=("o_proj", "down_proj"), std=0.5, seed=13),
        ]
        self.adapters = {s.name: write_adapter(base, s, root / "loras") for s in specs}
        g = torch.Generator().manual_seed(1)
        self.prompt = torch.randint(3, SMALL_VOCAB, (17,), generator=g).tolist()
        engine = lora_engine(self.path, self.adapters)
        self.ref = {n: run_one(engine, self.prompt, n, N) for n in [None, *self.adapters]}
        assert len({tuple(t) for t in self.ref.values()}) == 4, "adapters must change outputs"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Tiny:
    return Tiny(tmp_path_factory.mktemp("lora-engine"))


def test_same_prompt_under_two_adapters_gets_two_cache_entries(tiny: Tiny) -> None:
    engine = lora_engine(tiny.path, tiny.adapters, enable_prefix_caching=True)
    bm = engine.block_manager
    assert run_one(engine, tiny.prompt, "a", N) == tiny.ref["a"]
    cached_after_a = len(bm.pool.cached)
    hits = bm.stats.hits
    assert run_one(engine, tiny.prompt, "b", N) == tiny.ref["b"]
    assert bm.stats.hits == hits, "b must not reuse a's KV"
    assert len(bm.pool.cached) >= 2 * (len(tiny.prompt) // engine.config.block_size)
    assert len(bm.pool.cached) > cached_after_a
    assert run_one(engine, tiny.prompt, None, N) == tiny.ref[None]
    assert bm.stats.hits == hits, "the base model must not reuse an adapter's KV"
    assert run_one(engine, tiny.prompt, "a", N) == tiny.ref["a"]
    assert bm.stats.hits > hits, "a's own prefix is reused"


def test_max_cpu_loras_evicts_and_reloads_with_exact_counts(tiny: Tiny) -> None:
    engine = lora_engine(tiny.path, tiny.adapters, {"max_loras": 1, "max_cpu_loras": 2})
    stats = engine.lora_stats()
    assert stats is not None
    # start-up reads a, b, c; c's read evicts a
    assert (stats.loads, stats.evictions, stats.in_host_memory) == (3, 1, ("b", "c"))
    for i, name in enumerate(["a", "b", "c", "a"]):
        assert run_one(engine, tiny.prompt, name, N) == tiny.ref[name], name
        stats = engine.lora_stats()
        assert stats is not None
        assert (stats.loads, stats.evictions) == (4 + i, 2 + i), name
        assert stats.in_host_memory[-1] == name and len(stats.in_host_memory) == 2
        assert stats.on_device == (name,)
    # a is held now: using it again reads nothing
    assert run_one(engine, tiny.prompt, "a", N) == tiny.ref["a"]
    assert engine.lora_stats().loads == 7  # type: ignore[union-attr]


def test_max_loras_caps_distinct_adapters_per_step(tiny: Tiny) -> None:
    engine = lora_engine(tiny.path, tiny.adapters, {"max_loras": 2, "max_cpu_loras": 3})
    names: list[str | None] = ["a", None, "b", "c", "a", None, "c"]
    for i, name in enumerate(names):
        engine.add_request(str(i), tiny.prompt, greedy(N, lora=name))
    out: dict[str, list[int]] = {}
    while engine.has_unfinished():
        for o in engine.step():
            out.setdefault(o.request_id, []).extend(o.new_token_ids)
        running = {s.lora_id for s in engine.scheduler.running if s.lora_id is not None}
        assert len(running) <= 2
    for i, name in enumerate(names):
        assert out[str(i)] == tiny.ref[name], (i, name)


def test_runtime_load_unload_and_reload(tiny: Tiny) -> None:
    engine = lora_engine(tiny.path, {}, {"max_loras": 2})
    with pytest.raises(ValueError, match="unknown LoRA adapter 'a'"):
        engine.add_request("x", tiny.prompt, greedy(N, lora="a"))
    engine.load_lora("a", str(tiny.adapters["a"]))
    with pytest.raises(ValueError, match="already loaded"):
        engine.load_lora("a", str(tiny.adapters["b"]))
    engine.add_request("r", tiny.prompt, greedy(N, lora="a"))
    with pytest.raises(ValueError, match="1 request\\(s\\) queued or running"):
        engine.unload_lora("a")
    assert run_to_completion(engine)["r"] == tiny.ref["a"]
    engine.unload_lora("a")
    with pytest.raises(ValueError, match="unknown LoRA adapter"):
        engine.unload_lora("a")
    # the same name, other weights: a new id, so a's cached prefix is not reused
    engine.load_lora("a", str(tiny.adapters["b"]))
    hits = engine.block_manager.stats.hits
    assert run_one(engine, tiny.prompt, "a", N) == tiny.ref["b"]
    assert engine.block_manager.stats.hits == hits


def test_lora_requests_need_lora_on(tiny: Tiny) -> None:
    engine = LLMEngine(
        str(tiny.path), EngineConfig(dtype="float32", num_kv_blocks=32, max_model_len=128)
    )
    with pytest.raises(ValueError, match="LoRA is off"):
        engine.add_request("x", tiny.prompt, greedy(N, lora="a"))
    with pytest.raises(ValueError, match="LoRA is off"):
        engine.load_lora("a", str(tiny.adapters["a"]))
    assert engine.lora_stats() is None


def test_lora_steps_run_eager_in_graph_mode(tiny: Tiny) -> None:
    engine = lora_engine(
        tiny.path,
        tiny.adapters,
        enforce_eager=False,
        batch_invariant=False,
        graph_batch_sizes=[4],
        enable_prefix_caching=False,
    )
    assert wait_for_decode_graphs(engine.executor, [4], 600)  # compiled in the background
    runner = engine.executor.runner  # type: ignore[attr-defined]
    replays: list[int] = []
    compiled = runner.graph_decoder

    def counted(*args: object, **kwargs: object) -> object:
        replays.append(1)
        return compiled(*args, **kwargs)

    runner.graph_decoder = counted
    assert run_one(engine, tiny.prompt, None, N) == tiny.ref[None]
    base_replays = len(replays)
    assert base_replays == N - 1, "base decode steps replay the graph"
    for name in ["a", None, "b"]:
        engine.add_request(str(name), tiny.prompt, greedy(N, lora=name))
    out = run_to_completion(engine)
    assert len(replays) == base_replays, "steps with a LoRA request run eager"
    for name in ["a", None, "b"]:
        assert out[str(name)] == tiny.ref[name]


def test_async_engine_loads_and_unloads_on_the_engine_thread(tiny: Tiny) -> None:
    async def scenario(engine: AsyncEngine) -> None:
        await engine.load_lora("a", str(tiny.adapters["a"]))
        with pytest.raises(ValueError, match="already loaded"):
            await engine.load_lora("a", str(tiny.adapters["b"]))
        stream = await engine.add("r", tiny.prompt, greedy(N, lora="a"))
        assert [t async for out in stream for t in out.new_token_ids] == tiny.ref["a"]
        await engine.unload_lora("a")
        with pytest.raises(RequestRejected, match="unknown LoRA adapter"):
            await engine.add("r2", tiny.prompt, greedy(N, lora="a"))

    engine = AsyncEngine(lambda: lora_engine(tiny.path, {}, {"max_loras": 2}))
    try:
        asyncio.run(scenario(engine))
    finally:
        engine.shutdown()


def test_make_tiny_lora_writes_adapters_the_engine_serves(tiny: Tiny, tmp_path: Path) -> None:
    from safetensors.torch import load_file

    from cli.main import main

    out = tmp_path / "cli-loras"
    assert (
        main(["make-tiny-lora", "--base", str(tiny.path), "--out", str(out), "--count", "2"]) == 0
    )
    adapters = {p.name: p for p in sorted(out.iterdir())}
    assert list(adapters) == ["lora-a", "lora-b"]
    for path in adapters.values():
        tensors = load_file(str(path / "adapter_model.safetensors"))
        assert all(t.abs().sum() > 0 for k, t in tensors.items() if "lora_B" in k)
    engine = lora_engine(tiny.path, adapters)
    outs = {name: run_one(engine, tiny.prompt, name, N) for name in adapters}
    assert outs["lora-a"] != outs["lora-b"]
    assert main(["make-tiny-lora", "--base", str(tiny.path), "--count", "0"]) == 2
