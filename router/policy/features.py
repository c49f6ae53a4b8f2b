"""What the policy sees of a request (`RequestFeatures`) and of a model (`ModelState`).

`extract_features` reads a validated OpenAI chat or completions request (typed fields, read
once); it never tokenises, so it is cheap enough for every request.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from configs.policy_config import MediaModality, ResponseFormatKind, ToolChoiceKind
from deployments.protocol.requests import ChatCompletionRequest, CompletionRequest, media_parts
from router.policy.prompt_tokens import estimate_chat_tokens, estimate_completion_tokens

InputField = Literal["messages", "prompt"]

TENANT_HEADER = "x-ascend-router-tenant"
PRIORITY_HEADER = "x-ascend-router-priority"


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
        media: Each non-text modality the request holds → the OpenAI `param` of its first part,
            e.g. `{"image": "messages[1].content[0]"}`; empty for a text-only request.
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
    media: Mapping[MediaModality, str] = field(default_factory=dict)

    @property
    def has_image(self) -> bool:
        """Whether any message holds an `image_url` content part."""
        return "image" in self.media

    @property
    def has_audio(self) -> bool:
        """Whether any message holds an `input_audio` content part."""
        return "audio" in self.media


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


def extract_features(
    request: ChatCompletionRequest | CompletionRequest, headers: Mapping[str, str]
) -> RequestFeatures:
    """Extract the routing features of a validated chat or completions request.

    Args:
        request: The request, already validated (`deployments.protocol.validation`), so its
            fields are typed and nothing here re-checks them.
        headers: Request headers; names are matched case-insensitively.

    Returns:
        The request's features. `estimated_prompt_tokens` is a cheap estimate, not a token
        count: ceil(characters / 4) over all text (see `router.policy.prompt_tokens`).
        `media` locates the first `image_url` and `input_audio` part of a chat request.
    """
    if isinstance(request, ChatCompletionRequest):
        input_field: InputField = "messages"
        prompt_tokens = estimate_chat_tokens(request)
        tool_choice = request.resolved_tool_choice().kind
        response_format = request.response_format_kind()
        media = _media_parts(request)
    else:
        input_field = "prompt"
        prompt_tokens = estimate_completion_tokens(request.prompt)
        tool_choice, response_format = "none", "text"
        media = {}
    return RequestFeatures(
        model=request.model,
        temperature=request.temperature,
        top_p=request.top_p,
        max_tokens=request.output_limit(),
        stream=bool(request.stream),
        has_tools=bool(getattr(request, "tools", None)),
        tool_choice=tool_choice,
        response_format=response_format,
        estimated_prompt_tokens=prompt_tokens,
        tenant=_header(headers, TENANT_HEADER),
        priority=_header(headers, PRIORITY_HEADER),
        input_field=input_field,
        media=media,
    )


def _media_parts(request: ChatCompletionRequest) -> dict[MediaModality, str]:
    """Each media modality in the messages' content parts → the `param` of its first part."""
    media: dict[MediaModality, str] = {}
    for param, _, part in media_parts(request.messages):
        media.setdefault(part.modality, param)
    return media


def _header(headers: Mapping[str, str], name: str) -> str | None:
    """Case-insensitive header lookup that works for plain dicts and Starlette `Headers`."""
    value = headers.get(name)
    if value is None:
        value = next((v for k, v in headers.items() if k.lower() == name), None)
    value = value.strip() if value is not None else None
    return value or None
