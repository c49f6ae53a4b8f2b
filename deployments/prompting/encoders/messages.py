"""OpenAI-shaped chat messages read into the typed form the DeepSeek encoders render.

Input: the dicts of `deployments.prompting.tool_history.normalize_history` (roles system, developer,
user, assistant, tool; `content` a str or None; assistant `tool_calls` as
`[{"id", "type": "function", "function": {"name", "arguments"}}]` with `arguments` a dict or a
JSON string; assistant reasoning as `reasoning_content` or `reasoning`; tool messages with
`tool_call_id`). Everything a prompt cannot be built from is a `ValueError` naming the message.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

ROLES = ("system", "developer", "user", "assistant", "tool")


@dataclass(frozen=True)
class ToolCall:
    """One call of an assistant turn.

    Attributes:
        id: the call id tool results answer ("" when the client sent none).
        name: the function name.
        arguments: the arguments object, in the client's key order.
    """

    id: str
    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class Message:
    """One message, validated.

    Attributes:
        index: its position in the request's `messages` (-1 for the system message an encoder
            adds to carry the tools); error messages name it.
        role: one of `ROLES`.
        content: the text ("" for a missing or null content).
        reasoning: an assistant's reasoning ("" when none).
        calls: an assistant's tool calls, in order.
        call_id: a tool message's `tool_call_id`.
    """

    index: int
    role: str
    content: str
    reasoning: str = ""
    calls: tuple[ToolCall, ...] = ()
    call_id: str = ""


def _text(raw: dict[str, Any], key: str, i: int) -> str:
    value = raw.get(key)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ValueError(
            f"messages[{i}].{key} must be a string (flatten content parts before encoding), "
            f"not {type(value).__name__}"
        )
    return value


def _arguments(raw: Any, where: str) -> dict[str, Any]:
    """A call's arguments as an object.

    A string that is not JSON is kept whole as `{"arguments": <the string>}`, as the reference
    encoder shipped with the weights does.
    """
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except json.JSONDecodeError:
            return {"arguments": raw}
    if not isinstance(raw, dict):
        raise ValueError(f"{where} must be a JSON object, not {type(raw).__name__}")
    return raw


def _calls(raw: dict[str, Any], i: int) -> tuple[ToolCall, ...]:
    out = []
    for j, call in enumerate(raw.get("tool_calls") or ()):
        where = f"messages[{i}].tool_calls[{j}]"
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise ValueError(f"{where} needs a function with a string name")
        arguments = _arguments(function.get("arguments", {}), f"{where}.function.arguments")
        out.append(ToolCall(call.get("id") or "", function["name"], arguments))
    return tuple(out)


def read_messages(messages: list[dict[str, Any]]) -> list[Message]:
    """Validate `messages` and type them.

    Raises:
        ValueError: no messages; an unknown role; a non-string content or reasoning; a call
            without a name or with arguments that are not an object; a tool message whose
            `tool_call_id` answers no call of the latest assistant message; a developer message
            with no content (both encoders render it as a user turn of its own).
    """
    if not messages:
        raise ValueError("messages is empty: a prompt needs at least one message")
    out: list[Message] = []
    open_ids: set[str] = set()  # call ids of the latest assistant message
    for i, raw in enumerate(messages):
        role = raw.get("role")
        if role not in ROLES:
            raise ValueError(f"messages[{i}].role {role!r} is not one of {', '.join(ROLES)}")
        content = _text(raw, "content", i)
        if role == "assistant":
            reasoning = _text(raw, "reasoning_content", i) or _text(raw, "reasoning", i)
            calls = _calls(raw, i)
            open_ids = {c.id for c in calls if c.id}
            out.append(Message(i, role, content, reasoning, calls))
        elif role == "tool":
            call_id = raw.get("tool_call_id") or ""
            if call_id not in open_ids:
                raise ValueError(
                    f"messages[{i}].tool_call_id {call_id!r} matches no tool call of the "
                    "latest assistant message"
                )
            out.append(Message(i, role, content, call_id=call_id))
        elif role == "developer" and not content:
            raise ValueError(f"messages[{i}] is a developer message with no content")
        else:
            out.append(Message(i, role, content))
    return out


def with_system_carrier(messages: list[Message], needed: bool) -> list[Message]:
    """`messages` with a leading system message to carry the tools and response format.

    Both encoders declare tools (and the response format) in the first message when it is a
    system message; otherwise an empty system message is put in front, which renders as
    nothing (SGLang's `serving_chat` does the same).
    """
    if needed and messages[0].role != "system":
        return [Message(-1, "system", ""), *messages]
    return messages


def last_user_index(roles: list[str]) -> int:
    """Index of the last user or developer entry (-1 when none): the reference's "last user"."""
    for k in range(len(roles) - 1, -1, -1):
        if roles[k] in ("user", "developer"):
            return k
    return -1
