"""Whether a model can serve a request at all, whatever the rules say."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from configs.policy_config import ModelCapabilities
    from router.policy.features import RequestFeatures


@dataclass(frozen=True)
class Rejection:
    """Why a model cannot serve a request.

    Attributes:
        param: The request field at fault (OpenAI error `param`), e.g. `"max_tokens"`, or the
            content part a model cannot read, e.g. `"messages[0].content[1]"`.
        reason: Human-readable explanation with the numbers involved.
        estimated: The rejection rests on the prompt-length estimate (context length), which
            only routes: when no model passes, such models are still tried, and the replica's
            exact count decides.
    """

    param: str
    reason: str
    estimated: bool = False


def check_capabilities(features: RequestFeatures, caps: ModelCapabilities) -> Rejection | None:
    """Check a request against one model's capabilities.

    The input modalities are checked first (a model that cannot read the request's images or
    audio cannot serve it at all), then the other capabilities, the context last (so a
    rejection for context means every capability is there). The context check uses the
    estimated prompt tokens: prompt + `max_tokens` must fit in `context_length`; without
    `max_tokens`, the prompt must leave room for one token.

    Args:
        features: The request's features.
        caps: The model's capabilities.

    Returns:
        `None` when the model can serve the request, else the first failed check; a missing
        modality's `param` locates the request's first part of it (e.g.
        `messages[0].content[1]`) and its reason reads `does not take image input`.
    """
    for modality, param in features.media.items():
        if modality not in caps.input_modalities:
            return Rejection(param, f"does not take {modality} input")
    if features.has_tools and not caps.supports_tools:
        return Rejection("tools", "does not support tools")
    if features.response_format != "text" and not caps.supports_structured_output:
        return Rejection(
            "response_format",
            f"does not support structured output (response_format {features.response_format})",
        )
    if features.stream and not caps.supports_streaming:
        return Rejection("stream", "does not support streaming")
    prompt = features.estimated_prompt_tokens
    if prompt >= caps.context_length:
        return Rejection(
            features.input_field,
            f"prompt of ~{prompt} tokens (estimated as characters / 4) does not fit the "
            f"{caps.context_length}-token context",
            estimated=True,
        )
    if features.max_tokens is not None and prompt + features.max_tokens > caps.context_length:
        return Rejection(
            "max_tokens",
            f"prompt of ~{prompt} tokens (estimated as characters / 4) + max_tokens "
            f"{features.max_tokens} exceeds the "
            f"{caps.context_length}-token context",
            estimated=True,
        )
    return None
