"""`single_thread_max_tokens`: small steps run on one CPU thread, with the same output bits."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
import torch

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
