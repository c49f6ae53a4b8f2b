"""What the policy sees of a request (`RequestFeatures`) and of a model (`ModelState`).

`extract_features` reads an OpenAI chat (`messages`) or completions (`prompt`) body that has
already passed schema validation; it never tokenises, so it is cheap enough for every request.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from router.policy.errors import InvalidRequest
from router.policy.prompt_tokens import (
    estimate_chat_tokens,
    estimate_completion_tokens,
    is_token_id,
)

ToolChoiceKind = Literal["none", "auto", "required", "named"]
ResponseFormatKind = Literal["text", "json_object", "json_schema"]
InputField = Literal["messages", "prompt"]

TENANT_HEADER = "x-ascend-router-tenant"
PRIORITY_HEADER = "x-ascend-router-priority"

_TOOL_CHOICE_STRINGS: frozenset[str] = frozenset({"none", "auto", "required"})
_RESPONSE_FORMATS: frozenset[str] = frozenset({"text", "json_object", "json_schema"})


@dataclass(frozen=True)
class RequestFeatures:
    """The routing-relevant facts of one request.

    Attributes:
        model: The `model` field as sent (an id or an alias); `None` when omitted (means `auto`).
        temperature: Sampling temperature as sent; `None` when omitted.
        top_p: Nucleus-sampling mass as sent; `None` when omitted.
        max_tokens: Completion-token limit (`max_completion_tokens`, else `max_tokens`); `None`
            when the request sets no limit.
        stream: Whether the client asked for SSE streaming.
        has_tools: Whether the request declares at least one tool.
        tool_choice: `tool_choice` as a kind; a named function is `"named"`. Defaults follow
            OpenAI: `"auto"` with tools, `"none"` without.
        response_format: `response_format.type`; `"text"` when omitted.
        estimated_prompt_tokens: Cheap estimate of the prompt length in tokens (see
            `router.policy.prompt_tokens`).
        tenant: Value of the `x-ascend-router-tenant` header, if any.
        priority: Value of the `x-ascend-router-priority` header, if any.
        input_field: Where the prompt came from (`"messages"` for chat, `"prompt"` for
            completions); names the field in errors about prompt length.
    """

    model: str | None = None
    temperature: float | None = None
    top_p: float | None = None
    max_tokens: int | None = None
    stream: bool = False
    has_tools: bool = False
    tool_choice: ToolChoiceKind = "none"
    response_format: ResponseFormatKind = "text"
    estimated_prompt_tokens: int = 0
    tenant: str | None = None
    priority: str | None = None
    input_field: InputField = "messages"


@dataclass(frozen=True)
class ModelState:
    """Live state of one model deployment, as last reported to the router.

    Attributes:
        healthy: Whether the deployment accepts requests; unhealthy models are never candidates.
        in_flight: Requests currently being generated.
        queued: Requests waiting for a slot.
        queue_limit: Most requests the deployment will queue; `None` means unbounded.
    """

    healthy: bool = True
    in_flight: int = 0
    queued: int = 0
    queue_limit: int | None = None

    @property
    def load(self) -> int:
        """In-flight plus queued requests; what `least_loaded` sorts by."""
        return self.in_flight + self.queued

    @property
    def saturated(self) -> bool:
        """Whether the queue is full; the caller answers 429 if every candidate is saturated."""
        return self.queue_limit is not None and self.queued >= self.queue_limit


def extract_features(body: Mapping[str, Any], headers: Mapping[str, str]) -> RequestFeatures:
    """Extract the routing features of a chat or completions request.

    Args:
        body: The decoded JSON body of `/v1/chat/completions` (has `messages`) or
            `/v1/completions` (has `prompt`).
        headers: Request headers; names are matched case-insensitively.

    Returns:
        The request's features. `estimated_prompt_tokens` is a cheap estimate, not a token
        count: ceil(characters / 4) over all text (see `router.policy.prompt_tokens`).

    Raises:
        InvalidRequest: A routing-relevant field has the wrong type or an unknown value; its
            `param` names the field.
    """
    if "messages" in body:
        input_field: InputField = "messages"
        prompt_tokens = estimate_chat_tokens(body["messages"], body.get("tools"))
    elif "prompt" in body:
        input_field = "prompt"
        prompt_tokens = estimate_completion_tokens(body["prompt"])
    else:
        raise InvalidRequest(
            "request body has neither 'messages' (chat) nor 'prompt' (completions)",
            param="messages",
        )
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise InvalidRequest(f"'model' must be a string, got {model!r}", param="model")
    limit = body.get("max_completion_tokens")
    limit_field = "max_completion_tokens"
    if limit is None:
        limit, limit_field = body.get("max_tokens"), "max_tokens"
    tools = body.get("tools")
    has_tools = isinstance(tools, list) and len(tools) > 0
    return RequestFeatures(
        model=model,
        temperature=_number(body, "temperature"),
        top_p=_number(body, "top_p"),
        max_tokens=_token_limit(limit, limit_field),
        stream=bool(body.get("stream") or False),
        has_tools=has_tools,
        tool_choice=_tool_choice_kind(body.get("tool_choice"), has_tools),
        response_format=_response_format_kind(body.get("response_format")),
        estimated_prompt_tokens=prompt_tokens,
        tenant=_header(headers, TENANT_HEADER),
        priority=_header(headers, PRIORITY_HEADER),
        input_field=input_field,
    )


def _number(body: Mapping[str, Any], field: str) -> float | None:
    value = body.get(field)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidRequest(f"'{field}' must be a number, got {value!r}", param=field)
    return float(value)


def _token_limit(value: Any, field: str) -> int | None:
    if value is None:
        return None
    if not is_token_id(value) or value < 0:
        raise InvalidRequest(f"'{field}' must be a non-negative integer, got {value!r}", field)
    return int(value)


def _tool_choice_kind(value: Any, has_tools: bool) -> ToolChoiceKind:
    if value is None:
        return "auto" if has_tools else "none"
    if isinstance(value, str) and value in _TOOL_CHOICE_STRINGS:
        return value  # type: ignore[return-value]  # narrowed by the membership test
    if isinstance(value, Mapping) and value.get("type") == "function":
        return "named"
    raise InvalidRequest(
        f"'tool_choice' must be 'none', 'auto', 'required' or "
        f"{{'type': 'function', 'function': {{'name': ...}}}}, got {value!r}",
        param="tool_choice",
    )


def _response_format_kind(value: Any) -> ResponseFormatKind:
    if value is None:
        return "text"
    kind = value.get("type") if isinstance(value, Mapping) else None
    if isinstance(kind, str) and kind in _RESPONSE_FORMATS:
        return kind  # type: ignore[return-value]  # narrowed by the membership test
    raise InvalidRequest(
        f"'response_format.type' must be one of {sorted(_RESPONSE_FORMATS)}, got {value!r}",
        param="response_format.type" if isinstance(value, Mapping) else "response_format",
    )


def _header(headers: Mapping[str, str], name: str) -> str | None:
    """Case-insensitive header lookup that works for plain dicts and Starlette `Headers`."""
    value = headers.get(name)
    if value is None:
        value = next((v for k, v in headers.items() if k.lower() == name), None)
    value = value.strip() if value is not None else None
    return value or None
