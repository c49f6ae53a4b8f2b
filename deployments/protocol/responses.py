"""OpenAI response bodies and stream chunks.

Shapes follow the OpenAI API reference: `chat.completion`, `chat.completion.chunk` and the
legacy `text_completion` object. `created` is integer Unix seconds. In stream deltas and
messages, optional extension fields (`reasoning_content`, `tool_calls`, `role` after the first
delta) are left out rather than sent as null, because SDK accumulators concatenate them.
"""

from __future__ import annotations

import time
from typing import Any, Literal, Self

from pydantic import BaseModel, Field, PrivateAttr, model_serializer

from deployments.protocol.preprocess_plan import PreprocessReport
from deployments.streaming.token_timing import TokenTiming


class PromptTokensDetails(BaseModel):
    """Where the prompt's tokens came from."""

    cached_tokens: int = 0
    """Prompt tokens whose KV came from the prefix cache (a part of `prompt_tokens`)."""


class Usage(BaseModel):
    """Token counts: total = prompt + completion; `prompt_tokens_details.cached_tokens` is
    OpenAI's count of prompt tokens served from the (prefix) cache."""

    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: PromptTokensDetails | None = None

    @classmethod
    def of(cls, prompt: int, completion: int, cached: int | None = None) -> Usage:
        """Build from prompt and completion counts (and the cached prompt tokens, if known)."""
        details = PromptTokensDetails(cached_tokens=cached) if cached is not None else None
        return cls(
            prompt_tokens=prompt,
            completion_tokens=completion,
            total_tokens=prompt + completion,
            prompt_tokens_details=details,
        )

    def cached_tokens(self) -> int:
        """Prompt tokens served from the prefix cache (0 when not reported)."""
        details = self.prompt_tokens_details
        return details.cached_tokens if details is not None else 0


class _DropNone(BaseModel):
    """Serialises without keys whose value is None, except those in `_keep`."""

    _keep: tuple[str, ...] = ()

    @model_serializer(mode="wrap")
    def _drop_none(self, handler: Any) -> dict[str, Any]:
        data = handler(self)
        return {k: v for k, v in data.items() if v is not None or k in self._keep}


class TopLogprob(BaseModel):
    """One alternative token."""

    token: str
    logprob: float
    bytes: list[int] | None = None


class ChatTokenLogprob(TopLogprob):
    """A generated token with its alternatives."""

    top_logprobs: list[TopLogprob] = Field(default_factory=list)


class ChoiceLogprobs(BaseModel):
    """`choices[].logprobs` of a chat response."""

    content: list[ChatTokenLogprob] | None = None


class AssistantMessage(_DropNone):
    """`choices[].message`; `content` is always present (null when only tool calls)."""

    _keep = ("content",)
    role: Literal["assistant"] = "assistant"
    content: str | None = None
    reasoning_content: str | None = None
    tool_calls: list[dict[str, Any]] | None = None


class ChatChoice(_DropNone):
    """One choice of a chat completion. `stop_reason` (vLLM's extension, sent only when set):
    the stop string that ended the choice (`finish_reason` `stop`)."""

    _keep = ("logprobs", "finish_reason")
    index: int
    message: AssistantMessage
    logprobs: ChoiceLogprobs | None = None
    finish_reason: str | None = None
    stop_reason: str | None = None


class RouterNotes(BaseModel):
    """A response that carries notes for the router, never part of the JSON body: what gateway
    preprocessing did to its request (the `x-ascend-router-preprocess` header), the replica
    that answered (`x-ascend-router-replica`) and a stream chunk's timestamps
    (`deployments.streaming.token_timing`). The replica sets them on a non-streamed response
    or a stream's first item."""

    _preprocess: PreprocessReport | None = PrivateAttr(None)
    _replica: str | None = PrivateAttr(None)
    _timing: TokenTiming | None = PrivateAttr(None)
    _built: float = PrivateAttr(0.0)

    @property
    def preprocess_report(self) -> PreprocessReport | None:
        """The report, if preprocessing changed the request."""
        return self._preprocess

    def with_preprocess_report(self, report: PreprocessReport | None) -> Self:
        """Attach `report` (in place) and return self."""
        self._preprocess = report
        return self

    @property
    def replica(self) -> str | None:
        """The id of the replica that answered (Ray Serve's `ReplicaID.unique_id`), once set."""
        return self._replica

    def from_replica(self, replica: str) -> Self:
        """Name `replica` as the one that answered (in place) and return self."""
        self._replica = replica
        return self

    def with_timing(self, timing: TokenTiming | None) -> Self:
        """Attach `timing` (in place), the chunk stamped as built now, and return self."""
        self._timing, self._built = timing, time.monotonic()
        return self

    def timing_comment(self, encoded: float) -> str | None:
        """The replica's timestamp comment of a stamped stream chunk whose SSE bytes were made
        at `encoded` (`TokenTiming.comment`); None when not stamped."""
        return None if self._timing is None else self._timing.comment(self._built, encoded)


class ChatCompletion(RouterNotes):
    """Body of a non-streamed chat completion."""

    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[ChatChoice]
    usage: Usage


class DeltaMessage(_DropNone):
    """`choices[].delta` of a chunk."""

    role: Literal["assistant"] | None = None
    content: str | None = None
    reasoning_content: str | None = None
    tool_calls: list[dict[str, Any]] | None = None


class ChunkChoice(_DropNone):
    """One choice of a chat stream chunk; `stop_reason` as in `ChatChoice`, on the last."""

    _keep = ("logprobs", "finish_reason")
    index: int
    delta: DeltaMessage
    logprobs: ChoiceLogprobs | None = None
    finish_reason: str | None = None
    stop_reason: str | None = None


class ChatCompletionChunk(RouterNotes):
    """One server-sent event of a streamed chat completion."""

    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int
    model: str
    choices: list[ChunkChoice]
    usage: Usage | None = None


class CompletionLogprobs(BaseModel):
    """Legacy `logprobs` object of `/v1/completions`; the first echoed prompt token is null."""

    tokens: list[str] = Field(default_factory=list)
    token_logprobs: list[float | None] = Field(default_factory=list)
    top_logprobs: list[dict[str, float] | None] = Field(default_factory=list)
    text_offset: list[int] = Field(default_factory=list)


class CompletionChoice(BaseModel):
    """One choice of a legacy completion (also used, partially filled, in stream chunks)."""

    index: int
    text: str
    logprobs: CompletionLogprobs | None = None
    finish_reason: str | None = None


class Completion(RouterNotes):
    """Body of a legacy completion, and of each of its stream chunks."""

    id: str
    object: Literal["text_completion"] = "text_completion"
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: Usage | None = None


class ModelCard(BaseModel):
    """One entry of `GET /v1/models`, and the body of `GET /v1/models/{model}`.

    `root` and `parent` are as vLLM reports them: `root` is the checkpoint a served model was
    loaded from (None for an alias), `parent` the model an adapter or alias derives from (None
    for a base model; for an alias, None too, as it may route to several models).
    """

    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str = "ascend-router"
    root: str | None = None
    parent: str | None = None
    max_model_len: int | None = None


class ModelList(BaseModel):
    """Body of `GET /v1/models`."""

    object: Literal["list"] = "list"
    data: list[ModelCard]
