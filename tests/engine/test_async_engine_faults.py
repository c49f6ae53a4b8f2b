"""Fault isolation in both engine fronts (`AsyncEngine`, the engine on a thread of the replica;
`ProcessEngine`, the engine in a core process) on the real SmolLM2 engine, with faults injected by
`tests.faulty_engine.FaultyEngine`."""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Iterator

import pytest

from configs.engine_config import EngineConfig
from engine.async_engine import AsyncEngine
from engine.outputs import RequestOutput
from engine.process_engine import ProcessEngine
from engine.request_stream import EngineDead
from engine.sampling_params import SamplingParams
from tests.faulty_engine import LOOP_FAULT, REQUEST_FAULT, STEP_FAULT, FaultyEngine

PROMPT = [1, 504, 3458, 314, 260, 3777]


Front = AsyncEngine | ProcessEngine
FRONT_CLASSES = [AsyncEngine, ProcessEngine]


def start(path: str, front_class: type[Front]) -> Front:
    config = EngineConfig(dtype="float32", max_model_len=512, num_kv_blocks=64)
    return front_class(functools.partial(FaultyEngine, path, config))


@pytest.fixture(scope="module", params=FRONT_CLASSES)
def engine(smollm2_path: str, request: pytest.FixtureRequest) -> Iterator[Front]:
    """One engine per front for the tests that leave it serving."""
    front = start(smollm2_path, request.param)
    try:
        yield front
    finally:
        front.shutdown()


def params(max_tokens: int = 8, seed: int | None = None) -> SamplingParams:
    return SamplingParams(max_tokens=max_tokens, temperature=0.0, ignore_eos=True, seed=seed)


async def outputs(front: Front, rid: str, p: SamplingParams) -> list[RequestOutput]:
    return [out async for out in await front.add(rid, PROMPT, p)]


def test_one_requests_fault_fails_it_alone_and_its_batch_completes(engine: Front) -> None:
    async def run() -> list[list[RequestOutput]]:
        seeds = [None, REQUEST_FAULT, None, None]
        return await asyncio.gather(
            *(outputs(engine, f"r{i}", params(seed=s)) for i, s in enumerate(seeds))
        )

    results = asyncio.run(run())
    last = [r[-1] for r in results]
    assert last[1].error is not None and last[1].error_kind == "request", last[1]
    assert [o.finish_reason for i, o in enumerate(last) if i != 1] == ["length"] * 3
    assert [o.num_output_tokens for i, o in enumerate(last) if i != 1] == [8] * 3
    after = asyncio.run(outputs(engine, "next", params()))
    assert after[-1].finish_reason == "length"
    stats = engine.stats()
    assert stats.num_free_blocks == stats.num_blocks, "a failed request kept KV blocks"


def test_a_failed_step_ends_its_requests_and_the_engine_goes_on(engine: Front) -> None:
    failed = asyncio.run(outputs(engine, "bad", params(seed=STEP_FAULT)))
    assert failed[-1].error_kind == "step" and failed[-1].finish_reason == "error"
    served = asyncio.run(outputs(engine, "good", params()))
    assert served[-1].finish_reason == "length" and engine.alive()
    stats = engine.stats()
    assert stats.num_free_blocks == stats.num_blocks


@pytest.mark.parametrize("front_class", FRONT_CLASSES)
def test_a_dead_loop_fails_waiting_requests_at_once_and_refuses_new_ones(
    smollm2_path: str, front_class: type[Front]
) -> None:
    engine = start(smollm2_path, front_class)

    async def run() -> tuple[list[list[RequestOutput]], float]:
        long_ones = [
            asyncio.ensure_future(outputs(engine, f"long{i}", params(400))) for i in range(2)
        ]
        await asyncio.sleep(0.5)  # both are decoding
        start = time.monotonic()
        killer = asyncio.ensure_future(outputs(engine, "killer", params(seed=LOOP_FAULT)))
        results = await asyncio.wait_for(asyncio.gather(*long_ones, killer), timeout=30)
        return list(results), time.monotonic() - start

    results, seconds = asyncio.run(run())
    assert seconds < 5, f"waiting requests took {seconds:.1f} s to hear of the dead loop"
    for r in results:
        assert r[-1].finished and r[-1].error_kind == "dead", r[-1]
    assert not engine.alive() and engine.dead_reason() is not None
    with pytest.raises(EngineDead):
        asyncio.run(outputs(engine, "late", params()))
    engine.shutdown()
