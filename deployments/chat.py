"""`/v1/chat/completions` on one model: prompt, choices, tool calls, responses and chunks."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from deployments.chat_template import ChatTemplate
from deployments.choices import ChoiceDelta, merge_choices, run_choice
from deployments.logprobs import chat_logprobs
from deployments.prompts import sampling_params
from deployments.protocol.errors import OpenAIError
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
from deployments.structured_output import (
    GrammarFactory,
    response_format_schema,
    tool_choice_schema,
)
from deployments.tool_history import normalize_history
from deployments.tool_output import ToolOutput, ToolSetup
from deployments.toolcalls.assemble import accumulate
from deployments.toolcalls.choice import ToolChoice
from engine.async_engine import AsyncEngine


@dataclass(frozen=True)
class ChatSettings:
    """Per-model chat behaviour from the deployment config.

    Attributes:
        model_id: the id reported in responses.
        tool_parser: the family's tool-call parser name.
        strict_tool_history: reject histories whose tool calls and results do not pair up.
    """

    model_id: str
    tool_parser: str
    strict_tool_history: bool = True


class ChatHandler:
    """Serves chat completions for one model.

    Args:
        engine: the replica's engine.
        tokenizer: the checkpoint's tokenizer.
        template: chat-template renderer (tool-capable).
        grammars: compiles constrained-decoding grammars for this tokenizer.
        settings: per-model settings.
    """

    def __init__(
        self,
        engine: AsyncEngine,
        tokenizer: Any,
        template: ChatTemplate,
        grammars: GrammarFactory,
        settings: ChatSettings,
    ) -> None:
        self.engine = engine
        self.tokenizer = tokenizer
        self.template = template
        self.grammars = grammars
        self.settings = settings

    def _tools(self, request: ChatCompletionRequest) -> tuple[ToolChoice, list[Any] | None]:
        try:
            choice = ToolChoice.parse(request.tool_choice, request.tools)
        except ValueError as exc:
            raise OpenAIError(str(exc), param="tool_choice") from None
        for i, tool in enumerate(request.tools or ()):
            fn = tool.get("function")
            if tool.get("type") != "function" or not isinstance(fn, dict) or not fn.get("name"):
                raise OpenAIError(
                    "each tool must be {'type': 'function', 'function': {'name': ...}}",
                    param=f"tools[{i}]",
                )
        return choice, (request.tools if choice.mode != "none" else None)

    def _start(
        self, request: ChatCompletionRequest
    ) -> tuple[ToolSetup | None, AsyncIterator[ChoiceDelta]]:
        """Validate and start the choices (raises OpenAIError before any output)."""
        choice, tools = self._tools(request)
        messages = normalize_history(request.messages, self.settings.strict_tool_history)
        if request.continue_final_message is False and messages[-1]["role"] == "assistant":
            messages.append({"role": "user", "content": ""})
        text = self.template.render(messages, tools)
        prompt = self.tokenizer.encode(text, add_special_tokens=False)
        schema, param = (
            tool_choice_schema(choice, request.tools or [], request.parallel_tool_calls),
            "tools",
        )
        if schema is None:
            schema, param = response_format_schema(request.response_format), "response_format"
        setup = None
        if request.tools:
            setup = ToolSetup(
                choice,
                self.settings.tool_parser,
                request.tools,
                text[-64:],
                constrained=choice.mode in ("required", "function"),
            )
        streams = []
        for i in range(request.n or 1):
            constraint = self.grammars.constraint(schema, param) if schema is not None else None
            params = sampling_params(
                request,
                len(prompt),
                self.engine.max_model_len,
                self.engine.engine.vocab_size,
                i,
                constraint,
            )
            self.engine.check_request(prompt, params)
            streams.append(
                run_choice(self.engine, self.tokenizer, i, prompt, params, request.stop_list())
            )
        return setup, merge_choices(streams)

    async def complete(self, request: ChatCompletionRequest) -> ChatCompletion:
        """Non-streamed completion: the streamed deltas, accumulated."""
        n = request.n or 1
        deltas: list[list[dict[str, Any]]] = [[] for _ in range(n)]
        lps: list[list[Any]] = [[] for _ in range(n)]
        reasons: list[str | None] = [None] * n
        usage = Usage.of(0, 0)
        async for chunk in self._chunks(request, *self._start(request), usage_chunk=True):
            if chunk.usage is not None:
                usage = chunk.usage
            for c in chunk.choices:
                deltas[c.index].append(c.delta.model_dump())
                if c.logprobs is not None and c.logprobs.content:
                    lps[c.index].extend(c.logprobs.content)
                reasons[c.index] = c.finish_reason or reasons[c.index]
        choices = []
        for i in range(n):
            msg = accumulate(deltas[i])
            if not request.tools:
                msg["content"] = "".join(d.get("content") or "" for d in deltas[i])
            choices.append(
                ChatChoice(
                    index=i,
                    message=AssistantMessage(
                        content=msg["content"],
                        reasoning_content=msg["reasoning_content"],
                        tool_calls=msg["tool_calls"] or None,
                    ),
                    logprobs=ChoiceLogprobs(content=lps[i]) if request.logprobs else None,
                    finish_reason=reasons[i],
                )
            )
        return ChatCompletion(
            id=f"chatcmpl-{uuid.uuid4().hex}",
            created=int(time.time()),
            model=self.settings.model_id,
            choices=choices,
            usage=usage,
        )

    def stream(self, request: ChatCompletionRequest) -> AsyncIterator[ChatCompletionChunk]:
        """Streamed completion; validation errors raise here, before the first chunk."""
        include = bool(request.stream_options and request.stream_options.include_usage)
        return self._chunks(request, *self._start(request), usage_chunk=include)

    async def _chunks(
        self,
        request: ChatCompletionRequest,
        setup: ToolSetup | None,
        choices: AsyncIterator[ChoiceDelta],
        usage_chunk: bool,
    ) -> AsyncIterator[ChatCompletionChunk]:
        cid = f"chatcmpl-{uuid.uuid4().hex}"
        created = int(time.time())

        def chunk(items: list[ChunkChoice], usage: Usage | None = None) -> ChatCompletionChunk:
            return ChatCompletionChunk(
                id=cid, created=created, model=self.settings.model_id, choices=items, usage=usage
            )

        n = request.n or 1
        yield chunk(
            [
                ChunkChoice(index=i, delta=DeltaMessage(role="assistant", content=""))
                for i in range(n)
            ]
        )
        outputs: list[ToolOutput | None] = [setup.output() if setup else None for _ in range(n)]
        counts = [0] * n
        prompt_tokens = 0
        async for d in choices:
            counts[d.index] = d.num_output_tokens
            prompt_tokens = d.num_prompt_tokens
            out = outputs[d.index]
            reason = d.finish_reason
            if out is None:
                deltas = [{"content": d.text}] if d.text else []
            else:
                deltas = out.push(d.text)
                if reason is not None:
                    tail, reason = out.finish(reason)
                    deltas += tail
            lp = None
            if request.logprobs and d.logprobs:
                lp = ChoiceLogprobs(content=chat_logprobs(self.tokenizer, d.logprobs))
            items = [ChunkChoice(index=d.index, delta=DeltaMessage(**x)) for x in deltas]
            if lp is not None or reason is not None:
                if not items:
                    items = [ChunkChoice(index=d.index, delta=DeltaMessage())]
                items[-1].logprobs, items[-1].finish_reason = lp, reason
            for item in items:
                yield chunk([item])
        if usage_chunk:
            yield chunk([], Usage.of(prompt_tokens, sum(counts)))
