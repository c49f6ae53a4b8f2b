"""Whether a rule's condition holds for a request."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from configs.policy_config import Condition
    from router.policy.features import RequestFeatures


def condition_matches(condition: Condition, features: RequestFeatures, alias: str) -> bool:
    """Whether every set field of `condition` holds for the request.

    Args:
        condition: The rule's condition.
        features: The request's features.
        alias: The alias the request resolved to (`auto` when `model` was omitted).

    Returns:
        True when all set fields hold. A threshold on a field the request did not send does not
        hold; `stream`, `tool_choice` and `response_format` use their OpenAI defaults.
    """
    c, f = condition, features
    return (
        (c.model is None or alias in c.model)
        and _in_range(f.temperature, lte=c.temperature_lte, gte=c.temperature_gte)
        and _in_range(f.top_p, lte=c.top_p_lte)
        and _in_range(f.max_tokens, lte=c.max_tokens_lte, gte=c.max_tokens_gte)
        and (c.stream is None or f.stream == c.stream)
        and (c.has_tools is None or f.has_tools == c.has_tools)
        and (c.has_image is None or f.has_image == c.has_image)
        and (c.has_audio is None or f.has_audio == c.has_audio)
        and (c.tool_choice is None or f.tool_choice in c.tool_choice)
        and (c.response_format is None or f.response_format in c.response_format)
        and (c.prompt_tokens_gt is None or f.estimated_prompt_tokens > c.prompt_tokens_gt)
        and _in_range(f.estimated_prompt_tokens, lte=c.prompt_tokens_lte)
        and (c.tenant is None or f.tenant in c.tenant)
        and (c.priority is None or f.priority in c.priority)
    )


def _in_range(value: float | None, lte: float | None = None, gte: float | None = None) -> bool:
    """Whether `gte ≤ value ≤ lte` (unset bounds ignored); an unsent value is in no range."""
    if lte is None and gte is None:
        return True
    if value is None:
        return False
    return (lte is None or value <= lte) and (gte is None or value >= gte)
