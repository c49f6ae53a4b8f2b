"""The engine in a core process (`ProcessEngine` + `engine.core_process`) on the real SmolLM2
engine: the same tokens as the engine run offline, grammars that cross the process boundary,
aborts that free KV blocks in the core, a core that dies or fails to build, and no process left
behind. Fault isolation shared with the thread front: tests/engine/test_async_engine_faults.py."""

from __future__ import annotations

import asyncio
import functools
import json
import os
import signal
import time
from collections.abc import Iterator
from typing import Any

import pytest

from configs.engine_config import EngineConfig
from deployments.prompting.structured_output import GrammarFactory
from engine.constraints import GrammarConstraint
from engine.llm_engine import LLMEngine
from engine.outputs import RequestOutput
from engine.process_engine import ProcessEngine
from engine.request_stream import EngineDead, RequestRejected
from engine.sampling_params import SamplingParams

CONFIG = EngineConfig(dtype="float32", max_model_len=512, num_kv_blocks=64)
PROMPTS = [[1, 504, 3458, 314, 260, 3777], [1, 17, 2055, 28, 5], [1, 9, 9, 9, 9, 9, 9, 9]]


@pytest.fixture(scope="module")
def front(smollm2_path: str) -> Iterator[ProcessEngine]:
    engine = ProcessEngine(functools.partial(LLMEngine, smollm2_path, CONFIG))
    try:
        yield engine
    finally:
        engine.shutdown()


def greedy(max_tokens: int, **kw: Any) -> SamplingParams:
    return SamplingParams(max_tokens=max_tokens, temperature=0.0, ignore_eos=True, **kw)


async def outputs(
    front: ProcessEngine, rid: str, prompt: list[int], p: SamplingParams
) -> list[RequestOutput]:
    return [out async for out in await front.add(rid, prompt, p)]


def tokens(outs: list[RequestOutput]) -> list[int]:
    return [t for out in outs for t in out.new_token_ids]


def test_concurrent_greedy_tokens_equal_the_offline_engines(
    front: ProcessEngine, smollm2_path: str
) -> None:
    async def run() -> list[list[RequestOutput]]:
        return await asyncio.gather(
            *(outputs(front, f"p{i}", prompt, greedy(12)) for i, prompt in enumerate(PROMPTS))
        )

    served = [tokens(outs) for outs in asyncio.run(run())]
    offline = LLMEngine(smollm2_path, CONFIG)
    for i, prompt in enumerate(PROMPTS):
        offline.add_request(f"p{i}", prompt, greedy(12))
    expected: dict[str, list[int]] = {}
    while offline.has_unfinished():
        for out in offline.step():
            expected.setdefault(out.request_id, []).extend(out.new_token_ids)
    offline.shutdown()
    assert served == [expected[f"p{i}"] for i in range(len(PROMPTS))]
    assert all(len(t) == 12 for t in served)


def test_a_grammar_constraint_crosses_to_the_core(front: ProcessEngine, tokenizer: Any) -> None:
    schema = {
        "type": "object",
        "properties": {"city": {"type": "string", "maxLength": 12}},
        "required": ["city"],
    }
    constraint = GrammarFactory(tokenizer, front.vocab_size).constraint(schema, "response_format")
    params = SamplingParams(max_tokens=40, temperature=0.0, constraint=constraint)
    outs = asyncio.run(outputs(front, "json", PROMPTS[0], params))
    answer = json.loads(tokenizer.decode(tokens(outs), skip_special_tokens=True))
    assert set(answer) == {"city"} and isinstance(answer["city"], str)
    assert outs[-1].finish_reason == "stop"


def test_a_request_that_cannot_travel_is_refused_alone(
    front: ProcessEngine, tokenizer: Any
) -> None:
    compiled = GrammarFactory(tokenizer, front.vocab_size)._compile('{"type": "object"}')
    local_only = GrammarConstraint(compiled, front.vocab_size)  # no tokenizer info: stays here
    params = SamplingParams(max_tokens=8, temperature=0.0, constraint=local_only)
    with pytest.raises(RequestRejected, match="engine core"):
        asyncio.run(outputs(front, "local", PROMPTS[0], params))
    assert front.alive()
    assert len(tokens(asyncio.run(outputs(front, "after", PROMPTS[0], greedy(4))))) == 4


def test_a_closed_stream_frees_its_blocks_in_the_core(front: ProcessEngine) -> None:
    async def run() -> None:
        stream = await front.add("closed", PROMPTS[0], greedy(400))
        async for out in stream:
            if out.num_output_tokens >= 3:
                break
        await stream.aclose()
        for _ in range(100):
            await asyncio.sleep(0.05)
            stats = front.stats()
            if stats.num_free_blocks == stats.num_blocks and stats.num_running == 0:
                return
        raise AssertionError(f"the aborted request still holds blocks: {front.stats()}")

    asyncio.run(run())
    assert front.alive()


def test_an_adapter_call_error_comes_back_as_value_error(front: ProcessEngine) -> None:
    with pytest.raises(ValueError, match="LoRA"):
        asyncio.run(front.unload_lora("nope"))
    assert front.alive()


def test_a_killed_core_ends_its_requests_and_fails_health(smollm2_path: str) -> None:
    engine = ProcessEngine(functools.partial(LLMEngine, smollm2_path, CONFIG))

    async def run() -> list[RequestOutput]:
        stream = await engine.add("long", PROMPTS[0], greedy(400))
        seen = []
        async for out in stream:
            seen.append(out)
            if len(seen) == 2:
                os.kill(engine._proc.pid, signal.SIGKILL)
        return seen

    start = time.monotonic()
    seen = asyncio.run(asyncio.wait_for(run(), timeout=30))
    assert time.monotonic() - start < 10
    assert seen[-1].finished and seen[-1].error_kind == "dead", seen[-1]
    reason = engine.dead_reason()
    assert reason is not None and "-9" in reason, reason
    with pytest.raises(EngineDead):
        asyncio.run(outputs(engine, "late", PROMPTS[0], greedy(4)))
    engine.shutdown()


def test_a_build_error_is_raised_and_leaves_no_process(smollm2_path: str) -> None:
    too_long = EngineConfig(dtype="float32", max_model_len=1_000_000, num_kv_blocks=64)
    children_before = _children()
    with pytest.raises(ValueError, match="max_model_len"):
        ProcessEngine(functools.partial(LLMEngine, smollm2_path, too_long))
    assert _children() == children_before


def test_shutdown_aborts_running_requests_and_ends_the_core(smollm2_path: str) -> None:
    engine = ProcessEngine(functools.partial(LLMEngine, smollm2_path, CONFIG))
    pid = engine._proc.pid

    async def run() -> RequestOutput:
        stream = await engine.add("long", PROMPTS[0], greedy(400))
        await stream.__anext__()
        await asyncio.get_running_loop().run_in_executor(None, engine.shutdown)
        return [out async for out in stream][-1]

    last = asyncio.run(run())
    assert last.finish_reason == "abort"
    assert pid not in _children()
    assert engine.dead_reason() == "the engine was shut down"


def _children() -> set[int]:
    """Pids of this process's live children."""
    me = os.getpid()
    found = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == me and fields[0] != "Z":
            found.add(int(entry))
    return found
