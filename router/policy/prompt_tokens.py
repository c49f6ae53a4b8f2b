"""Cheap prompt-length estimates for routing: no tokenizer, just characters.

ceil(characters / 4) over all text is a common rule of thumb for BPE tokenisers on English text;
it only has to be good enough to route and to pre-check the context window, since the model
deployment counts exactly. Token-id prompts count exactly.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from router.policy.errors import InvalidRequest

CHARS_PER_TOKEN = 4


def estimate_prompt_tokens(chars: int) -> int:
    """Tokens estimated for `chars` characters of text: ceil(chars / 4)."""
    return math.ceil(chars / CHARS_PER_TOKEN)


def estimate_chat_tokens(messages: Any, tools: Any) -> int:
    """Estimate a chat prompt: message text, text parts, tool calls and tool definitions.

    Non-text parts (images, audio) are not counted; neither is chat-template overhead.
    """
    if not isinstance(messages, list):
        raise InvalidRequest(
            f"'messages' must be a list, got {type(messages).__name__}", "messages"
        )
    chars = 0
    for index, message in enumerate(messages):
        if not isinstance(message, Mapping):
            raise InvalidRequest(
                f"messages[{index}] must be an object, got {message!r}", "messages"
            )
        chars += _content_chars(message.get("content"), index)
        for call in message.get("tool_calls") or ():
            function = call.get("function") if isinstance(call, Mapping) else None
            if isinstance(function, Mapping):
                chars += len(str(function.get("name") or ""))
                chars += len(str(function.get("arguments") or ""))
    if tools:
        # Tool schemas are rendered into the prompt by the chat template, so they take context.
        chars += len(json.dumps(tools, separators=(",", ":")))
    return estimate_prompt_tokens(chars)


def _content_chars(content: Any, index: int) -> int:
    """Characters of one message's content: a string or a list of typed parts."""
    if content is None:
        return 0
    if isinstance(content, str):
        return len(content)
    if not isinstance(content, list):
        raise InvalidRequest(
            f"messages[{index}].content must be a string or a list of parts, got {content!r}",
            "messages",
        )
    chars = 0
    for part in content:
        if isinstance(part, str):
            chars += len(part)
        elif isinstance(part, Mapping) and part.get("type") in ("text", "refusal"):
            chars += len(str(part.get(part["type"]) or ""))
    return chars


def estimate_completion_tokens(prompt: Any) -> int:
    """Estimate a completions prompt: a string, token ids, or a batch of either.

    A batch is several independent sequences, so the estimate is the longest one's, which is
    what the context-length check needs.
    """
    if isinstance(prompt, str):
        return estimate_prompt_tokens(len(prompt))
    if not isinstance(prompt, list):
        raise InvalidRequest(
            f"'prompt' must be a string, a list of strings or token ids, got {prompt!r}", "prompt"
        )
    if prompt and all(is_token_id(item) for item in prompt):
        return len(prompt)
    longest = 0
    for item in prompt:
        if isinstance(item, str):
            longest = max(longest, estimate_prompt_tokens(len(item)))
        elif isinstance(item, list) and all(is_token_id(token) for token in item):
            longest = max(longest, len(item))
        else:
            raise InvalidRequest(
                f"'prompt' items must be strings or lists of token ids, got {item!r}", "prompt"
            )
    return longest


def is_token_id(value: Any) -> bool:
    """Whether `value` is an int token id (JSON booleans are not)."""
    return isinstance(value, int) and not isinstance(value, bool)
