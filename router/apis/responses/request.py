"""A validated Responses request as a chat-completions body.

Field by field (OpenAI's migration guide, "Migrate to the Responses API", and the two API
references): `instructions` -> a first `system` message; `previous_response_id` -> the stored
conversation (`store.py`) before the new `input` (a string is one user message; items:
`items.py`); `tools` (with those of `additional_tools` items) and `tool_choice`: `tools.py`;
`max_output_tokens` -> `max_completion_tokens`; `text.format` -> `response_format`
(`json_schema`'s `name`, `schema`, `strict`, `description` move under `json_schema`);
`reasoning.effort` -> `reasoning_effort` as is (the encoders map `minimal` themselves:
`deployments.prompting.encoders.effort`), with thinking turned on in `chat_template_kwargs`
(`thinking` and `enable_thinking`, the keys templates and encoders read) for any effort but
`none`, which turns it off; `temperature`, `top_p`, `parallel_tool_calls`, `user` and
`prompt_cache_key` (a session key for replica routing) keep their names; a stream asks for the
usage chunk. The fields the Response repeats go into the body's `ResponseContext`. Ignored:
`include`, `truncation`, `client_metadata` and other fields without a chat counterpart.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from deployments.protocol.errors import OpenAIError
from router.apis.responses.context import CONTEXT_KEY, ResponseContext
from router.apis.responses.items import chat_messages
from router.apis.responses.protocol import (
    AdditionalToolsItem,
    FormatJsonObject,
    FormatJsonSchema,
    ResponsesRequest,
)
from router.apis.responses.store import ResponseStore
from router.apis.responses.tools import FunctionChoice, Toolset, translate_tool_choice


def _messages(request: ResponsesRequest, store: ResponseStore) -> tuple[list[dict[str, Any]], int]:
    """The chat messages and the index where the conversation proper starts (after the
    instructions)."""
    if request.input is None:
        raise OpenAIError("input is required: a string or a list of input items", param="input")
    messages: list[dict[str, Any]] = []
    if request.instructions:
        messages.append({"role": "system", "content": request.instructions})
    start = len(messages)
    if request.previous_response_id is not None:
        messages += store.get(request.previous_response_id, "previous_response_id").messages
    if isinstance(request.input, str):
        messages.append({"role": "user", "content": request.input})
    else:
        messages += chat_messages(request.input)
    return messages, start


def _response_format(request: ResponsesRequest) -> dict[str, Any] | None:
    fmt = request.text.format if request.text is not None else None
    if isinstance(fmt, FormatJsonObject):
        return {"type": "json_object"}
    if isinstance(fmt, FormatJsonSchema):
        spec = fmt.model_dump(by_alias=True, exclude={"type"}, exclude_none=True)
        return {"type": "json_schema", "json_schema": spec}
    return None


def _toolset(request: ResponsesRequest) -> Toolset:
    """The request's `tools` and those of its `additional_tools` items."""
    tools = Toolset()
    tools.add(request.tools or [], "tools")
    for i, item in enumerate(request.input if isinstance(request.input, list) else []):
        if isinstance(item, AdditionalToolsItem):
            tools.add(item.tools, f"input[{i}].tools")
    return tools


def _echo(request: ResponsesRequest, tools: list[dict[str, Any]]) -> dict[str, Any]:
    """The request fields the Response repeats, with OpenAI's defaults filled in."""
    choice = request.tool_choice
    named = choice.model_dump() if isinstance(choice, FunctionChoice) else None
    text = request.text.model_dump(by_alias=True, exclude_none=True) if request.text else {}
    reasoning = request.reasoning.model_dump() if request.reasoning else {}
    return {
        "model": request.model or "",
        "instructions": request.instructions,
        "tools": tools,
        "tool_choice": named or choice or "auto",
        "parallel_tool_calls": request.parallel_tool_calls is not False,
        "temperature": request.temperature,
        "top_p": request.top_p,
        "max_output_tokens": request.max_output_tokens,
        "previous_response_id": request.previous_response_id,
        "metadata": request.metadata or {},
        "text": {"format": {"type": "text"}, **text},
        "reasoning": {"effort": None, "summary": None, **reasoning},
        "store": request.store is not False,
        "user": request.user,
    }


def translate_request(request: ResponsesRequest, store: ResponseStore) -> dict[str, Any]:
    """The chat-completions body for a validated Responses request.

    Args:
        request: the validated body.
        store: the stored responses `previous_response_id` may name.

    Returns:
        The chat body (plain JSON), its `ResponseContext` under `CONTEXT_KEY`.

    Raises:
        OpenAIError: 400 naming the field that cannot be translated; 404 `not_found` at
            `previous_response_id` for a response not (or no longer) stored.
    """
    messages, start = _messages(request, store)
    tools = _toolset(request)
    body: dict[str, Any] = {"messages": messages}
    optional = {
        "model": request.model,
        "tools": tools.chat or None,
        "tool_choice": translate_tool_choice(request.tool_choice, tools),
        "parallel_tool_calls": request.parallel_tool_calls,
        "max_completion_tokens": request.max_output_tokens,
        "temperature": request.temperature,
        "top_p": request.top_p,
        "response_format": _response_format(request),
        "user": request.user,
        "prompt_cache_key": request.prompt_cache_key,
    }
    body |= {k: v for k, v in optional.items() if v is not None}
    effort = request.reasoning.effort if request.reasoning else None
    if effort is not None:
        thinking = effort != "none"
        body["reasoning_effort"] = effort
        body["chat_template_kwargs"] = {"thinking": thinking, "enable_thinking": thinking}
    if request.stream:
        body |= {"stream": True, "stream_options": {"include_usage": True}}
    context = ResponseContext(
        id=f"resp_{uuid.uuid4().hex}",
        created_at=int(time.time()),
        history_start=start,
        namespaces=tools.namespaces,
        echo=_echo(request, tools.echo),
    )
    body[CONTEXT_KEY] = context.model_dump()
    return body
