"""The Response object: its fields, its usage, a non-streamed chat answer as one, and the
conversation a stored one continues.

Shape: the `openai` SDK's `types/responses/response.py` (`Response`) and `response_usage.py`.
`status` is `incomplete` with `incomplete_details: {"reason": "max_output_tokens"}` when the
chat answer finished with `length`, else `completed` (`failed` with `error` for a stream that
failed: `stream.py`). Usage: `input_tokens` = prompt tokens, `cached_tokens` = the chat usage's
`prompt_tokens_details.cached_tokens` (0 when absent), `output_tokens` = completion tokens;
`reasoning_tokens` is 0, as the chat path does not count reasoning tokens apart, and
`cache_write_tokens` (OpenAI's explicit prompt-cache writes, which the SDK requires) is 0.
"""

from __future__ import annotations

from typing import Any

from pydantic import TypeAdapter

from deployments.protocol.responses import ChatCompletion, Usage
from router.apis.responses.builder import OutputBuilder
from router.apis.responses.context import ResponseContext
from router.apis.responses.items import chat_messages
from router.apis.responses.protocol import InputItem

_ITEMS: TypeAdapter[list[InputItem]] = TypeAdapter(list[InputItem])


def response_usage(usage: Usage | None) -> dict[str, Any] | None:
    """The Response `usage` of a chat usage (None when there is none)."""
    if usage is None:
        return None
    return {
        "input_tokens": usage.prompt_tokens,
        "input_tokens_details": {"cached_tokens": usage.cached_tokens(), "cache_write_tokens": 0},
        "output_tokens": usage.completion_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": usage.total_tokens,
    }


def response_object(
    context: ResponseContext,
    model: str,
    status: str,
    output: list[dict[str, Any]],
    usage: Usage | None = None,
    error: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A Response object's JSON.

    Args:
        context: the request's facts (id, creation time, echoed fields).
        model: the model that answered (the served id, as chat reports it).
        status: `in_progress`, `completed`, `incomplete` or `failed`.
        output: the output items.
        usage: the chat usage, once known.
        error: `{"code", "message"}` of a failed response.
    """
    echo = dict(context.echo)
    echo.pop("model")
    incomplete = {"reason": "max_output_tokens"} if status == "incomplete" else None
    return {
        "id": context.id,
        "object": "response",
        "created_at": context.created_at,
        "status": status,
        "error": error,
        "incomplete_details": incomplete,
        "model": model,
        "output": output,
        **echo,
        "truncation": "disabled",
        "usage": response_usage(usage),
    }


def answer(context: ResponseContext, completion: ChatCompletion) -> dict[str, Any]:
    """The Response for a non-streamed chat answer (its first choice), built as a stream of
    the same answer would build it (`builder.OutputBuilder`)."""
    choice = completion.choices[0]
    message = choice.message
    builder = OutputBuilder(context.namespaces)
    builder.reasoning(message.reasoning_content or "")
    builder.content(message.content or "")
    calls = message.tool_calls or []
    builder.tool_calls([{"index": i, **call} for i, call in enumerate(calls)])
    incomplete = choice.finish_reason == "length"
    builder.finish(incomplete)
    status = "incomplete" if incomplete else "completed"
    return response_object(context, completion.model, status, builder.items, completion.usage)


def conversation(
    chat_body: dict[str, Any], context: ResponseContext, response: dict[str, Any]
) -> list[dict[str, Any]]:
    """The chat messages a follow-up of `response` continues: the request's own (without its
    instructions), then the response's output as chat messages."""
    history = chat_body["messages"][context.history_start :]
    return [*history, *chat_messages(_ITEMS.validate_python(response["output"]))]
