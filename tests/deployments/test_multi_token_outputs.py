"""An engine output of several tokens (speculative decoding keeps a run of draft tokens in one
step) reads as the same tokens one output at a time would: same text, and a stop string cuts
the tokens after it out of the output, its logprobs and its token count."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from scripted_client import ScriptedStream

from deployments.handlers.choices import ChoiceDelta, run_choice
from engine.outputs import RequestOutput, TokenLogprob

TEXT = "One two three. Four five six. Seven eight nine."


def outputs(ids: list[int], sizes: list[int]) -> list[RequestOutput]:
    """`ids` as engine outputs of `sizes` tokens each, with logprobs; the last one finishes."""
    outs, done = [], 0
    for i, n in enumerate(sizes):
        chunk = tuple(ids[done : done + n])
        done += n
        last = i == len(sizes) - 1
        outs.append(
            RequestOutput(
                request_id="r",
                new_token_ids=chunk,
                finished=last,
                finish_reason="length" if last else None,
                num_prompt_tokens=3,
                num_output_tokens=done,
                logprobs=tuple(TokenLogprob(t, -0.5) for t in chunk),
            )
        )
    assert done == len(ids)
    return outs


def collect(tokenizer: Any, outs: list[RequestOutput], stops: list[str]) -> list[ChoiceDelta]:
    async def go() -> list[ChoiceDelta]:
        stream = ScriptedStream(outs)
        return [d async for d in run_choice(stream, tokenizer, 0, [1, 2, 3], stops)]

    return asyncio.run(go())


@pytest.mark.parametrize("stops", [[], [". Four"], ["six"], ["nine."], ["absent"]])
@pytest.mark.parametrize("sizes", [[5, 5, 5], [1, 7, 3], [2, 2, 4, 2]])
def test_runs_of_tokens_read_as_single_tokens(tokenizer, stops: list[str], sizes) -> None:
    ids = tokenizer.encode(TEXT, add_special_tokens=False)
    sizes = [*sizes[:-1], len(ids) - sum(sizes[:-1])]
    single = collect(tokenizer, outputs(ids, [1] * len(ids)), stops)
    runs = collect(tokenizer, outputs(ids, sizes), stops)
    assert "".join(d.text for d in runs) == "".join(d.text for d in single)
    assert runs[-1].finish_reason == single[-1].finish_reason
    assert runs[-1].num_output_tokens == single[-1].num_output_tokens
    assert [e.token_id for d in runs for e in d.logprobs] == [
        e.token_id for d in single for e in d.logprobs
    ]
    if stops and stops[0] in TEXT:
        assert single[-1].finish_reason == "stop"
