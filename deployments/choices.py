"""One request choice as a stream of text deltas: engine tokens -> detokenizer -> stop strings."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from deployments.detokenizer import IncrementalDetokenizer
from deployments.protocol.errors import OpenAIError
from deployments.stop_strings import StopStringMatcher
from engine.async_engine import AsyncEngine
from engine.outputs import TokenLogprob
from engine.sampling_params import SamplingParams


@dataclass(frozen=True)
class ChoiceDelta:
    """What one choice produced in one engine step.

    Attributes:
        index: choice index (0..n-1).
        text: text that is now safe to send (multi-byte complete, no stop-string prefix).
        logprobs: logprobs of the tokens of this step (empty unless asked for).
        prompt_logprobs: prompt-token logprobs, on the first delta only, when asked for.
        finish_reason: `stop` or `length` on the last delta, else None.
        num_prompt_tokens: prompt length in tokens.
        num_output_tokens: tokens generated so far.
    """

    index: int
    text: str
    logprobs: tuple[TokenLogprob, ...]
    prompt_logprobs: tuple[TokenLogprob, ...] | None
    finish_reason: str | None
    num_prompt_tokens: int
    num_output_tokens: int


async def run_choice(
    engine: AsyncEngine,
    tokenizer: Any,
    index: int,
    prompt_ids: list[int],
    params: SamplingParams,
    stops: list[str],
) -> AsyncIterator[ChoiceDelta]:
    """Generate one choice. Closing the iterator aborts the engine request.

    Raises:
        OpenAIError: 500 when the engine failed the request.
    """
    detok = IncrementalDetokenizer(tokenizer, prefix_ids=prompt_ids)
    matcher = StopStringMatcher(stops)
    rid = uuid.uuid4().hex
    async for out in engine.generate(rid, prompt_ids, params):
        if out.error is not None:
            raise OpenAIError(f"generation failed: {out.error}", status_code=500)
        text = matcher.push(detok.push(out.new_token_ids))
        reason = out.finish_reason if out.finished else None
        if out.finished and not matcher.stopped:
            text += matcher.push(detok.flush())
            text += matcher.flush()
        if matcher.stopped:
            reason = "stop"
        if reason == "abort":
            raise OpenAIError("the model server is shutting down", status_code=503)
        yield ChoiceDelta(
            index,
            text,
            out.logprobs or (),
            out.prompt_logprobs,
            reason,
            out.num_prompt_tokens,
            out.num_output_tokens,
        )
        if reason is not None:
            return


async def merge_choices(streams: list[AsyncIterator[ChoiceDelta]]) -> AsyncIterator[ChoiceDelta]:
    """Interleave several choices' deltas in arrival order; closing cancels them all."""
    if len(streams) == 1:
        async for item in streams[0]:
            yield item
        return
    queue: asyncio.Queue[ChoiceDelta | BaseException | None] = asyncio.Queue()

    async def pump(stream: AsyncIterator[ChoiceDelta]) -> None:
        try:
            async for item in stream:
                await queue.put(item)
            await queue.put(None)
        except Exception as exc:  # handed to the consumer, which re-raises it
            await queue.put(exc)

    tasks = [asyncio.create_task(pump(s)) for s in streams]
    try:
        remaining = len(tasks)
        while remaining:
            item = await queue.get()
            if item is None:
                remaining -= 1
            elif isinstance(item, BaseException):
                raise item
            else:
                yield item
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
