"""`ChatHandler` on a scripted engine client: the real SmolLM2 tokenizer, chat template, tool
parser (hermes, SmolLM2's configured one) and detokenizer, no model and no Ray."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable
from typing import Any, TypeVar

import pytest
from scripted_client import LOGPROB, Script, ScriptedClient

from deployments.handlers.chat import ChatHandler, ChatSettings
from deployments.handlers.preparation import Preparer
from deployments.prompting.chat_template import ChatTemplate
from deployments.prompting.structured_output import GrammarFactory
from deployments.protocol.errors import OpenAIError
from deployments.protocol.requests import ChatCompletionRequest
from deployments.protocol.responses import ChatCompletionChunk
from engine.request_stream import RequestRejected

T = TypeVar("T")

MODEL = "smollm2-135m-instruct"
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]
CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'


@pytest.fixture(scope="module")
def grammars(tokenizer: Any) -> GrammarFactory:
    return GrammarFactory(tokenizer, len(tokenizer))


def make_handler(
    tokenizer: Any,
    grammars: GrammarFactory,
    scripts: list[Script],
    tool_parser: str | None = "hermes",
    **client: Any,
) -> tuple[ChatHandler, ScriptedClient]:
    """A chat handler for SmolLM2 (family `llama`) over a client that plays `scripts`."""
    engine = ScriptedClient(tokenizer, scripts, **client)
    handler = ChatHandler(
        engine,
        tokenizer,
        ChatTemplate(tokenizer, None, "llama"),
        grammars,
        ChatSettings(MODEL, tool_parser),
        Preparer(timeout_s=30),
    )
    return handler, engine


def request(**fields: Any) -> ChatCompletionRequest:
    """A chat request with one user message, `fields` on top."""
    return ChatCompletionRequest(messages=[{"role": "user", "content": "Hi there"}], **fields)


def run(work: Awaitable[T]) -> T:
    async def go() -> T:
        return await work

    return asyncio.run(go())


def stream(
    handler: ChatHandler, req: ChatCompletionRequest, **kw: Any
) -> list[ChatCompletionChunk]:
    """Every chunk of a streamed answer."""

    async def go() -> list[ChatCompletionChunk]:
        return [c async for c in await handler.stream(req, **kw)]

    return asyncio.run(go())


def content(chunks: list[ChatCompletionChunk], index: int = 0) -> str:
    return "".join(c.delta.content or "" for ch in chunks for c in ch.choices if c.index == index)


def finish_reasons(chunks: list[ChatCompletionChunk]) -> dict[int, str]:
    return {c.index: c.finish_reason for ch in chunks for c in ch.choices if c.finish_reason}


def test_stream_opens_with_one_role_chunk_then_streams_the_text(tokenizer, grammars) -> None:
    handler, engine = make_handler(tokenizer, grammars, [Script("Hello there, friend.")])
    chunks = stream(handler, request(stream=True))
    assert chunks[0].choices[0].delta.model_dump() == {"role": "assistant", "content": ""}
    assert [c.delta.role for ch in chunks[1:] for c in ch.choices] == [None] * (len(chunks) - 1)
    assert content(chunks) == "Hello there, friend."
    assert finish_reasons(chunks) == {0: "stop"}
    assert chunks[-1].usage is None  # no usage chunk unless asked for
    assert {ch.id for ch in chunks} == {chunks[0].id} and chunks[0].id.startswith("chatcmpl-")
    assert {ch.model for ch in chunks} == {MODEL}
    prompt = tokenizer.decode(engine.added[0].prompt)
    assert prompt.endswith("<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n")


def test_usage_chunk_comes_last_and_counts_prompt_and_output(tokenizer, grammars) -> None:
    handler, engine = make_handler(tokenizer, grammars, [Script("Hello there, friend.")])
    chunks = stream(handler, request(stream=True, stream_options={"include_usage": True}))
    last = chunks[-1]
    assert last.choices == [] and last.usage is not None
    out = len(tokenizer.encode("Hello there, friend.", add_special_tokens=False))
    assert (last.usage.prompt_tokens, last.usage.completion_tokens) == (
        len(engine.added[0].prompt),
        out,
    )
    assert last.usage.total_tokens == len(engine.added[0].prompt) + out


def test_tool_call_streams_as_deltas_after_the_content(tokenizer, grammars) -> None:
    handler, engine = make_handler(tokenizer, grammars, [Script("Sure. " + CALL)])
    chunks = stream(handler, request(stream=True, tools=TOOLS))
    calls = [t for ch in chunks for c in ch.choices for t in c.delta.tool_calls or []]
    assert content(chunks) == "Sure."
    assert calls[0]["index"] == 0 and calls[0]["type"] == "function"
    assert calls[0]["id"].startswith("call_")
    assert calls[0]["function"]["name"] == "get_weather"
    assert len(calls) > 2, "the arguments stream in pieces"
    arguments = "".join(t["function"]["arguments"] for t in calls)
    assert json.loads(arguments) == {"city": "Paris"}
    assert finish_reasons(chunks) == {0: "tool_calls"}
    # the tools reached the prompt through SmolLM2's ChatML tool template
    assert '"name": "get_weather"' in tokenizer.decode(engine.added[0].prompt)


def test_n_choices_are_indexed_interleaved_and_sampled_as_one_group(tokenizer, grammars) -> None:
    texts = ["Alpha beta gamma delta.", "One two three four five."]
    handler, engine = make_handler(tokenizer, grammars, [Script(t) for t in texts])
    chunks = stream(handler, request(stream=True, n=2, seed=7))
    assert [c.index for c in chunks[0].choices] == [0, 1]
    assert [c.delta.role for c in chunks[0].choices] == ["assistant", "assistant"]
    assert [content(chunks, i) for i in (0, 1)] == texts
    order = [c.index for ch in chunks[1:] for c in ch.choices]
    assert order[:4] == [0, 1, 0, 1], "choices stream side by side, not one after the other"
    assert finish_reasons(chunks) == {0: "stop", 1: "stop"}
    first, second = engine.added
    assert first.prompt is second.prompt
    assert first.group is second.group and first.group is not None and first.group.size == 2
    assert (first.params.seed, second.params.seed) == (7, 8)


@pytest.mark.parametrize("tokens_per_step", [1, 3])
def test_stop_string_cuts_the_text_and_aborts_the_engine_request(
    tokenizer, grammars, tokens_per_step
) -> None:
    text = "One two. Three four. Five."
    script = Script(text, tokens_per_step=tokens_per_step)
    handler, engine = make_handler(tokenizer, grammars, [script])
    req = request(stream=True, stop=["Three"], stream_options={"include_usage": True})
    chunks = stream(handler, req)
    assert content(chunks) == "One two. "
    assert finish_reasons(chunks) == {0: "stop"}
    assert engine.streams[0].aborted, "the tokens after the stop string are not generated"
    ids = tokenizer.encode(text, add_special_tokens=False)
    through_stop = next(k for k in range(len(ids)) if "Three" in tokenizer.decode(ids[:k]))
    assert chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens == through_stop  # a run is cut at the stop too
    assert [c.stop_reason for ch in chunks for c in ch.choices if c.finish_reason] == ["Three"]


def test_the_matched_stop_string_is_the_stop_reason(tokenizer, grammars) -> None:
    text = "One two. Three four. Five."
    handler, _ = make_handler(tokenizer, grammars, [Script(text), Script(text)])
    done = run(handler.complete(request(stop=["Five", "four"])))
    assert done.choices[0].stop_reason == "four"  # the earliest in the text, not the first listed
    assert "stop_reason" not in run(handler.complete(request())).choices[0].model_dump()


def test_max_tokens_ends_with_length(tokenizer, grammars) -> None:
    text = "One two three four five six."
    handler, engine = make_handler(tokenizer, grammars, [Script(text)])
    chunks = stream(handler, request(stream=True, max_tokens=3))
    ids = tokenizer.encode(text, add_special_tokens=False)
    assert content(chunks) == tokenizer.decode(ids[:3])
    assert finish_reasons(chunks) == {0: "length"}
    assert engine.added[0].params.max_tokens == 3


def test_logprobs_name_each_streamed_token(tokenizer, grammars) -> None:
    handler, _ = make_handler(tokenizer, grammars, [Script("Hello there.")])
    chunks = stream(handler, request(stream=True, logprobs=True, top_logprobs=1))
    entries = [e for ch in chunks for c in ch.choices if c.logprobs for e in c.logprobs.content]
    ids = tokenizer.encode("Hello there.", add_special_tokens=False)
    assert (
        [e.token for e in entries]
        == [tokenizer.decode([i]) for i in ids]
        == ["Hello", " there", "."]
    )
    assert {e.logprob for e in entries} == {LOGPROB}
    assert [len(e.top_logprobs) for e in entries] == [1] * len(ids)


@pytest.mark.parametrize(
    ("kind", "status", "code"),
    [("step", 500, "engine_error"), ("request", 500, "internal_error"), ("dead", 503, None)],
)
def test_engine_error_mid_stream_raises_the_api_error(tokenizer, grammars, kind, status, code):
    script = Script("Hello there, friend.", error=("boom", kind), error_after=2)
    handler, engine = make_handler(tokenizer, grammars, [script])

    async def go() -> tuple[str, OpenAIError]:
        seen = ""
        chunks = await handler.stream(request(stream=True))  # the first token arrived
        with pytest.raises(OpenAIError) as info:
            async for chunk in chunks:
                seen += "".join(c.delta.content or "" for c in chunk.choices)
        return seen, info.value

    seen, err = asyncio.run(go())
    assert seen == tokenizer.decode(
        tokenizer.encode("Hello there, friend.", add_special_tokens=False)[:2]
    )
    body = err.response().body()["error"]
    assert err.status_code == status
    assert body["code"] == (code or "engine_unavailable")
    if kind == "dead":
        assert "boom" in body["message"]  # the engine's reason reaches the client
    else:
        assert "boom" not in body["message"]  # an internal failure stays opaque


def test_engine_error_before_the_first_token_raises_before_any_chunk(tokenizer, grammars) -> None:
    script = Script("Hello", error=("forward pass failed", "step"), error_after=0)
    handler, _ = make_handler(tokenizer, grammars, [script])
    with pytest.raises(OpenAIError) as streamed:
        run(handler.stream(request(stream=True)))
    with pytest.raises(OpenAIError) as whole:
        run(handler.complete(request()))
    assert streamed.value.status_code == whole.value.status_code == 500
    assert streamed.value.code == whole.value.code == "engine_error"


def test_a_dead_engine_is_503_engine_unavailable(tokenizer, grammars) -> None:
    handler, engine = make_handler(tokenizer, grammars, [Script("Hi")], dead="the loop died")
    with pytest.raises(OpenAIError) as info:
        run(handler.stream(request(stream=True)))
    assert info.value.status_code == 503 and info.value.code == "engine_unavailable"
    assert "the loop died" in str(info.value)
    assert engine.streams == []


def test_a_refused_choice_closes_the_choices_already_queued(tokenizer, grammars) -> None:
    scripts = [Script("Hello there."), Script(refused=True)]
    handler, engine = make_handler(tokenizer, grammars, scripts)
    with pytest.raises(RequestRejected):
        run(handler.stream(request(stream=True, n=2)))
    assert len(engine.added) == 2 and engine.streams[0].aborted


def test_a_prompt_over_the_context_is_refused_before_the_engine(tokenizer, grammars) -> None:
    handler, engine = make_handler(tokenizer, grammars, [Script("Hi")], max_model_len=16)
    with pytest.raises(OpenAIError) as info:
        run(handler.complete(request()))
    assert info.value.code == "context_length_exceeded" and info.value.param == "messages"
    assert "maximum context length is 16 tokens" in str(info.value)
    assert engine.added == []


def test_tools_need_a_tool_parser(tokenizer, grammars) -> None:
    handler, engine = make_handler(tokenizer, grammars, [Script("Hi")], tool_parser=None)
    with pytest.raises(OpenAIError) as info:
        run(handler.complete(request(tools=TOOLS)))
    assert info.value.param == "tools" and info.value.status_code == 400
    assert f"model {MODEL} does not support tools" in str(info.value)
    assert engine.added == []


@pytest.mark.parametrize(
    ("texts", "fields"),
    [
        (["Sure. " + CALL], {"tools": TOOLS}),
        (["Alpha beta gamma.", "One two three."], {"n": 2, "logprobs": True}),
        (["One two. Three four."], {"stop": ["Three"]}),
    ],
)
def test_the_non_streamed_answer_is_the_stream_folded(tokenizer, grammars, texts, fields) -> None:
    scripts = [Script(t) for t in texts]
    streamer, _ = make_handler(tokenizer, grammars, scripts)
    chunks = stream(
        streamer, request(stream=True, stream_options={"include_usage": True}, **fields)
    )
    completer, _ = make_handler(tokenizer, grammars, scripts)
    whole = run(completer.complete(request(**fields)))
    assert whole.object == "chat.completion" and whole.model == MODEL
    assert whole.usage == chunks[-1].usage
    for choice in whole.choices:
        i = choice.index
        assert (choice.message.content or "") == content(chunks, i)
        assert choice.finish_reason == finish_reasons(chunks)[i]
        streamed_calls = [
            t for ch in chunks for c in ch.choices if c.index == i for t in c.delta.tool_calls or []
        ]
        calls = choice.message.tool_calls or []
        assert [c["function"]["name"] for c in calls] == [
            t["function"]["name"] for t in streamed_calls if "name" in t["function"]
        ]
        assert "".join(c["function"]["arguments"] for c in calls) == "".join(
            t["function"]["arguments"] for t in streamed_calls
        )
        if fields.get("logprobs"):
            streamed_lps = [
                e
                for ch in chunks
                for c in ch.choices
                if c.index == i and c.logprobs
                for e in c.logprobs.content
            ]
            assert choice.logprobs is not None and choice.logprobs.content == streamed_lps


def test_a_lora_request_reports_the_adapter_and_runs_under_it(tokenizer, grammars) -> None:
    handler, engine = make_handler(tokenizer, grammars, [Script("Hello.")])
    whole = run(handler.complete(request(), lora="sql-adapter"))
    assert whole.model == "sql-adapter"
    assert whole.choices[0].message.content == "Hello."
    assert engine.added[0].params.lora == "sql-adapter"
