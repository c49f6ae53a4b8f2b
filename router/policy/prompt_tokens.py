"""Cheap prompt-length estimates for routing: no tokenizer, just characters.

ceil(characters / 4) over all text is a common rule of thumb for BPE tokenisers on English text;
it only routes: the model replica counts exactly and owns the context-length error. Token-id
prompts count exactly.
"""

from __future__ import annotations

import json
import math

from deployments.protocol.requests import ChatCompletionRequest, TextPart

CHARS_PER_TOKEN = 4


def estimate_prompt_tokens(chars: int) -> int:
    """Tokens estimated for `chars` characters of text: ceil(chars / 4)."""
    return math.ceil(chars / CHARS_PER_TOKEN)


def estimate_chat_tokens(request: ChatCompletionRequest) -> int:
    """Estimate a chat prompt: message text, text parts, tool calls and tool definitions.

    Non-text parts (images, audio) are not counted; neither is chat-template overhead.
    """
    chars = 0
    for message in request.messages:
        content = message.content
        if isinstance(content, str):
            chars += len(content)
        elif content is not None:
            chars += sum(len(p.text) for p in content if isinstance(p, TextPart))
        for call in message.tool_calls or ():
            args = call.function.arguments
            chars += len(call.function.name)
            chars += len(args) if isinstance(args, str) else len(json.dumps(args))
    if request.tools:
        # Tool schemas are rendered into the prompt by the chat template, so they take context.
        chars += len(json.dumps(request.tool_dicts(), separators=(",", ":")))
    return estimate_prompt_tokens(chars)


def estimate_completion_tokens(prompt: str | list[str] | list[int] | list[list[int]]) -> int:
    """Estimate a completions prompt: a string, token ids, or a batch of either.

    A batch is several independent sequences, so the estimate is the longest one's, which is
    what the context-length check needs.
    """
    if isinstance(prompt, str):
        return estimate_prompt_tokens(len(prompt))
    if prompt and isinstance(prompt[0], int):
        return len(prompt)
    return max(
        (estimate_prompt_tokens(len(p)) if isinstance(p, str) else len(p) for p in prompt),
        default=0,
    )
