"""`single_thread_max_tokens`: small steps run on one CPU thread, with the same output bits;
`thread_niceness`: the engine's threads, and only they, run at the niceness set."""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import torch

from engine.async_engine import AsyncEngine
from engine.cpu_threads import set_thread_niceness
from engine.llm_engine import LLMEngine
from engine.sampling_params import SamplingParams
from engine.step_input import StepInput
from engine.step_result import StepResult

pytestmark = pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="needs two CPU threads")


@pytest.fixture
def restore_threads() -> Iterator[None]:
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def _run(engine: LLMEngine, observe: list[tuple[int, int]]) -> dict[str, list[Any]]:
    """Four requests staggered so that steps mix prefill chunks and decode batches of 1-4.

    Appends `(tokens in the step, intra-op threads it ran on)` to `observe` for every step.
    """
    execute = engine.executor.execute

    def observed(step: StepInput) -> StepResult:
        observe.append((len(step.token_ids), torch.get_num_threads()))
        return execute(step)

    engine.executor.execute = observed  # type: ignore[method-assign]
    params = SamplingParams(max_tokens=12, temperature=0.0, ignore_eos=True, logprobs=2)
    prompts = [list(range(200 + 7 * i, 240 + 13 * i)) for i in range(4)]
    out: dict[str, list[Any]] = {}
    arrivals = {0: 0, 3: 1, 5: 2, 9: 3}  # step -> index of the prompt that arrives then
    step = 0
    while step in arrivals or engine.has_unfinished():
        if step in arrivals:
            engine.add_request(f"r{arrivals[step]}", prompts[arrivals[step]], params)
        for o in engine.step():
            entries = out.setdefault(o.request_id, [])
            entries.extend(zip(o.new_token_ids, o.logprobs or (), strict=True))
        step += 1
    return out


def test_small_steps_run_on_one_thread_with_identical_logprobs(
    make_engine, restore_threads: None
) -> None:
    kw = {"dtype": "bfloat16", "weight_quantization": "int4", "num_threads": 2}
    kw |= {"max_num_batched_tokens": 64}
    default_threads: list[tuple[int, int]] = []
    reference = _run(make_engine(**kw), default_threads)
    assert {threads for _, threads in default_threads} == {2}

    small_steps: list[tuple[int, int]] = []
    split = _run(make_engine(single_thread_max_tokens=3, **kw), small_steps)
    assert split == reference  # tokens and their top-2 logprobs, bit for bit
    assert {threads for tokens, threads in small_steps if tokens <= 3} == {1}
    assert {threads for tokens, threads in small_steps if tokens > 3} == {2}
    seen = {tokens for tokens, _ in small_steps}
    assert seen >= {1, 2, 3, 4} and max(seen) >= 40  # decode batches and prefill chunks


def _niceness(tid: int) -> int:
    return os.getpriority(os.PRIO_PROCESS, tid)


def test_thread_niceness_holds_for_the_engine_thread_and_its_team_only(
    make_engine, restore_threads: None
) -> None:
    """`thread_niceness` is set on the engine thread before the model loads, so the OpenMP
    threads its steps start inherit it; the caller's thread keeps its own. (A niceness above
    the current one needs no privilege.)"""
    mine = _niceness(threading.get_native_id())
    target = min(mine + 3, 19)
    tids_before = set(os.listdir("/proc/self/task"))
    front = AsyncEngine(lambda: make_engine(num_threads=2, thread_niceness=target))
    try:

        async def run() -> list[Any]:
            stream = await front.add("r", list(range(100, 180)), SamplingParams(max_tokens=4))
            return [out async for out in stream]

        assert asyncio.run(run())[-1].finish_reason == "length"
        engine_tid = front._thread.native_id
        assert engine_tid is not None and _niceness(engine_tid) == target
        assert _niceness(threading.get_native_id()) == mine
        new = set(os.listdir("/proc/self/task")) - tids_before - {str(engine_tid)}
        team = [t for t in new if _niceness(int(t)) == target]
        assert team, "the 2-thread steps' OpenMP worker starts at the engine's niceness"
    finally:
        front.shutdown()


def test_thread_niceness_without_privilege_warns_and_goes_on(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Lowering the niceness without CAP_SYS_NICE fails in the kernel (EPERM): a warning
    naming the setting, and the engine starts anyway."""

    def refuse(which: int, who: int, prio: int) -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "setpriority", refuse)
    with caplog.at_level(logging.WARNING):
        assert not set_thread_niceness(-5)
    assert "engine.thread_niceness -5 not set" in caplog.text
