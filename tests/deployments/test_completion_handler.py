"""`CompletionHandler` (legacy `/v1/completions`) on a scripted engine client: the real SmolLM2
tokenizer and detokenizer, no model and no Ray."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any, TypeVar

import pytest
from scripted_client import LOGPROB, Script, ScriptedClient

from deployments.handlers.completions import CompletionHandler
from deployments.handlers.preparation import Preparer
from deployments.protocol.errors import OpenAIError
from deployments.protocol.requests import CompletionRequest
from deployments.protocol.responses import Completion

T = TypeVar("T")

MODEL = "smollm2-135m-instruct"
PROMPT = "The capital of France is"


def make_handler(tokenizer: Any, scripts: list[Script]) -> tuple[CompletionHandler, ScriptedClient]:
    """A completion handler over a client that plays `scripts`."""
    engine = ScriptedClient(tokenizer, scripts)
    return CompletionHandler(engine, tokenizer, MODEL, Preparer(timeout_s=30)), engine


def request(**fields: Any) -> CompletionRequest:
    return CompletionRequest(**{"prompt": PROMPT, **fields})


def run(work: Awaitable[T]) -> T:
    async def go() -> T:
        return await work

    return asyncio.run(go())


def stream(handler: CompletionHandler, req: CompletionRequest) -> list[Completion]:
    async def go() -> list[Completion]:
        return [c async for c in await handler.stream(req)]

    return asyncio.run(go())


def text(chunks: list[Completion], index: int = 0) -> str:
    return "".join(c.text for ch in chunks for c in ch.choices if c.index == index)


def ids(tokenizer: Any, s: str) -> list[int]:
    return tokenizer.encode(s, add_special_tokens=False)


def test_stream_carries_the_text_then_the_usage(tokenizer) -> None:
    handler, engine = make_handler(tokenizer, [Script(" Paris, of course.")])
    chunks = stream(handler, request(stream=True, stream_options={"include_usage": True}))
    assert text(chunks) == " Paris, of course."
    assert [c.finish_reason for ch in chunks for c in ch.choices][-1] == "stop"
    assert {ch.id for ch in chunks} == {chunks[0].id} and chunks[0].id.startswith("cmpl-")
    assert {ch.object for ch in chunks} == {"text_completion"}
    assert {ch.model for ch in chunks} == {MODEL}
    usage = chunks[-1].usage
    assert chunks[-1].choices == [] and usage is not None
    assert (usage.prompt_tokens, usage.completion_tokens) == (
        len(ids(tokenizer, PROMPT)),
        len(ids(tokenizer, " Paris, of course.")),
    )
    assert engine.added[0].prompt == ids(tokenizer, PROMPT)


def test_choice_p_times_n_plus_i_is_sample_i_of_prompt_p(tokenizer) -> None:
    outs = [" a1.", " a2.", " b1.", " b2."]
    handler, engine = make_handler(tokenizer, [Script(t) for t in outs])
    whole = run(handler.complete(request(prompt=["Apples are", "Bananas are"], n=2, seed=3)))
    assert [(c.index, c.text, c.finish_reason) for c in whole.choices] == [
        (i, t, "stop") for i, t in enumerate(outs)
    ]
    prompts = [a.prompt for a in engine.added]
    assert prompts == [ids(tokenizer, "Apples are")] * 2 + [ids(tokenizer, "Bananas are")] * 2
    assert [a.params.seed for a in engine.added] == [3, 4, 3, 4]
    assert engine.added[0].group is engine.added[1].group is not engine.added[2].group
    assert whole.usage is not None and whole.usage.prompt_tokens == sum(map(len, prompts[::2]))


def test_token_id_prompts_pass_as_they_are(tokenizer) -> None:
    handler, engine = make_handler(tokenizer, [Script(" yes")])
    whole = run(handler.complete(request(prompt=[1, 2, 3])))
    assert engine.added[0].prompt == [1, 2, 3]
    assert whole.choices[0].text == " yes"


def test_echo_with_logprobs_reports_prompt_then_output_tokens(tokenizer) -> None:
    handler, engine = make_handler(tokenizer, [Script(" Paris.")])
    whole = run(handler.complete(request(echo=True, logprobs=1)))
    choice = whole.choices[0]
    assert choice.text == PROMPT + " Paris."
    assert engine.added[0].params.prompt_logprobs == 1
    lp = choice.logprobs
    assert lp is not None
    all_ids = ids(tokenizer, PROMPT) + ids(tokenizer, " Paris.")
    assert lp.tokens == [tokenizer.decode([i]) for i in all_ids]
    assert lp.token_logprobs == [None] + [LOGPROB] * (len(all_ids) - 1)
    assert lp.top_logprobs[0] is None
    assert lp.text_offset[0] == 0
    assert lp.text_offset[len(ids(tokenizer, PROMPT))] == len(PROMPT)
    assert lp.text_offset == sorted(lp.text_offset)


def test_stop_string_and_max_tokens_end_the_choice(tokenizer) -> None:
    handler, engine = make_handler(tokenizer, [Script(" one two three four five")])
    stopped = run(handler.complete(request(stop=" three")))
    assert (stopped.choices[0].text, stopped.choices[0].finish_reason) == (" one two", "stop")
    assert engine.streams[0].aborted
    cut = run(handler.complete(request(max_tokens=2)))
    assert (cut.choices[0].text, cut.choices[0].finish_reason) == (" one two", "length")
    assert cut.usage is not None and cut.usage.completion_tokens == 2


@pytest.mark.parametrize(
    ("fields", "param", "message"),
    [
        ({"suffix": "!"}, "suffix", "suffix is not supported"),
        ({"best_of": 3, "n": 2}, "best_of", "best_of must equal n"),
        ({"prompt": ""}, "prompt", "prompt must not be empty"),
        ({"prompt": []}, "prompt", "prompt must not be empty"),
        ({"prompt": [5, 60000]}, "prompt", "token id 60000 is outside the vocabulary [0, 49152)"),
        ({"prompt": "a\ud800b"}, "prompt", "lone UTF-16 surrogate (U+D800)"),
    ],
)
def test_requests_the_replica_cannot_serve_are_400s(tokenizer, fields, param, message) -> None:
    handler, engine = make_handler(tokenizer, [Script(" x")])
    with pytest.raises(OpenAIError) as info:
        run(handler.complete(request(**fields)))
    assert (info.value.status_code, info.value.param) == (400, param)
    assert message in str(info.value)
    assert engine.added == []


def test_engine_error_mid_stream_raises_after_the_text_so_far(tokenizer) -> None:
    script = Script(" one two three", error=("injected", "request"), error_after=2)
    handler, _ = make_handler(tokenizer, [script])

    async def go() -> tuple[str, OpenAIError]:
        seen = ""
        chunks = await handler.stream(request(stream=True))
        with pytest.raises(OpenAIError) as info:
            async for chunk in chunks:
                seen += "".join(c.text for c in chunk.choices)
        return seen, info.value

    seen, err = asyncio.run(go())
    assert seen == " one two"
    assert (err.status_code, err.code) == (500, "internal_error")


@pytest.mark.parametrize(
    "fields",
    [{"echo": True, "logprobs": 2}, {"n": 2}, {"prompt": ["First", "Second"], "stop": ["c"]}],
)
def test_the_non_streamed_answer_is_the_stream_joined(tokenizer, fields) -> None:
    scripts = [Script(" abc def."), Script(" ghi jkl."), Script(" mno."), Script(" pqr.")]
    chunks = stream(make_handler(tokenizer, scripts)[0], request(stream=True, **fields))
    whole = run(make_handler(tokenizer, scripts)[0].complete(request(**fields)))
    assert len(whole.choices) == len({c.index for ch in chunks for c in ch.choices})
    for choice in whole.choices:
        mine = [c for ch in chunks for c in ch.choices if c.index == choice.index]
        assert choice.text == "".join(c.text for c in mine)
        assert choice.finish_reason == mine[-1].finish_reason
        if "logprobs" in fields:
            assert choice.logprobs is not None
            assert choice.logprobs.tokens == [t for c in mine for t in c.logprobs.tokens]
            assert choice.logprobs.text_offset == [o for c in mine for o in c.logprobs.text_offset]


def test_a_lora_request_reports_the_adapter(tokenizer) -> None:
    handler, engine = make_handler(tokenizer, [Script(" ok")])
    chunks = stream(handler, request(stream=True))
    whole = run(handler.complete(request(), lora="sql-adapter"))
    assert {ch.model for ch in chunks} == {MODEL}
    assert whole.model == "sql-adapter" and engine.added[1].params.lora == "sql-adapter"
