"""One request choice as a stream of text deltas: admission, then engine tokens ->
detokenizer -> stop strings; engine failures become OpenAI errors by what failed."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from typing import Any

from deployments.engine_client import EngineClient, OutputStream
from deployments.protocol.errors import (
    ENGINE_ERROR,
    OpenAIError,
    engine_unavailable,
    internal_error,
)
from deployments.protocol.request_id import current_request_id
from deployments.streaming.detokenizer import IncrementalDetokenizer
from deployments.streaming.stop_strings import StopStringMatcher
from deployments.streaming.token_timing import TokenTiming
from engine.multimodal.inputs import MediaItem
from engine.outputs import RequestOutput, TokenLogprob
from engine.request_stats import SampleGroup
from engine.request_stream import EngineDead
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
        num_cached_tokens: prompt tokens whose KV came from the prefix cache.
        stop_reason: the stop string that ended the choice, on the last delta.
        timing: when the delta's tokens left the engine and reached the replica's event loop
            (`deployments.streaming.token_timing`).
    """

    index: int
    text: str
    logprobs: tuple[TokenLogprob, ...]
    prompt_logprobs: tuple[TokenLogprob, ...] | None
    finish_reason: str | None
    num_prompt_tokens: int
    num_output_tokens: int
    num_cached_tokens: int = 0
    stop_reason: str | None = None
    timing: TokenTiming | None = None


def engine_failure(out: RequestOutput) -> OpenAIError:
    """The error a client gets for an engine output that ended in an error, by what failed."""
    if out.error_kind == "dead":
        return engine_unavailable(out.error or "the engine loop ended")
    if out.error_kind == "step":
        return OpenAIError(
            "the engine step that carried this request failed", status_code=500, code=ENGINE_ERROR
        )
    return internal_error(current_request_id(), "the model replica")


def sample_groups(
    requests: list[tuple[list[int], SamplingParams]],
) -> list[SampleGroup | None]:
    """The sample group of each (prompt, params) pair: consecutive pairs that share one prompt
    list (the `n` choices of a prompt, as the handlers build them) form one group; a prompt
    sampled once has none."""
    groups: list[SampleGroup | None] = []
    start = 0
    for end in range(1, len(requests) + 1):
        if end == len(requests) or requests[end][0] is not requests[start][0]:
            size = end - start
            groups.extend([SampleGroup(size) if size > 1 else None] * size)
            start = end
    return groups


async def admit(
    engine: EngineClient,
    requests: list[tuple[list[int], SamplingParams]],
    media: tuple[MediaItem, ...] = (),
) -> list[OutputStream]:
    """Queue one engine request per (prompt, params) pair; return once the engine holds all.
    The choices of one prompt share its list object (`sample_groups`).

    Raises:
        OpenAIError: 503 `engine_unavailable` when the engine loop is not running (then none
            of them stays queued).
    """
    streams: list[OutputStream] = []
    rid = current_request_id()  # engine ids carry it, so engine log lines name the request
    try:
        for (prompt, params), group in zip(requests, sample_groups(requests)):
            engine_rid = f"{rid}-{uuid.uuid4().hex[:8]}"
            streams.append(await engine.add(engine_rid, prompt, params, group, media))
    except BaseException as exc:
        for stream in streams:
            await stream.aclose()
        if isinstance(exc, EngineDead):
            raise engine_unavailable(str(exc)) from None
        raise
    return streams


async def run_choice(
    stream: OutputStream,
    tokenizer: Any,
    index: int,
    prompt_ids: list[int],
    stops: list[str],
) -> AsyncIterator[ChoiceDelta]:
    """Turn one admitted engine request into text deltas. Closing the iterator aborts it.

    Raises:
        OpenAIError: when the engine failed the request (`engine_failure`), or 503 when the
            replica is shutting down.
    """
    detok = IncrementalDetokenizer(tokenizer, prefix_ids=prompt_ids)
    matcher = StopStringMatcher(stops)
    try:
        async for out in stream:
            received = time.monotonic()
            if out.error is not None:
                raise engine_failure(out)
            text, out = _push_tokens(out, detok, matcher)
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
                out.num_cached_tokens,
                matcher.matched,
                TokenTiming(out.step_started_at, out.step_ended_at, received),
            )
            if reason is not None:
                return
    finally:
        await stream.aclose()


def _push_tokens(
    out: RequestOutput, detok: IncrementalDetokenizer, matcher: StopStringMatcher
) -> tuple[str, RequestOutput]:
    """The text of `out`'s tokens that may be sent, and `out` as the client sees it.

    An output of several tokens (speculative decoding accepts a run of them in one step) is
    read token by token when stop strings are set: if one completes a stop string, the tokens
    after it are dropped from the output (its logprobs and token count too), exactly as
    without speculation, where generation would have ended at that token.
    """
    tokens = out.new_token_ids
    if len(tokens) <= 1 or not matcher.stops:
        return matcher.push(detok.push(tokens)), out
    text = ""
    for i, token in enumerate(tokens):
        text += matcher.push(detok.push((token,)))
        if matcher.stopped:
            dropped = len(tokens) - i - 1
            lps = out.logprobs[: i + 1] if out.logprobs is not None else None
            out = replace(
                out,
                new_token_ids=tokens[: i + 1],
                logprobs=lps,
                num_output_tokens=out.num_output_tokens - dropped,
            )
            break
    return text, out


async def first_then_rest(items: AsyncIterator[ChoiceDelta]) -> AsyncIterator[ChoiceDelta]:
    """Wait for the first delta (the first token, or the engine's failure, which raises here),
    then return an iterator over all of them.

    A stream whose first item waits for this covers the engine's first step too: a step that
    fails before the first token reaches the router before any SSE byte, and it may fall over.
    """
    try:
        first = await anext(items)
    except StopAsyncIteration:
        return items
    except BaseException:
        await items.aclose()  # type: ignore[attr-defined]
        raise

    async def chained() -> AsyncIterator[ChoiceDelta]:
        yield first
        async for item in items:
            yield item

    return chained()


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
