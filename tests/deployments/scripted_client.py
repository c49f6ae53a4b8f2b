"""A scripted `EngineClient` for unit tests of the replica: no model, no engine thread, no Ray.

Each request the handlers queue takes the next `Script` and streams the script's text as
`RequestOutput`s, token ids from the real tokenizer, as `engine.async_engine.AsyncEngine` would
hand them back: `tokens_per_step` tokens per output, logprobs when the sampling parameters ask
for them, prompt logprobs on the first output, `length` when `max_tokens` cuts the script, and
an error output (`finish_reason="error"`, `error_kind`) where the script fails.

The Serve and engine tests script one layer lower instead: `tests/scripted_engine.py` and
`tests/faulty_engine.py` are `LLMEngine` subclasses under the real `AsyncEngine` (a deployment's
`engine_class`), which run the real model and test the engine thread and Ray paths this client
leaves out.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from engine.llm_engine import EngineStats
from engine.multimodal.inputs import MediaItem
from engine.outputs import ErrorKind, RequestOutput, TokenLogprob
from engine.request_stats import SampleGroup
from engine.request_stream import EngineDead, RequestRejected
from engine.sampling_params import SamplingParams

LOGPROB = -0.25
"""The log-probability a scripted token is reported with."""


@dataclass(frozen=True)
class Script:
    """What the engine writes for one request.

    Attributes:
        text: the output, encoded with the client's tokenizer.
        finish_reason: the last output's (`stop` or `length`), unless `max_tokens` cuts the
            script first (`length`).
        tokens_per_step: tokens per output (speculative decoding hands back runs of them).
        error: (message, kind): the request fails after `error_after` outputs.
        error_after: outputs streamed before the error.
        refused: `add` raises `RequestRejected` for this request.
    """

    text: str = ""
    finish_reason: str = "stop"
    tokens_per_step: int = 1
    error: tuple[str, ErrorKind] | None = None
    error_after: int = 0
    refused: bool = False


@dataclass(frozen=True)
class Added:
    """One request as the handler queued it."""

    request_id: str
    prompt: list[int]
    params: SamplingParams
    group: SampleGroup | None
    media: tuple[MediaItem, ...] = ()


class ScriptedStream:
    """The outputs of one scripted request (`OutputStream`); each waits one loop turn, so
    several choices interleave as one engine step's outputs do."""

    def __init__(self, outputs: list[RequestOutput]) -> None:
        self.outputs = outputs
        self.read = 0
        self.closed = False

    def __aiter__(self) -> ScriptedStream:
        return self

    async def __anext__(self) -> RequestOutput:
        if self.closed or self.read == len(self.outputs):
            raise StopAsyncIteration
        await asyncio.sleep(0)
        self.read += 1
        return self.outputs[self.read - 1]

    @property
    def aborted(self) -> bool:
        """Closed before its last output was read (the engine would abort the request)."""
        return self.closed and self.read < len(self.outputs)

    async def aclose(self) -> None:
        """Stop the stream."""
        self.closed = True


@dataclass
class ScriptedClient:
    """An `EngineClient` that plays `scripts`, one per request in the order they are queued
    (a single script plays for every request).

    Attributes:
        tokenizer: the real tokenizer, which the scripts are encoded with.
        scripts: what each request writes.
        max_model_len: the context length reported to the handlers.
        dead: the engine loop's end: `add` raises `EngineDead` with it.
        refused_loras: adapter name -> why `load_lora` refuses it.
        busy_loras: adapters whose `unload_lora` refuses (requests still use them).
    """

    tokenizer: Any
    scripts: list[Script] = field(default_factory=lambda: [Script()])
    max_model_len: int = 2048
    dead: str | None = None
    refused_loras: dict[str, str] = field(default_factory=dict)
    busy_loras: set[str] = field(default_factory=set)
    added: list[Added] = field(default_factory=list)
    streams: list[ScriptedStream] = field(default_factory=list)
    loras: dict[str, str] = field(default_factory=dict)
    """Loaded adapters: name -> path."""

    @property
    def vocab_size(self) -> int:
        """The tokenizer's vocabulary, as the logits' width."""
        return len(self.tokenizer)

    async def add(
        self,
        request_id: str,
        prompt_token_ids: list[int],
        params: SamplingParams,
        group: SampleGroup | None = None,
        media: tuple[MediaItem, ...] = (),
    ) -> ScriptedStream:
        """Queue a request: the next script, streamed (see the class)."""
        if self.dead is not None:
            raise EngineDead(self.dead)
        script = self.scripts[min(len(self.added), len(self.scripts) - 1)]
        self.added.append(Added(request_id, prompt_token_ids, params, group, media))
        if script.refused:
            raise RequestRejected(f"scripted refusal of {request_id}")
        stream = ScriptedStream(self._outputs(request_id, prompt_token_ids, params, script))
        self.streams.append(stream)
        return stream

    def _outputs(
        self, rid: str, prompt: list[int], params: SamplingParams, script: Script
    ) -> list[RequestOutput]:
        ids = self.tokenizer.encode(script.text, add_special_tokens=False)
        reason = script.finish_reason
        if len(ids) > params.max_tokens:
            ids, reason = ids[: params.max_tokens], "length"
        steps = [
            ids[i : i + script.tokens_per_step] for i in range(0, len(ids), script.tokens_per_step)
        ]
        if script.error is not None:
            steps = steps[: script.error_after]
        outs, done = [], 0
        for i, step in enumerate(steps or [[]]):
            done += len(step)
            last = i == len(steps) - 1 and script.error is None
            outs.append(
                RequestOutput(
                    request_id=rid,
                    new_token_ids=tuple(step),
                    finished=last,
                    finish_reason=reason if last else None,
                    num_prompt_tokens=len(prompt),
                    num_output_tokens=done,
                    logprobs=_logprobs(step, params.logprobs),
                    prompt_logprobs=_prompt_logprobs(prompt, params) if i == 0 else None,
                )
            )
        if script.error is not None:
            message, kind = script.error
            failed = RequestOutput(
                request_id=rid,
                new_token_ids=(),
                finished=True,
                finish_reason="error",
                num_prompt_tokens=len(prompt),
                num_output_tokens=done,
                error=message,
                error_kind=kind,
            )
            outs = [*outs[: script.error_after], failed]
        return outs

    async def load_lora(self, name: str, path: str) -> None:
        """Load an adapter, unless `refused_loras` names it.

        Raises:
            ValueError: with the `refused_loras` reason.
        """
        if name in self.refused_loras:
            raise ValueError(self.refused_loras[name])
        self.loras[name] = path

    async def unload_lora(self, name: str) -> None:
        """Unload an adapter, unless it is in `busy_loras`.

        Raises:
            ValueError: the adapter is unknown or busy.
        """
        if name not in self.loras or name in self.busy_loras:
            raise ValueError(f"LoRA adapter {name!r} is unknown or in use")
        del self.loras[name]

    def dead_reason(self) -> str | None:
        """`dead`."""
        return self.dead

    def stats(self) -> EngineStats:
        """An idle engine's figures."""
        return EngineStats(0, 0, 0.0, 64, 64, 0, 0, 0)

    def shutdown(self) -> None:
        """Mark the engine dead: later requests raise `EngineDead`."""
        self.dead = "the engine was shut down"


def _logprobs(step: list[int], top: int | None) -> tuple[TokenLogprob, ...] | None:
    if top is None:
        return None
    return tuple(TokenLogprob(t, LOGPROB, ((t, LOGPROB),)[:top]) for t in step)


def _prompt_logprobs(prompt: list[int], params: SamplingParams) -> tuple[TokenLogprob, ...] | None:
    if params.prompt_logprobs is None:
        return None
    return tuple(TokenLogprob(t, None if i == 0 else LOGPROB) for i, t in enumerate(prompt))
