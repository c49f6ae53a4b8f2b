"""Responses `tools` and `tool_choice` as chat-completions ones.

A Responses function tool (`{"type": "function", "name", "description", "parameters",
"strict"}`) is the chat tool `{"type": "function", "function": {...}}` (OpenAI's migration
guide, "Migrate to the Responses API": function definitions moved up one level). Hosted and
built-in tools have no chat counterpart: those Codex CLI may send without being asked
(`DROPPED_TOOL_TYPES`) are dropped with a warning, so Codex works unchanged; any other one is a
400 naming its type.
"""

from __future__ import annotations

import logging
from typing import Any

from deployments.protocol.errors import OpenAIError
from router.apis.responses.protocol import FunctionChoice, FunctionTool, Tool

logger = logging.getLogger(__name__)

DROPPED_TOOL_TYPES = frozenset({"local_shell", "web_search", "web_search_preview", "custom"})
"""Tool types Codex CLI sends by its own defaults (its `local_shell` tool, the hosted web search,
and the freeform `custom` `apply_patch` tool, whose raw-text input a chat tool-call parser cannot
carry; Codex also recognises `apply_patch` run through its shell tool)."""


def translate_tools(
    tools: list[Tool] | None,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The request's function tools, as chat tools and as the Response echoes them.

    Args:
        tools: the validated `tools`.

    Returns:
        (chat `tools`, the Responses function tools kept), both empty when none is kept.

    Raises:
        OpenAIError: 400 at `tools[i].type` for a tool type neither served nor dropped.
    """
    chat: list[dict[str, Any]] = []
    echo: list[dict[str, Any]] = []
    for i, tool in enumerate(tools or ()):
        if isinstance(tool, FunctionTool):
            spec = tool.model_dump(exclude={"type"}, exclude_none=True)
            chat.append({"type": "function", "function": spec})
            echo.append(tool.model_dump())
        elif tool.type in DROPPED_TOOL_TYPES:
            logger.warning("responses: tools[%d] of type %r dropped (not served)", i, tool.type)
        else:
            raise OpenAIError(
                f"tools[{i}] has type {tool.type!r}, which this server does not provide: only "
                "'function' tools are served; remove it or declare it as a function tool",
                param=f"tools[{i}].type",
            )
    return chat, echo


def translate_tool_choice(
    choice: str | FunctionChoice | None, tools: list[dict[str, Any]]
) -> str | dict[str, Any] | None:
    """`tool_choice` as chat's (`{"type": "function", "function": {"name"}}` for a named one).

    Args:
        choice: the validated `tool_choice`.
        tools: the chat tools kept (`translate_tools`).

    Raises:
        OpenAIError: 400 at `tool_choice` naming a function that is not among the tools.
    """
    if not isinstance(choice, FunctionChoice):
        return choice
    names = [t["function"]["name"] for t in tools]
    if choice.name not in names:
        known = ", ".join(names) or "none declared"
        raise OpenAIError(
            f"tool_choice names function {choice.name!r}, which is not in tools ({known})",
            param="tool_choice.name",
        )
    return {"type": "function", "function": {"name": choice.name}}
