"""Validate and normalise a chat history with tool calls before templating.

Rules from `shared/toolcalls/PROTOCOL.md` ("Requests"): an assistant message's `tool_calls` are
answered by one `tool` message per id before another role (400 naming the missing id); a tool
message needs a `tool_call_id` that answers a pending call; ids are unique within one assistant
message; `tool_calls` may appear anywhere in the history; `arguments` may be a JSON string or an
object (validated with the request; templates get an object, and JSON that is not one, such as
`"[]"`, is rendered as `{}` with a warning, as vLLM does); an empty `tool_calls` list is dropped;
tool content may be a list of text parts. `strict=False` skips the pairing rules for clients with
loose histories. For a multimodal model, a message with image or audio parts keeps its content as
a list of parts in transformers' chat-template form (`{"type": "image", "image": k}`, `{"type":
"audio", "audio": k}`, `k` the part's index among the request's media parts), which the family's
template renders as its placeholder.
"""

from __future__ import annotations

import logging
from typing import Any

from deployments.protocol.errors import OpenAIError
from deployments.protocol.requests import AudioPart, ChatMessage, ImagePart, TextPart

logger = logging.getLogger(__name__)


def _text(m: ChatMessage, i: int) -> str:
    try:
        return m.text()
    except ValueError as exc:
        raise OpenAIError(str(exc), param=f"messages[{i}].content") from None


def _parts(m: ChatMessage, first: int) -> list[dict[str, Any]]:
    """Template-ready parts of a message with media; `first`: the index of its first media
    part among the request's."""
    out: list[dict[str, Any]] = []
    k = first
    for part in m.content or ():
        if isinstance(part, TextPart):
            out.append({"type": "text", "text": part.text})
        elif isinstance(part, (ImagePart, AudioPart)):
            out.append({"type": part.modality, part.modality: k})
            k += 1
    return out


def _calls(m: ChatMessage, i: int) -> list[dict[str, Any]]:
    """Template-ready calls (arguments as objects) of an assistant message (shapes were
    validated with the request: `deployments.protocol.tools.ToolCall`)."""
    out = []
    seen: set[str] = set()
    for j, call in enumerate(m.tool_calls or ()):
        if call.id in seen:
            raise OpenAIError(
                f"tool call id {call.id!r} appears twice", param=f"messages[{i}].tool_calls[{j}].id"
            )
        seen.add(call.id)
        fn = call.function
        arguments = fn.arguments_object()
        if arguments is None:
            logger.warning(
                "messages[%d].tool_calls[%d].function.arguments is %.100s, not a JSON object: "
                "rendered as {}",
                i,
                j,
                fn.arguments,
            )
            arguments = {}
        out.append(
            {
                "id": call.id,
                "type": "function",
                "function": {"name": fn.name, "arguments": arguments},
            }
        )
    return out


def _missing(pending: dict[str, str]) -> OpenAIError:
    return OpenAIError(
        "An assistant message with 'tool_calls' must be followed by tool messages responding "
        f"to each 'tool_call_id'. Missing: {', '.join(pending)}",
        param="messages",
    )


def normalize_history(
    messages: list[ChatMessage], strict: bool = True, media: bool = False
) -> list[dict[str, Any]]:
    """Messages as chat-template dicts, validated; with `media` (a multimodal model, whose
    `deployments.media.loader.MediaLoader` checked the parts), image and audio parts are kept.

    Returns:
        `[{"role", "content", ...}]`; assistant `tool_calls` carry `arguments` as objects, and
        assistant `reasoning_content` is kept when given; tool messages carry `tool_call_id` and
        the function `name`.

    Raises:
        OpenAIError: 400 naming the message (e.g. `messages[2].tool_call_id`).
    """
    out: list[dict[str, Any]] = []
    pending: dict[str, str] = {}  # unanswered call id -> function name
    seen_media = 0
    for i, m in enumerate(messages):
        if m.role == "tool":
            if not m.tool_call_id:
                raise OpenAIError(
                    "Missing parameter 'tool_call_id': messages with role 'tool' must have a "
                    "'tool_call_id'",
                    param=f"messages[{i}].tool_call_id",
                )
            name = pending.pop(m.tool_call_id, None)
            if name is None and strict:
                raise OpenAIError(
                    f"tool message answers {m.tool_call_id!r}, which no preceding assistant "
                    "tool call has (or it was already answered)",
                    param=f"messages[{i}].tool_call_id",
                )
            msg: dict[str, Any] = {
                "role": "tool",
                "tool_call_id": m.tool_call_id,
                "content": _text(m, i),
            }
            out.append({**msg, "name": name} if name else msg)
            continue
        if pending and strict:
            raise _missing(pending)
        pending = {}
        held = m.media_parts() if media else []
        msg = {"role": m.role, "content": _parts(m, seen_media) if held else _text(m, i)}
        seen_media += len(held)
        if m.name:
            msg["name"] = m.name
        if m.role == "assistant" and m.reasoning_content:
            msg["reasoning_content"] = m.reasoning_content  # templates that keep reasoning
        if m.role == "assistant" and m.tool_calls:
            calls = _calls(m, i)
            msg["tool_calls"] = calls
            pending = {c["id"]: c["function"]["name"] for c in calls}
        out.append(msg)
    if pending and strict and out[-1]["role"] != "assistant":
        raise _missing(pending)
    return out
