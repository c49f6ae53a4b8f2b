"""The real `ChatHandler` per tool-call family, over the scripted engine client: what the chat path
answers a translated body with, streamed or not, for the API edge tests (Responses, Anthropic).

One handler per run: SmolLM2's tokenizer and ChatML tool template, the sample's parser as the
model's `tool_parser`, and the sample's `prompt_suffix` appended to the rendered prompt, so the
parser sees the prompt end its family's reasoning-opening markup where the sample needs it (the
scripted client only plays the sample's raw text back; the prompt itself is never run).
"""

from __future__ import annotations

import sys
from functools import cache
from pathlib import Path
from typing import Any

from toolcall_samples import Sample, with_tools

from deployments.handlers.chat import ChatHandler, ChatSettings
from deployments.handlers.preparation import Preparer
from deployments.prompting.chat_template import ChatTemplate, PromptOptions
from deployments.prompting.structured_output import GrammarFactory
from deployments.protocol.requests import ChatCompletionRequest
from deployments.protocol.responses import ChatCompletion, ChatCompletionChunk
from deployments.protocol.validation import parse_request

_TESTS = Path(__file__).resolve().parents[2]
for _helpers in (_TESTS / "deployments", _TESTS / "deployments" / "toolcalls"):
    if str(_helpers) not in sys.path:  # the scripted client and the family samples live there
        sys.path.insert(0, str(_helpers))

from scripted_client import Script, ScriptedClient  # noqa: E402
from toolcall_cases import SAMPLES  # noqa: E402

MODEL = "smollm2-135m-instruct"


def _family_samples() -> dict[str, Sample]:
    """The first sample of each parser family that writes a call and streams as it parses."""
    out: dict[str, Sample] = {}
    for sample in SAMPLES:
        if sample.calls and sample.stream_equal and sample.tool_choice is None:
            out.setdefault(sample.parser, sample)
    return out


FAMILY_SAMPLES: dict[str, Sample] = _family_samples()
"""Parser name -> one sample with at least one call (every family of the registry)."""


class _SuffixedTemplate(ChatTemplate):
    """SmolLM2's template with the sample's `prompt_suffix` after the generation prompt."""

    def __init__(self, tokenizer: Any, suffix: str) -> None:
        super().__init__(tokenizer, None, "llama")
        self.suffix = suffix

    def render(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        options: PromptOptions | None = None,
    ) -> str:
        return super().render(messages, tools, options) + self.suffix


@cache
def _grammars(tokenizer: Any) -> GrammarFactory:
    return GrammarFactory(tokenizer, len(tokenizer))


def chat_body(sample: Sample, stream: bool, **fields: Any) -> dict[str, Any]:
    """A chat body with one user message and the sample's tools, `fields` on top; a stream asks
    for the usage chunk, as the API edges do."""
    body: dict[str, Any] = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "What is the weather in Oslo?"}],
        "tools": with_tools(sample),
        **fields,
    }
    if stream:
        body |= {"stream": True, "stream_options": {"include_usage": True}}
    return body


async def run_family(
    tokenizer: Any,
    sample: Sample,
    stream: bool,
    body: dict[str, Any] | None = None,
    max_model_len: int = 32768,
) -> ChatCompletion | list[ChatCompletionChunk]:
    """The chat path's answer when the model writes `sample.raw`.

    Args:
        tokenizer: SmolLM2's tokenizer (the session fixture `tokenizer`).
        sample: the model output and its family (`sample.parser`).
        stream: stream the answer (every chunk, the usage chunk last) or not.
        body: the chat-completions body (as an API edge translated it); None: `chat_body`.
            Its `stream` should match `stream`.
        max_model_len: the context length the handler checks the prompt against (the real
            agents' prompts are 8-10k SmolLM2 tokens).

    Returns:
        The `ChatCompletion`, or the list of `ChatCompletionChunk`s.

    Raises:
        OpenAIError: what the chat path refuses (validation, the handler).
    """
    request = parse_request(ChatCompletionRequest, body or chat_body(sample, stream))
    handler = ChatHandler(
        ScriptedClient(
            tokenizer,
            [Script(sample.raw, finish_reason=sample.engine_finish_reason)],
            max_model_len=max_model_len,
        ),
        tokenizer,
        _SuffixedTemplate(tokenizer, sample.prompt_suffix),
        _grammars(tokenizer),
        ChatSettings(MODEL, sample.parser),
        Preparer(timeout_s=30),
    )
    if not stream:
        return await handler.complete(request)
    return [chunk async for chunk in await handler.stream(request)]
