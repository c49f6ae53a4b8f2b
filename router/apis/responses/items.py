"""Responses input items as chat messages.

- `message` (user, system, developer): a message of that role; text parts (`input_text`) are
  joined into a string, an `input_image` becomes a chat `image_url` part (read by multimodal
  models, refused with a 400 on text-only ones) and an `input_file` a `file` part (refused).
- `message` (assistant), `function_call` and `reasoning`: one assistant message per turn, with
  the text as `content`, the calls as `tool_calls` (the `call_id` is the chat call id; arguments
  stay a JSON string) and the reasoning's text as `reasoning_content` (its `reasoning_text`
  content, else its summaries; a reasoning item with only `encrypted_content` is dropped, as
  nothing here can read it).
- `function_call_output`: a `tool` message answering `call_id`.
- `custom_tool_call` / `custom_tool_call_output` (a freeform tool's call, whose tool this edge
  drops: `tools.DROPPED_TOOL_TYPES`): a call whose arguments are `{"input": <its raw input>}`
  and its `tool` message, so a history from a server that served the tool still reads.
- `additional_tools`: no message (its tools join the request's: `tools.Toolset`).

Items of one assistant turn are merged into one assistant message, since chat histories need
each message's `tool_calls` answered by `tool` messages before any other role: a text that
follows calls in the same turn (some models write one, and streamed output items may finish in
that order) joins that message's `content`. A new assistant message starts at a `reasoning` or
assistant `message` item only after a turn that already has text and no calls.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from deployments.protocol.errors import OpenAIError
from router.apis.responses.protocol import (
    AdditionalToolsItem,
    ContentPart,
    CustomToolCallItem,
    CustomToolCallOutputItem,
    FunctionCallItem,
    FunctionCallOutputItem,
    ImagePart,
    InputItem,
    MessageItem,
    ReasoningItem,
    RefusalPart,
    TextPart,
)


def _join(pieces: list[str]) -> str | None:
    kept = [p for p in pieces if p]
    return "\n\n".join(kept) if kept else None


@dataclass
class _AssistantTurn:
    """The assistant message being assembled from consecutive assistant-side items."""

    content: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    calls: list[dict[str, Any]] = field(default_factory=list)

    def message(self) -> dict[str, Any]:
        text = _join(self.content)  # null beside calls, as chat writes it; else a string
        out: dict[str, Any] = {"role": "assistant", "content": text if self.calls else text or ""}
        reasoning = _join(self.reasoning)
        if reasoning is not None:
            out["reasoning_content"] = reasoning
        if self.calls:
            out["tool_calls"] = self.calls
        return out

    def ends_before_text(self) -> bool:
        """Whether a new reasoning or text item starts another assistant message."""
        return any(self.content) and not self.calls


def _part(part: ContentPart, where: str) -> dict[str, Any]:
    if isinstance(part, TextPart):
        return {"type": "text", "text": part.text}
    if isinstance(part, RefusalPart):
        return {"type": "text", "text": part.refusal}
    if isinstance(part, ImagePart):
        if part.image_url is None:
            raise OpenAIError(
                "input_image needs an image_url (a URL or a data URL): file ids are not served",
                param=f"{where}.image_url",
            )
        return {"type": "image_url", "image_url": {"url": part.image_url}}
    return {"type": "file"}


def content(value: str | list[ContentPart], where: str) -> str | list[dict[str, Any]]:
    """A message's or a function output's content as chat content.

    Args:
        value: the item's `content` (or `output`).
        where: its request path, e.g. `input[2].content`, for errors.

    Returns:
        A string (all parts are text: joined), or chat content parts.

    Raises:
        OpenAIError: 400 for an `input_image` without `image_url`.
    """
    if isinstance(value, str):
        return value
    parts = [_part(p, f"{where}[{j}]") for j, p in enumerate(value)]
    if all(p["type"] == "text" for p in parts):
        return "".join(p["text"] for p in parts)
    return parts


def _text(value: str | list[ContentPart], where: str) -> str:
    got = content(value, where)
    if not isinstance(got, str):
        raise OpenAIError("assistant messages hold text only", param=where)
    return got


def chat_messages(items: list[InputItem]) -> list[dict[str, Any]]:
    """The chat messages of a list of input items (see the module docstring).

    Args:
        items: the validated `input` items.

    Raises:
        OpenAIError: 400 naming the item (`input[i]...`) that cannot be translated.
    """
    out: list[dict[str, Any]] = []
    turn: _AssistantTurn | None = None

    def close() -> None:
        nonlocal turn
        if turn is not None and (any(turn.content) or any(turn.reasoning) or turn.calls):
            out.append(turn.message())
        turn = None

    for i, item in enumerate(items):
        where = f"input[{i}]"
        assistant_text = isinstance(item, MessageItem) and item.role == "assistant"
        if assistant_text or isinstance(item, ReasoningItem):
            if turn is not None and turn.ends_before_text():
                close()
            turn = turn or _AssistantTurn()
            if isinstance(item, ReasoningItem):
                turn.reasoning.append(item.text())
            else:
                assert isinstance(item, MessageItem)
                turn.content.append(_text(item.content, f"{where}.content"))
        elif isinstance(item, FunctionCallItem | CustomToolCallItem):
            turn = turn or _AssistantTurn()
            arguments = (
                item.arguments
                if isinstance(item, FunctionCallItem)
                else json.dumps({"input": item.input})
            )
            function = {"name": item.name, "arguments": arguments}
            turn.calls.append({"id": item.call_id, "type": "function", "function": function})
        elif isinstance(item, AdditionalToolsItem):
            continue
        elif isinstance(item, FunctionCallOutputItem | CustomToolCallOutputItem):
            close()
            output = content(item.output, f"{where}.output")
            out.append({"role": "tool", "tool_call_id": item.call_id, "content": output})
        else:
            assert isinstance(item, MessageItem), f"an input item type is not handled: {item}"
            close()
            out.append({"role": item.role, "content": content(item.content, f"{where}.content")})
    close()
    return out
