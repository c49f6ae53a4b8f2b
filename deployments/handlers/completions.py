"""`/v1/completions` (legacy) on one model: prompts, echo, logprobs, responses and chunks."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from deployments.engine_client import EngineClient
from deployments.handlers.choices import (
    ChoiceDelta,
    admit,
    first_then_rest,
    merge_choices,
    run_choice,
)
from deployments.handlers.preparation import Preparer
from deployments.prompting.engine_inputs import completion_prompts, sampling_params
from deployments.protocol.errors import OpenAIError
from deployments.protocol.requests import CompletionRequest
from deployments.protocol.responses import (
    Completion,
    CompletionChoice,
    CompletionLogprobs,
    Usage,
)
from deployments.streaming.logprobs import append_completion_logprobs
from engine.sampling_params import SamplingParams


class CompletionHandler:
    """Serves legacy completions for one model. Choice `p * n + i` is sample `i` of prompt `p`.

    Args:
        engine: the replica's engine.
        tokenizer: the checkpoint's tokenizer.
        model_id: the base model's id, reported in responses (a LoRA adapter's request
            reports the adapter's).
        preparer: runs tokenisation off the event loop, bounded in time.
    """

    def __init__(
        self, engine: EngineClient, tokenizer: Any, model_id: str, preparer: Preparer
    ) -> None:
        self.engine = engine
        self.preparer = preparer
        self.tokenizer = tokenizer
        self.model_id = model_id

    def _prepare(
        self, request: CompletionRequest, lora: str | None
    ) -> list[tuple[list[int], SamplingParams]]:
        """Prompt tokens and sampling parameters of every choice, `p * n + i`, under LoRA
        adapter `lora` (None: the base model) (off the loop).

        Raises:
            OpenAIError: 400 for an unsupported field, an empty or out-of-vocabulary prompt, or
                one that does not fit the context.
        """
        if request.suffix:
            raise OpenAIError("suffix is not supported", param="suffix")
        n = request.n or 1
        if request.best_of is not None and request.best_of != n:
            raise OpenAIError("best_of must equal n (or be omitted)", param="best_of")
        vocab = self.engine.vocab_size
        out = []
        for prompt in completion_prompts(self.tokenizer, request, vocab):
            for i in range(n):
                params = sampling_params(
                    request, len(prompt), self.engine.max_model_len, vocab, i, lora=lora
                )
                out.append((prompt, params))
        return out

    async def _choices(
        self, request: CompletionRequest, lora: str | None
    ) -> tuple[list[list[int]], AsyncIterator[ChoiceDelta]]:
        """Prepare the request, queue its choices and wait for the first delta (raises before
        any output)."""
        prepared = await self.preparer.run(lambda: self._prepare(request, lora))
        streams = await admit(self.engine, prepared)
        stops = request.stop_list()
        prompts = [prompt for prompt, _ in prepared[:: request.n or 1]]
        merged = merge_choices(
            [
                run_choice(s, self.tokenizer, i, prompt, stops)
                for i, (s, (prompt, _)) in enumerate(zip(streams, prepared))
            ]
        )
        return prompts, await first_then_rest(merged)

    def _echo(self, prompt: list[int]) -> str:
        return self.tokenizer.decode(prompt, skip_special_tokens=False)

    async def complete(self, request: CompletionRequest, lora: str | None = None) -> Completion:
        """Non-streamed completion: the streamed chunks, joined; `lora`: the LoRA adapter the
        request runs under (None: the base model), whose id the response reports."""
        choices: dict[int, CompletionChoice] = {}
        usage = Usage.of(0, 0)
        prompts, deltas = await self._choices(request, lora)
        served = lora or self.model_id
        async for chunk in self._chunks(request, prompts, deltas, True, served):
            if chunk.usage is not None:
                usage = chunk.usage
            for c in chunk.choices:
                prev = choices.setdefault(c.index, CompletionChoice(index=c.index, text=""))
                prev.text += c.text
                prev.finish_reason = c.finish_reason or prev.finish_reason
                if c.logprobs is not None:
                    lp = prev.logprobs or CompletionLogprobs()
                    lp.tokens += c.logprobs.tokens
                    lp.token_logprobs += c.logprobs.token_logprobs
                    lp.top_logprobs += c.logprobs.top_logprobs
                    lp.text_offset += c.logprobs.text_offset
                    prev.logprobs = lp
        return Completion(
            id=f"cmpl-{uuid.uuid4().hex}",
            created=int(time.time()),
            model=served,
            choices=[choices[i] for i in sorted(choices)],
            usage=usage,
        )

    async def stream(
        self, request: CompletionRequest, lora: str | None = None
    ) -> AsyncIterator[Completion]:
        """Streamed completion (one `text_completion` object per chunk, usage last), returned
        once the engine holds the request; `lora` as for `complete`.

        Raises:
            OpenAIError: invalid request or engine not running, before the first chunk.
        """
        prompts, choices = await self._choices(request, lora)
        include = bool(request.stream_options and request.stream_options.include_usage)
        return self._chunks(request, prompts, choices, include, lora or self.model_id)

    async def _chunks(
        self,
        request: CompletionRequest,
        prompts: list[list[int]],
        choices: AsyncIterator[ChoiceDelta],
        usage_chunk: bool,
        served: str,
    ) -> AsyncIterator[Completion]:
        cid = f"cmpl-{uuid.uuid4().hex}"
        created = int(time.time())
        n = request.n or 1
        want_lp = request.logprobs is not None
        offsets: dict[int, int] = {}
        counts: dict[int, int] = {}
        cached: dict[int, int] = {}  # per prompt: the most any of its n choices found cached
        async for d in choices:
            counts[d.index] = d.num_output_tokens
            cached[d.index // n] = max(cached.get(d.index // n, 0), d.num_cached_tokens)
            text = d.text
            lp = CompletionLogprobs() if want_lp else None
            if d.index not in offsets:  # first delta of this choice
                offsets[d.index] = 0
                if request.echo:
                    prompt = prompts[d.index // n]
                    echo = self._echo(prompt)
                    if lp is not None and d.prompt_logprobs is not None:
                        append_completion_logprobs(self.tokenizer, lp, d.prompt_logprobs, 0)
                    offsets[d.index] = len(echo)
                    text = echo + text
            if lp is not None:
                offsets[d.index] = append_completion_logprobs(
                    self.tokenizer, lp, d.logprobs, offsets[d.index]
                )
            if not text and d.finish_reason is None and not (lp and lp.tokens):
                continue
            yield Completion(
                id=cid,
                created=created,
                model=served,
                choices=[
                    CompletionChoice(
                        index=d.index, text=text, logprobs=lp, finish_reason=d.finish_reason
                    )
                ],
            ).with_timing(d.timing)
        if not usage_chunk:
            return
        prompt_tokens = sum(len(p) for p in prompts)
        yield Completion(
            id=cid,
            created=created,
            model=served,
            choices=[],
            usage=Usage.of(prompt_tokens, sum(counts.values()), sum(cached.values())),
        )
