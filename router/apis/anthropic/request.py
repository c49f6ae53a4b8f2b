"""An Anthropic Messages body as a chat-completions body; a count_tokens body as the `/tokenize`
chat body that renders the same prompt.

Mapping (Anthropic → chat): `system` and `messages` (`router.apis.anthropic.history`);
`tools[]` `{name, description, input_schema}` → function tools `{name, description,
parameters}`; `tool_choice` `auto` → `auto`, `any` → `required`, `tool` → the named function,
`none` → `none`, `disable_parallel_tool_use: true` → `parallel_tool_calls: false`; `thinking`
`enabled`/`adaptive`/`between_tools` → `chat_template_kwargs` `{"thinking": true,
"enable_thinking": true}` (the keys the prompt encoders and chat templates read), `disabled` →
both false, absent → the model's default; `output_config.effort` → `reasoning_effort`;
`output_config.format` → `response_format` `json_schema`; `max_tokens`, `temperature`, `top_p`,
`top_k` as they are; `stop_sequences` → `stop`; `metadata.user_id` → `user`; `stream: true` →
`stream: true` with `stream_options.include_usage`, as the edge's events need the usage.
"""

from __future__ import annotations

from typing import Any

from deployments.protocol.errors import OpenAIError
from deployments.protocol.tools import JsonObject
from deployments.protocol.validation import parse_request
from router.apis.anthropic.history import chat_messages
from router.apis.anthropic.protocol import (
    CountTokensRequest,
    MessagesRequest,
    ThinkingDisabled,
    ThinkingEnabled,
    Tool,
    ToolChoice,
    ToolChoiceAny,
    ToolChoiceAuto,
    ToolChoiceNone,
)


def chat_body(body: Any) -> JsonObject:
    """Validate a `POST /v1/messages` body and translate it.

    Args:
        body: the parsed JSON body.

    Returns:
        A `/v1/chat/completions` body (plain JSON types).

    Raises:
        OpenAIError: 400 naming the Anthropic field at fault (`max_tokens`,
            `messages[2].content[0].type`, `tool_choice.name`, `thinking.budget_tokens`, ...).
    """
    request = parse_request(MessagesRequest, body)
    thinking = request.thinking
    if isinstance(thinking, ThinkingEnabled) and thinking.budget_tokens >= request.max_tokens:
        raise OpenAIError(
            f"thinking.budget_tokens ({thinking.budget_tokens}) must be less than max_tokens "
            f"({request.max_tokens}): raise max_tokens or lower the budget",
            param="thinking.budget_tokens",
        )
    out = {**_prompt(request), "max_tokens": request.max_tokens}
    sampling = {"temperature": request.temperature, "top_p": request.top_p, "top_k": request.top_k}
    out |= {k: v for k, v in sampling.items() if v is not None}
    if request.stop_sequences:
        out["stop"] = list(request.stop_sequences)
    if request.metadata is not None and request.metadata.user_id is not None:
        out["user"] = request.metadata.user_id
    if request.stream:
        out |= {"stream": True, "stream_options": {"include_usage": True}}
    return out


def count_body(body: Any) -> JsonObject:
    """Validate a `POST /v1/messages/count_tokens` body and translate it into a `/tokenize` chat
    body: the messages, system, tools, tool choice, thinking and output format of `chat_body`,
    so its count is the prompt tokens of the same request sent to `/v1/messages`.

    Raises:
        OpenAIError: 400 naming the Anthropic field at fault.
    """
    return _prompt(parse_request(CountTokensRequest, body))


def _prompt(request: CountTokensRequest) -> JsonObject:
    """The chat fields that shape the prompt."""
    out: JsonObject = {
        "model": request.model,
        "messages": chat_messages(request.system, request.messages),
    }
    if request.tools:
        out["tools"] = [_function(tool) for tool in request.tools]
    if request.tool_choice is not None:
        out |= _tool_choice(request.tool_choice, request.tools or [])
    if request.thinking is not None:
        on = not isinstance(request.thinking, ThinkingDisabled)
        out["chat_template_kwargs"] = {"thinking": on, "enable_thinking": on}
    config = request.output_config
    if config is not None and config.effort is not None:
        out["reasoning_effort"] = config.effort
    if config is not None and config.format is not None:
        schema = {"name": "output", "schema": config.format.schema_}
        out["response_format"] = {"type": "json_schema", "json_schema": schema}
    return out


def _function(tool: Tool) -> JsonObject:
    function: JsonObject = {"name": tool.name, "parameters": tool.input_schema}
    if tool.description is not None:
        function["description"] = tool.description
    return {"type": "function", "function": function}


def _tool_choice(choice: ToolChoice, tools: list[Tool]) -> JsonObject:
    """`tool_choice` (and `parallel_tool_calls`) for the chat body.

    Raises:
        OpenAIError: 400 for `any` or `tool` without tools, or `tool` naming an undeclared one.
    """
    if isinstance(choice, ToolChoiceNone):
        return {"tool_choice": "none"}
    names = [t.name for t in tools]
    value: str | JsonObject
    if isinstance(choice, ToolChoiceAuto):
        value = "auto"
    elif not names:
        raise OpenAIError(
            f"tool_choice {choice.type!r} needs tools to choose from: declare them in 'tools' or "
            "use tool_choice 'auto' or 'none'",
            param="tool_choice.type",
        )
    elif isinstance(choice, ToolChoiceAny):
        value = "required"
    elif choice.name not in names:
        raise OpenAIError(
            f"tool_choice names tool {choice.name!r}, which is not in tools "
            f"({', '.join(names)}); name a declared tool",
            param="tool_choice.name",
        )
    else:
        value = {"type": "function", "function": {"name": choice.name}}
    out: JsonObject = {"tool_choice": value}
    if choice.disable_parallel_tool_use:
        out["parallel_tool_calls"] = False
    return out
