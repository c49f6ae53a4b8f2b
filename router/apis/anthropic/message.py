"""A chat completion as an Anthropic `Message`, and the pieces its stream shares with it.

Shape from the `anthropic` SDK's `types/message.py`: `{"id": "msg_…", "type": "message", "role":
"assistant", "model", "content", "stop_reason", "stop_sequence", "usage"}`. Content blocks in the
order an answer is written: `thinking` (the chat answer's `reasoning_content`, with a
`signature`: the SDK requires one; here a hash of the text, as nothing is signed), `text`
(`content`), one `tool_use` per call (`id` `toolu_…`, `input`: the parsed arguments object). The
chat answer keeps no order between its text and its calls, so text the model wrote after a call
comes before it here (a stream sends it where it came: `router.apis.anthropic.stream`).
"""

from __future__ import annotations

import hashlib
import json
import uuid

from deployments.protocol.responses import ChatCompletion, Usage
from deployments.protocol.tools import JsonObject


def message_id(chat_id: str) -> str:
    """The message id for a chat answer's id (the same random part, to trace one in logs)."""
    return "msg_" + chat_id.removeprefix("chatcmpl-")


def tool_use_id() -> str:
    """A fresh `tool_use` block id."""
    return "toolu_" + uuid.uuid4().hex[:24]


def signature(thinking: str) -> str:
    """A thinking block's `signature`: stable for the same text, never empty."""
    return hashlib.sha256(thinking.encode()).hexdigest()


def tool_input(arguments: str) -> JsonObject:
    """A call's arguments (JSON text; the tool parsers write objects) as `tool_use.input`."""
    parsed = json.loads(arguments) if arguments.strip() else {}
    assert isinstance(parsed, dict), f"tool call arguments are not a JSON object: {arguments!r}"
    return parsed


def stop_reason(
    finish_reason: str | None, matched: str | None, stops: list[str]
) -> tuple[str, str | None]:
    """Anthropic's `(stop_reason, stop_sequence)` for a chat choice's end.

    Args:
        finish_reason: the chat choice's `finish_reason`.
        matched: the chat choice's `stop_reason` (vLLM's: the stop string that ended it).
        stops: the request's stop sequences.
    """
    if finish_reason == "tool_calls":
        return "tool_use", None
    if finish_reason == "length":
        return "max_tokens", None
    if matched is not None and matched in stops:
        return "stop_sequence", matched
    return "end_turn", None


def usage(counts: Usage | None) -> JsonObject:
    """Anthropic's `usage` for chat token counts: prompt tokens served from the prefix cache
    (`prompt_tokens_details.cached_tokens`) are `cache_read_input_tokens`, the rest
    `input_tokens`; nothing is written to a cache on request, so `cache_creation_input_tokens`
    is 0. None (counts not known yet): all 0."""
    if counts is None:
        counts = Usage.of(0, 0)
    cached = counts.cached_tokens()
    return {
        "input_tokens": counts.prompt_tokens - cached,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": cached,
        "output_tokens": counts.completion_tokens,
    }


def message(request: JsonObject, completion: ChatCompletion) -> JsonObject:
    """The `Message` for a non-streamed chat answer.

    Args:
        request: the chat body the edge sent (its `stop` names the stop sequences).
        completion: the chat path's answer (one choice: the edge never asks for `n`).
    """
    choice = completion.choices[0]
    answer = choice.message
    content: list[JsonObject] = []
    if answer.reasoning_content:
        text = answer.reasoning_content
        content.append({"type": "thinking", "thinking": text, "signature": signature(text)})
    if answer.content:
        content.append({"type": "text", "text": answer.content})
    for call in answer.tool_calls or ():
        function = call["function"]
        content.append(
            {
                "type": "tool_use",
                "id": tool_use_id(),
                "name": function["name"],
                "input": tool_input(function["arguments"]),
            }
        )
    reason, sequence = stop_reason(
        choice.finish_reason, choice.stop_reason, request.get("stop") or []
    )
    return {
        "id": message_id(completion.id),
        "type": "message",
        "role": "assistant",
        "model": completion.model,
        "content": content,
        "stop_reason": reason,
        "stop_sequence": sequence,
        "usage": usage(completion.usage),
    }
