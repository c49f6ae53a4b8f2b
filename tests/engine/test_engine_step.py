"""The step's contracts: where each feature's logits rows go, the executor's typed result, and
the order in which the step calls its hooks."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

from configs.speculative_config import SpeculativeConfig
from engine.llm_engine import LLMEngine
from engine.postprocess import sampling_rows
from engine.prompt_logprobs import PromptLogprobRows
from engine.sampling_params import SamplingParams
from engine.scheduler import ScheduledSeq, SchedulerOutput
from engine.sequence import Sequence
from engine.step_input import StepInput
from engine.step_result import StepResult


def _seq(rid: str, prompt: list[int], computed: int, **params: Any) -> Sequence:
    seq = Sequence(rid, prompt, SamplingParams(**params), 0)
    seq.num_computed_tokens = computed
    return seq


def test_prompt_logprob_rows_come_first_then_one_row_per_sample_and_per_draft_token() -> None:
    chunk = _seq("chunk", list(range(10, 20)), 0, prompt_logprobs=1)  # first 6 of 10 tokens
    decode = _seq("decode", [1, 2, 3, 4], 4)
    decode.append_output(5)
    drafted = _seq("drafted", [1, 2, 3], 3)
    drafted.append_output(4)
    last = _seq("last", list(range(30, 38)), 0, prompt_logprobs=0)  # all 8: it samples
    batch = SchedulerOutput(
        (
            ScheduledSeq(chunk, 6, sample=False),  # rows 0-5
            ScheduledSeq(decode, 1, sample=True),  # row 6
            ScheduledSeq(drafted, 3, sample=True, draft_token_ids=(7, 8)),  # rows 7-9
            ScheduledSeq(last, 8, sample=True),  # rows 10-17
        ),
        0,
    )
    prompt = PromptLogprobRows.of(batch)
    # `chunk`'s rows 0-5 predict prompt tokens 1-6, `last`'s 0-6 tokens 1-7 (its position 7's
    # row predicts its first output token: a sampling row)
    assert prompt.rows == (0, 1, 2, 3, 4, 5, *range(10, 17))
    assert [(s.seq.request_id, first, n) for s, first, n in prompt.spans] == [
        ("chunk", 0, 6),
        ("last", 6, 7),
    ]
    assert sampling_rows(batch) == [6, 7, 8, 9, 17]

    logits = torch.randn(len(prompt.rows) + 5, 50)
    rest = prompt.collect(logits)
    assert torch.equal(rest, logits[len(prompt.rows) :])
    assert [e.token_id for e in chunk.prompt_logprobs] == list(range(11, 17))
    assert [e.token_id for e in last.prompt_logprobs] == list(range(31, 38))
    expected = logits[7].log_softmax(-1)[32].item()  # `last`'s second row: token 32
    assert last.prompt_logprobs[1].logprob == pytest.approx(expected, abs=1e-6)


@pytest.fixture(scope="module")
def ngram_engine(make_engine: Callable[..., LLMEngine]) -> LLMEngine:
    """SmolLM2 with prompt-lookup speculation (k = 2)."""
    return make_engine(speculative=SpeculativeConfig(method="ngram", num_speculative_tokens=2))


def test_execute_returns_hidden_states_only_when_the_step_asks(ngram_engine: LLMEngine) -> None:
    engine = ngram_engine
    tokens = list(range(100, 109))
    blocks = [list(range(-(-len(tokens) // engine.config.block_size)))]
    plain = StepInput(tokens, [0], [len(tokens)], blocks, [3, 8], [len(tokens)])
    result = engine.executor.execute(plain)
    assert isinstance(result, StepResult) and result.hidden is None
    assert result.logits.shape == (2, engine.vocab_size) and result.logits.dtype == torch.float32

    asked = StepInput(tokens, [0], [len(tokens)], blocks, [3, 8], [len(tokens)], return_hidden=True)
    with_hidden = engine.executor.execute(asked)
    assert with_hidden.hidden is not None
    assert with_hidden.hidden.shape == (len(tokens), engine.hf_config.hidden_size)
    torch.testing.assert_close(with_hidden.logits, result.logits)


def test_step_calls_execute_then_postprocess_then_speculation(ngram_engine: LLMEngine) -> None:
    engine = ngram_engine
    assert engine.speculator is not None
    calls: list[str] = []
    execute, process = engine.executor.execute, engine.outputs.process
    follow = engine.speculator.follow_step

    def traced_execute(step: StepInput) -> StepResult:
        assert not step.return_hidden  # prompt lookup reads no hidden states
        calls.append("execute")
        return execute(step)

    def traced_process(*args: Any) -> Any:
        calls.append("postprocess")
        return process(*args)

    def traced_follow(*args: Any) -> None:
        calls.append("speculation")
        follow(*args)

    engine.executor.execute = traced_execute  # type: ignore[method-assign]
    engine.outputs.process = traced_process  # type: ignore[method-assign]
    engine.speculator.follow_step = traced_follow  # type: ignore[method-assign]
    params = SamplingParams(max_tokens=6, temperature=0.0, ignore_eos=True, prompt_logprobs=1)
    engine.add_request("r", [5, 6, 7, 5, 6, 7, 5, 6], params)
    outs = []
    steps = 0
    while engine.has_unfinished():
        outs.extend(engine.step())
        steps += 1
    assert calls == ["execute", "postprocess", "speculation"] * steps
    assert outs[0].prompt_logprobs is not None and len(outs[0].prompt_logprobs) == 8
    assert all(o.prompt_logprobs is None for o in outs[1:])
    assert sum(len(o.new_token_ids) for o in outs) == 6
