"""`/v1/chat/completions` on one model: prompt, choices, tool calls, responses and chunks."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
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
from deployments.media.loader import MediaLoader
from deployments.prompting.apply_plan import run_plan
from deployments.prompting.chat_template import ChatTemplate, PromptOptions
from deployments.prompting.engine_inputs import encode_text, sampling_params
from deployments.prompting.structured_output import (
    GrammarFactory,
    native_tool_choice_tag,
    tool_choice_schema,
)
from deployments.prompting.tool_history import normalize_history
from deployments.protocol.errors import OpenAIError
from deployments.protocol.preprocess_plan import PreprocessPlan, PreprocessReport
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
from deployments.protocol.tools import ToolChoice, response_format_schema
from deployments.streaming.logprobs import chat_logprobs
from deployments.streaming.tool_output import ToolOutput, ToolSetup
from deployments.toolcalls.assemble import accumulate
from deployments.toolcalls.think import prompt_opens_reasoning
from engine.constraints import TokenConstraint
from engine.multimodal.inputs import MediaItem
from engine.sampling_params import SamplingParams


@dataclass(frozen=True)
class ChatSettings:
    """Per-model chat behaviour from the deployment config.

    Attributes:
        model_id: the base model's id, reported in responses (a LoRA adapter's request
            reports the adapter's).
        tool_parser: the family's tool-call parser name; None: the model does no tools.
        strict_tool_history: reject histories whose tool calls and results do not pair up.
    """

    model_id: str
    tool_parser: str | None
    strict_tool_history: bool = True


def _tool_outputs(setup: ToolSetup | None, n: int) -> list[ToolOutput | None]:
    """One tool-call output processor per choice (None each when the request has no tools)."""
    return [setup.output() if setup else None for _ in range(n)]


@dataclass(frozen=True)
class Rendered:
    """A chat request's prompt.

    Attributes:
        text: the rendered prompt text (one placeholder per media part).
        prompt: its token ids, as the engine prefills them (placeholders expanded).
        report: what gateway preprocessing (truncation) did, or None.
        media: the images and audio clips placed in `prompt`, in order.
    """

    text: str
    prompt: list[int]
    report: PreprocessReport | None
    media: tuple[MediaItem, ...] = ()


@dataclass(frozen=True)
class _Prepared:
    """A chat request made ready for the engine: tool parsing setup, prompt tokens, one
    `SamplingParams` per choice, what gateway preprocessing did, and the model id reported in
    the response (the LoRA adapter's, when it runs under one)."""

    served: str
    setup: ToolSetup | None
    prompt: list[int]
    params: list[SamplingParams]
    report: PreprocessReport | None
    media: tuple[MediaItem, ...]


class ChatHandler:
    """Serves chat completions for one model.

    Args:
        engine: the replica's engine.
        tokenizer: the checkpoint's tokenizer.
        template: chat-template renderer (tool-capable).
        grammars: compiles constrained-decoding grammars for this tokenizer.
        settings: per-model settings.
        preparer: runs the CPU-heavy preparation off the event loop, bounded in time.
        media: loads image and audio parts for a multimodal model
            (`deployments.media.loader.load_media_loader`); None for a text model, which
            refuses them.
    """

    def __init__(
        self,
        engine: EngineClient,
        tokenizer: Any,
        template: ChatTemplate,
        grammars: GrammarFactory,
        settings: ChatSettings,
        preparer: Preparer,
        media: MediaLoader | None = None,
    ) -> None:
        self.engine = engine
        self.media = media
        self.preparer = preparer
        self.tokenizer = tokenizer
        self.template = template
        self.grammars = grammars
        self.settings = settings

    def render(self, request: ChatCompletionRequest, plan: PreprocessPlan | None) -> Rendered:
        """The request's prompt: text and token ids as the engine prefills them (truncated if
        `plan` says so), with the media placed in them; also what `POST /tokenize` returns.
        CPU work and media fetches, off the event loop.

        Raises:
            OpenAIError: 400 for tools without a `tool_parser` (the router never sends them
                here), a history the template or encoder rejects, bad
                `chat_template_kwargs`, or media this model does not take or cannot read
                (`MediaLoader.load`; 413 over its byte limit).
        """
        tool_dicts = request.tool_dicts()
        if tool_dicts and self.settings.tool_parser is None:
            raise OpenAIError(
                f"model {self.settings.model_id} does not support tools (its deployment config "
                "sets no tool_parser)",
                param="tools",
            )
        choice = request.resolved_tool_choice()
        tools = tool_dicts if choice.kind != "none" else None  # the tools the template renders
        loaded = self.media.load(request.messages) if self.media is not None else []
        messages = normalize_history(
            request.messages, self.settings.strict_tool_history, media=self.media is not None
        )
        if request.continue_final_message is False and messages[-1]["role"] == "assistant":
            messages.append({"role": "user", "content": ""})
        options = PromptOptions(
            request.chat_template_kwargs or {},
            request.reasoning_effort,
            response_format_schema(request.response_format),
        )

        # the media placed in each prompt `encode` returns, by the prompt list's identity:
        # truncation renders several candidate histories and keeps one
        placed: dict[int, tuple[list[int], tuple[MediaItem, ...]]] = {}

        def encode(kept: list[dict[str, Any]]) -> tuple[str, list[int]]:
            text = self.template.render(kept, tools, options)
            ids = encode_text(self.tokenizer, text, "messages")
            if self.media is None:
                return text, ids
            parts = [p for m in kept if isinstance(m["content"], list) for p in m["content"]]
            held = [loaded[p[p["type"]]] for p in parts if p["type"] in ("image", "audio")]
            ids, items = self.media.expand(ids, held)
            placed[id(ids)] = (ids, items)
            return text, ids

        def media(prompt: list[int]) -> tuple[MediaItem, ...]:
            return placed[id(prompt)][1] if self.media is not None else ()

        if plan is None:
            text, prompt = encode(messages)
            return Rendered(text, prompt, None, media(prompt))
        text, prompt, report = run_plan(
            plan,
            messages,
            encode,
            lambda t: len(encode_text(self.tokenizer, t, "messages")),
            self.engine.max_model_len,
            request.output_limit(),
        )
        return Rendered(text, prompt, report, media(prompt))

    def _prepare(
        self, request: ChatCompletionRequest, plan: PreprocessPlan | None, lora: str | None
    ) -> _Prepared:
        """Prompt, grammar and sampling parameters, under LoRA adapter `lora` (None: the base
        model) (CPU work, off the event loop).

        Raises:
            OpenAIError: 400 for what this model cannot serve (see `render`), the context, the
                schema.
        """
        rendered = self.render(request, plan)
        prompt, report = rendered.prompt, rendered.report
        tool_dicts = request.tool_dicts()
        choice = request.resolved_tool_choice()
        suffix = rendered.text[-64:]
        native = None
        if tool_dicts:
            assert self.settings.tool_parser is not None, "checked above"
            native = native_tool_choice_tag(
                self.settings.tool_parser,
                choice,
                tool_dicts,
                request.parallel_tool_calls,
                prompt_opens_reasoning(suffix),
            )
        schema, param = None, "tools"
        if native is None:  # else the family's own call markup instead of the JSON call list
            schema = tool_choice_schema(choice, request.tools or [], request.parallel_tool_calls)
            if schema is None:
                schema, param = response_format_schema(request.response_format), "response_format"

        def constraint() -> TokenConstraint | None:
            if native is not None:
                return self.grammars.tag_constraint(native, "tools")
            return self.grammars.constraint(schema, param) if schema is not None else None

        setup = None
        # a prompt that opens reasoning (DeepSeek-V4's thinking mode ends in `<think>`) is split
        # into reasoning and content with or without tools; without tools no call is read (an
        # explicit `tool_choice: "auto"` too: the model may have no tool parser at all)
        if tool_dicts or prompt_opens_reasoning(suffix):
            setup = ToolSetup(
                choice if tool_dicts else ToolChoice("none"),
                self.settings.tool_parser or "",
                tool_dicts,
                suffix,
                # JSON-constrained output has its own parsers; native markup keeps the family's
                constrained=native is None and choice.kind in ("required", "named"),
            )
        params = [
            sampling_params(
                request,
                len(prompt),
                self.engine.max_model_len,
                self.engine.vocab_size,
                i,
                constraint(),
                lora,
            )
            for i in range(request.n or 1)
        ]
        served = lora or self.settings.model_id
        return _Prepared(served, setup, prompt, params, report, rendered.media)

    async def _start(
        self, request: ChatCompletionRequest, plan: PreprocessPlan | None, lora: str | None
    ) -> tuple[_Prepared, AsyncIterator[ChoiceDelta]]:
        """Prepare the request, queue its choices in the engine and wait for the first delta
        (raises OpenAIError before any output: a streamed answer starts only once the engine
        holds the request and has run its first step)."""
        prep = await self.preparer.run(lambda: self._prepare(request, plan, lora))
        streams = await admit(self.engine, [(prep.prompt, p) for p in prep.params], prep.media)
        stops = request.stop_list()
        merged = merge_choices(
            [run_choice(s, self.tokenizer, i, prep.prompt, stops) for i, s in enumerate(streams)]
        )
        return prep, await first_then_rest(merged)

    async def complete(
        self,
        request: ChatCompletionRequest,
        plan: PreprocessPlan | None = None,
        lora: str | None = None,
    ) -> ChatCompletion:
        """Non-streamed completion: the streamed deltas, accumulated; `plan`: the router's
        preprocessing plan, whose report rides on the response; `lora`: the LoRA adapter the
        request runs under (None: the base model)."""
        n = request.n or 1
        deltas: list[list[dict[str, Any]]] = [[] for _ in range(n)]
        lps: list[list[Any]] = [[] for _ in range(n)]
        reasons: list[str | None] = [None] * n
        matched: list[str | None] = [None] * n
        usage = Usage.of(0, 0)
        prep, choices_in = await self._start(request, plan, lora)
        outputs = _tool_outputs(prep.setup, n)
        async for chunk in self._chunks(request, prep, outputs, choices_in, usage_chunk=True):
            if chunk.usage is not None:
                usage = chunk.usage
            for c in chunk.choices:
                deltas[c.index].append(c.delta.model_dump())
                if c.logprobs is not None and c.logprobs.content:
                    lps[c.index].extend(c.logprobs.content)
                reasons[c.index] = c.finish_reason or reasons[c.index]
                matched[c.index] = c.stop_reason or matched[c.index]
        choices = []
        for i in range(n):
            out = outputs[i]
            msg = accumulate(deltas[i], out.voided if out else ())
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
                    stop_reason=matched[i],
                )
            )
        response = ChatCompletion(
            id=f"chatcmpl-{uuid.uuid4().hex}",
            created=int(time.time()),
            model=prep.served,
            choices=choices,
            usage=usage,
        )
        response.with_preprocess_report(prep.report)
        return response

    async def stream(
        self,
        request: ChatCompletionRequest,
        plan: PreprocessPlan | None = None,
        lora: str | None = None,
    ) -> AsyncIterator[ChatCompletionChunk]:
        """Streamed completion, returned once the engine holds the request; errors (a bad
        request, an engine that is not running) raise here, before the first chunk. The
        preprocessing report of `plan` rides on the first chunk; `lora` as for `complete`."""
        include = bool(request.stream_options and request.stream_options.include_usage)
        prep, choices = await self._start(request, plan, lora)
        outputs = _tool_outputs(prep.setup, request.n or 1)
        return self._chunks(request, prep, outputs, choices, usage_chunk=include)

    async def _chunks(
        self,
        request: ChatCompletionRequest,
        prep: _Prepared,
        outputs: list[ToolOutput | None],
        choices: AsyncIterator[ChoiceDelta],
        usage_chunk: bool,
    ) -> AsyncIterator[ChatCompletionChunk]:
        cid = f"chatcmpl-{uuid.uuid4().hex}"
        created = int(time.time())

        def chunk(items: list[ChunkChoice], usage: Usage | None = None) -> ChatCompletionChunk:
            return ChatCompletionChunk(
                id=cid, created=created, model=prep.served, choices=items, usage=usage
            )

        n = request.n or 1
        first = chunk(
            [
                ChunkChoice(index=i, delta=DeltaMessage(role="assistant", content=""))
                for i in range(n)
            ]
        )
        yield first.with_preprocess_report(prep.report)
        counts = [0] * n
        prompt_tokens = cached = 0
        async for d in choices:
            counts[d.index] = d.num_output_tokens
            prompt_tokens, cached = d.num_prompt_tokens, d.num_cached_tokens
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
                if reason == "stop":
                    items[-1].stop_reason = d.stop_reason
            for item in items:
                yield chunk([item]).with_timing(d.timing)
        if usage_chunk:
            yield chunk([], Usage.of(prompt_tokens, sum(counts), cached))
