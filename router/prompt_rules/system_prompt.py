"""System-prompt injection (`configs.preprocessing.SystemPrompt`)."""

from __future__ import annotations

from configs.preprocessing import SystemPrompt
from deployments.protocol.preprocess_plan import SystemEdit
from deployments.protocol.requests import ChatMessage, TextPart

_SYSTEM_ROLES = ("system", "developer")


def apply_system_prompt(
    messages: list[ChatMessage], rule: SystemPrompt
) -> tuple[list[ChatMessage], SystemEdit | None]:
    """The messages with the configured system prompt applied, and what changed.

    `default` adds it only when no system or developer message exists; `prepend` puts it
    before the first one's content, separated by a blank line; `replace` drops them all; with
    none to prepend to or replace, the prompt is added as the first message (`injected`).
    """
    present = [i for i, m in enumerate(messages) if m.role in _SYSTEM_ROLES]
    injected = ChatMessage(role="system", content=rule.text)
    if not present:
        return [injected, *messages], "injected"
    if rule.mode == "default":
        return messages, None
    if rule.mode == "replace":
        return [injected, *(m for m in messages if m.role not in _SYSTEM_ROLES)], "replaced"
    first = messages[present[0]]
    content = first.content
    if isinstance(content, list):
        merged: str | list = [TextPart(type="text", text=rule.text + "\n\n"), *content]
    else:
        merged = rule.text + ("\n\n" + content if content else "")
    out = list(messages)
    out[present[0]] = first.model_copy(update={"content": merged})
    return out, "prepended"
