"""Whether the router refuses a fuzzed body before any model sees it, computed locally.

The verdict runs the router's own edge checks in the order the ingress does:
`limits.parse_body` (size, depth, JSON); for Anthropic's Messages API and OpenAI's Responses API
the edge's own translation (`AnthropicEdge.chat_body` / `count_body`,
`ResponsesEdge.chat_body`: the API's validation and cross-field rules); then
`validation.parse_request` of the chat (or `/tokenize`) body with the default `RequestLimits`
(schema, counts, schema sizes); an unknown `model`; and for chat, image and audio parts that
every model's replica refuses (`media_refusal`: the replica's own decoders of `deployments.media`
under the default `MediaLimits`).

What it cannot know, and counts as served: the checks a replica makes (a lone UTF-16 surrogate
in prompt text, a prompt over the context, a chat template that raises, a valid image or audio
clip for a model that does not read it), as for chat. And what it cannot know, and counts as
refused: a model name that only the server's policy `model_names` globs map (only `models` and
`aliases` are known here: base bodies name a served model), and a `previous_response_id` the
server stored (the local store is always empty; the fuzzer never learns the ids the server
makes, so on the server too it names nothing: 404).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any, Literal

from configs.media_limits import MediaLimits
from configs.request_limits import RequestLimits
from deployments.media.audio import decode_audio
from deployments.media.images import decode_image
from deployments.media.processors import min_audio_samples
from deployments.media.sources import decode_base64, read_image_url
from deployments.protocol.errors import OpenAIError
from deployments.protocol.limits import parse_body
from deployments.protocol.requests import (
    ChatCompletionRequest,
    CompletionRequest,
    ImagePart,
    media_parts,
)
from deployments.protocol.tokenize import TokenizeChatRequest
from deployments.protocol.validation import parse_request
from router.apis.anthropic import AnthropicEdge
from router.apis.responses import ResponsesEdge, ResponseStore

Endpoint = Literal["chat", "completions", "messages", "count_tokens", "responses"]

PATHS: dict[Endpoint, str] = {
    "chat": "/v1/chat/completions",
    "completions": "/v1/completions",
    "messages": "/v1/messages",
    "count_tokens": "/v1/messages/count_tokens",
    "responses": "/v1/responses",
}
EDGE_FAILURE = "the router failed: "
"""Start of the reason when a check raised something other than an `OpenAIError`: the server
answers that body with a 500 (a router bug), not a 4xx."""

_ANTHROPIC = AnthropicEdge()
_RESPONSES = ResponsesEdge(ResponseStore())  # never stores: nothing is answered here

Request = ChatCompletionRequest | CompletionRequest
AUDIO_RATE = 16_000
"""The rate clips are decoded at (Whisper's feature extractor's, Hz); any rate reads the same."""
MIN_AUDIO_SAMPLES = min_audio_samples(160)
"""The shortest clip the audio replica serves (Whisper's 160-sample hop at 16 kHz)."""


def chat_request(endpoint: Endpoint, obj: Any, limits: RequestLimits) -> Request:
    """The chat-path request the router validates for a parsed body of `endpoint`.

    Raises:
        OpenAIError: the 4xx the router answers (the edge's, or the chat validation's).
    """
    if endpoint == "completions":
        return parse_request(CompletionRequest, obj, limits)
    if endpoint == "chat":
        return parse_request(ChatCompletionRequest, obj, limits)
    if endpoint == "count_tokens":
        return parse_request(TokenizeChatRequest, _ANTHROPIC.count_body(obj), limits)
    edge = _ANTHROPIC if endpoint == "messages" else _RESPONSES
    return parse_request(ChatCompletionRequest, asyncio.run(edge.chat_body(obj)), limits)


def local_verdict(
    endpoint: Endpoint,
    body: bytes,
    models: Sequence[str],
    aliases: Sequence[str] = ("auto",),
    limits: RequestLimits | None = None,
) -> tuple[bool, str, Request | None]:
    """Whether the router's edge checks refuse `body`, and why (see the module docstring).

    Returns:
        (invalid, reason, the chat-path request when valid). A check that raised anything but
        an `OpenAIError` counts as invalid, its reason starting with `EDGE_FAILURE`.
    """
    limits = limits or RequestLimits()
    try:
        obj = parse_body(body, limits)
    except OpenAIError as exc:
        return True, str(exc)[:300], None
    except (RecursionError, ValueError, TypeError) as exc:  # beyond what Python can parse
        return True, f"{type(exc).__name__}: {exc}"[:300], None
    try:
        request = chat_request(endpoint, obj, limits)
    except OpenAIError as exc:
        return True, str(exc)[:300], None
    except Exception as exc:  # reported, not raised: the server answers it with a 500
        return True, f"{EDGE_FAILURE}{type(exc).__name__}: {exc!r}"[:300], None
    if request.model is not None and request.model not in (*models, *aliases):
        return True, f"unknown model {request.model!r}"[:300], None
    if endpoint == "chat" and (refusal := media_refusal(request, MediaLimits())):
        return True, refusal[:300], None
    return False, "", request


def media_refusal(request: Request, limits: MediaLimits) -> str:
    """Why every served model refuses the request's image and audio parts, "" if a model that
    reads their modality would load them.

    A text-only model refuses any media part; a multimodal one (`deployments.media.loader`)
    reads one modality, in user messages, within `limits`' counts, and files its decoders can
    read. Runs those decoders (`sources`, `images`, `audio`); `http(s)` URLs are refused
    unfetched, as under the default `allow_urls=False`.
    """
    if not isinstance(request, ChatCompletionRequest):
        return ""
    parts = [(param, message.role, part) for param, message, part in media_parts(request.messages)]
    images = sum(isinstance(part, ImagePart) for _, _, part in parts)
    if images and images < len(parts):
        return "image and audio parts in one request: each served model reads one of them"
    if images > limits.max_images or len(parts) - images > limits.max_audios:
        return f"{len(parts)} media parts, over media.max_images/max_audios"
    try:
        for param, role, part in parts:
            if role != "user":
                return f"{param}: media outside a user message"
            if isinstance(part, ImagePart):
                raw = read_image_url(part.image_url.url, limits, param)
                decode_image(raw, limits, param)
            else:
                raw = decode_base64(part.input_audio.data, limits, param)
                samples = decode_audio(raw, part.input_audio.format, AUDIO_RATE, limits, param)
                if len(samples) < MIN_AUDIO_SAMPLES:  # the processor gives it no audio token
                    return f"{param}: a clip of {len(samples)} samples gets no audio token"
    except OpenAIError as exc:
        return str(exc)
    return ""
