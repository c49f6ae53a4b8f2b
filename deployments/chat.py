"""`/v1/chat/completions` on one model: prompt, choices, response objects and chunks."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from deployments.choices import ChoiceDelta, merge_choices, run_choice
from deployments.logprobs import chat_logprobs
from deployments.prompts import render_chat, sampling_params
from deployments.protocol.requests import ChatCompletionRequest
from deployments.protocol.responses import (
    AssistantMessage,
    ChatChoice,
    ChatCompletion,
    ChatCompletionChunk,
    ChoiceLogprobs,
    ChunkChoice,
    DeltaMessage,
    Usage,
)
from engine.async_engine import AsyncEngine


class ChatHandler:
    """Serves chat completions for one model.

    Args:
        engine: the replica's engine.
        tokenizer: the checkpoint's tokenizer (with its chat template).
        model_id: the id reported in responses.
    """

    def __init__(self, engine: AsyncEngine, tokenizer: Any, model_id: str) -> None:
        self.engine = engine
        self.tokenizer = tokenizer
        self.model_id = model_id

    def _choices(self, request: ChatCompletionRequest) -> AsyncIterator[ChoiceDelta]:
        """Validate and start the request's choices (raises OpenAIError before any output)."""
        prompt = render_chat(self.tokenizer, request)
        n = request.n or 1
        streams = []
        for i in range(n):
            params = sampling_params(
                request, len(prompt), self.engine.max_model_len, self.engine.engine.vocab_size, i
            )
            self.engine.check_request(prompt, params)
            streams.append(
                run_choice(self.engine, self.tokenizer, i, prompt, params, request.stop_list())
            )
        return merge_choices(streams)

    async def complete(self, request: ChatCompletionRequest) -> ChatCompletion:
        """Non-streamed completion: the streamed deltas, joined."""
        n = request.n or 1
        texts = [""] * n
        lps: list[list[Any]] = [[] for _ in range(n)]
        reasons: list[str | None] = [None] * n
        counts = [0] * n
        prompt_tokens = 0
        async for d in self._choices(request):
            texts[d.index] += d.text
            lps[d.index].extend(chat_logprobs(self.tokenizer, d.logprobs))
            reasons[d.index] = d.finish_reason or reasons[d.index]
            counts[d.index] = d.num_output_tokens
            prompt_tokens = d.num_prompt_tokens
        choices = [
            ChatChoice(
                index=i,
                message=AssistantMessage(content=texts[i]),
                logprobs=ChoiceLogprobs(content=lps[i]) if request.logprobs else None,
                finish_reason=reasons[i],
            )
            for i in range(n)
        ]
        return ChatCompletion(
            id=f"chatcmpl-{uuid.uuid4().hex}",
            created=int(time.time()),
            model=self.model_id,
            choices=choices,
            usage=Usage.of(prompt_tokens, sum(counts)),
        )

    def stream(self, request: ChatCompletionRequest) -> AsyncIterator[ChatCompletionChunk]:
        """Streamed completion; validation errors raise here, before the first chunk."""
        choices = self._choices(request)
        return self._chunks(request, choices)

    async def _chunks(
        self, request: ChatCompletionRequest, choices: AsyncIterator[ChoiceDelta]
    ) -> AsyncIterator[ChatCompletionChunk]:
        cid = f"chatcmpl-{uuid.uuid4().hex}"
        created = int(time.time())

        def chunk(items: list[ChunkChoice], usage: Usage | None = None) -> ChatCompletionChunk:
            return ChatCompletionChunk(
                id=cid, created=created, model=self.model_id, choices=items, usage=usage
            )

        n = request.n or 1
        yield chunk(
            [ChunkChoice(index=i, delta=DeltaMessage(role="assistant", content="")) for i in range(n)]
        )
        counts = [0] * n
        prompt_tokens = 0
        async for d in choices:
            counts[d.index] = d.num_output_tokens
            prompt_tokens = d.num_prompt_tokens
            if not d.text and d.finish_reason is None and not (request.logprobs and d.logprobs):
                continue
            lp = (
                ChoiceLogprobs(content=chat_logprobs(self.tokenizer, d.logprobs))
                if request.logprobs
                else None
            )
            delta = DeltaMessage(content=d.text) if d.text else DeltaMessage()
            yield chunk(
                [ChunkChoice(index=d.index, delta=delta, logprobs=lp, finish_reason=d.finish_reason)]
            )
        if request.stream_options and request.stream_options.include_usage:
            yield chunk([], Usage.of(prompt_tokens, sum(counts)))
