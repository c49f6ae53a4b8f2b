"""Anthropic `system` and `messages` as chat-completions messages.

Per turn: a user turn's `tool_result` blocks become `tool` messages (in order, before the rest
of the turn, whatever their place in it), its text and images one `user` message; an assistant
turn becomes one `assistant` message: text blocks as `content`, `thinking` blocks as
`reasoning_content`, `tool_use` blocks as `tool_calls` (`arguments` as a JSON string);
`redacted_thinking` is dropped (encrypted by Anthropic: no model here can read it). Images
become `image_url` parts (a `data:` URL for base64 sources), which a multimodal model reads
(`deployments.media`) and the chat path refuses with a 400 on models that take text only. Text
blocks stay separate text parts, so the chat path joins them as it joins any client's parts.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from deployments.protocol.errors import OpenAIError
from deployments.protocol.tools import JsonObject
from router.apis.anthropic.protocol import (
    ContentBlock,
    ImageBlock,
    InputMessage,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
)

_ALLOWED = {
    "user": ("text", "image", "tool_result"),
    "assistant": ("text", "tool_use", "thinking", "redacted_thinking"),
    "system": ("text",),
}
"""The blocks each role may hold."""


def chat_messages(
    system: str | list[TextBlock] | None, messages: list[InputMessage]
) -> list[JsonObject]:
    """The chat `messages` of a validated request's `system` and `messages`.

    Returns:
        Chat message dicts (plain JSON types): the system message first when there is one.

    Raises:
        OpenAIError: 400 at `messages[i].content[j]` for a block its role cannot hold (a
            `tool_use` in a user turn, a `tool_result` in an assistant turn, ...), or at
            `...content[j].content[k]` for an image inside a `tool_result`.
    """
    out: list[JsonObject] = []
    if system:
        out.append(
            {"role": "system", "content": _parts(system) if isinstance(system, list) else system}
        )
    for i, message in enumerate(messages):
        out += _turn(message, i)
    return out


def _turn(message: InputMessage, i: int) -> list[JsonObject]:
    if isinstance(message.content, str):
        return [{"role": message.role, "content": message.content}]
    allowed = _ALLOWED[message.role]
    for j, block in enumerate(message.content):
        if block.type not in allowed:
            raise OpenAIError(
                f"{message.role} messages cannot hold a {block.type!r} block; they "
                f"take {', '.join(allowed)} blocks",
                param=f"messages[{i}].content[{j}]",
            )
    if message.role == "assistant":
        return [_assistant(message.content)]
    results = [
        _tool_message(block, f"messages[{i}].content[{j}]")
        for j, block in enumerate(message.content)
        if isinstance(block, ToolResultBlock)
    ]
    rest = [b for b in message.content if isinstance(b, TextBlock | ImageBlock)]
    if rest or not results:
        results.append({"role": message.role, "content": _parts(rest)})
    return results


def _parts(blocks: Sequence[TextBlock | ImageBlock]) -> list[JsonObject]:
    """Text and image blocks as chat content parts."""
    return [
        {"type": "text", "text": b.text}
        if isinstance(b, TextBlock)
        else {"type": "image_url", "image_url": {"url": b.url()}}
        for b in blocks
    ]


def _assistant(blocks: list[ContentBlock]) -> JsonObject:
    texts = [b for b in blocks if isinstance(b, TextBlock)]
    reasoning = "".join(b.thinking for b in blocks if isinstance(b, ThinkingBlock))
    calls = [
        {
            "id": b.id,
            "type": "function",
            "function": {"name": b.name, "arguments": json.dumps(b.input, ensure_ascii=False)},
        }
        for b in blocks
        if isinstance(b, ToolUseBlock)
    ]
    out: JsonObject = {"role": "assistant", "content": _parts(texts) if texts else None}
    if reasoning:
        out["reasoning_content"] = reasoning
    if calls:
        out["tool_calls"] = calls
    return out


def _tool_message(block: ToolResultBlock, where: str) -> JsonObject:
    """A `tool` message whose text says when the tool failed (chat has no error flag)."""
    if isinstance(block.content, list):
        for k, part in enumerate(block.content):
            if isinstance(part, ImageBlock):
                raise OpenAIError(
                    "images inside a tool_result are not supported (chat tool messages take "
                    "text only); send the image as an image block of the user turn instead",
                    param=f"{where}.content[{k}]",
                )
        text = "".join(p.text for p in block.content if isinstance(p, TextBlock))
    else:
        text = block.content or ""
    if block.is_error:
        text = f"Error: {text}" if text else "Error"
    return {"role": "tool", "tool_call_id": block.tool_use_id, "content": text}
