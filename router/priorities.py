"""The engine priority one request runs at (`configs.priorities` has the rules), and the level
names that label it in metrics."""

from __future__ import annotations

from configs.priorities import Priorities
from deployments.protocol.errors import OpenAIError
from router.policy import PRIORITY_HEADER

UNSET_LEVEL = "default"
"""The level name of priority 0 when no `priorities` are configured (metrics label it so)."""


def resolve_priority(
    config: Priorities | None,
    tenant: str | None,
    api_key: str | None,
    asked_level: str | None,
    asked_index: int,
    rule_level: str | None = None,
) -> int:
    """The engine priority of a request (a level index; lower runs first).

    Args:
        config: The configured levels; None: every request runs at 0.
        tenant: The `x-ascend-router-tenant` header, if any.
        api_key: The key the request presents, if any.
        asked_level: The `x-ascend-router-priority` header, if any: a level name.
        asked_index: The body's `priority` (0 when not sent): a level index.
        rule_level: The `priority` of the policy rule that decided the request, if it has one.

    Returns:
        The placed level's index, or the level asked for when that is less urgent (an index past
        the last level is the last).

    Raises:
        OpenAIError: 400 when `asked_level` is not a configured level.
    """
    if config is None:
        return 0
    placed = config.placed(tenant, api_key, rule_level)
    asked = min(max(asked_index, 0), len(config.levels) - 1)
    if asked_level is not None:
        if asked_level not in config.levels:
            raise OpenAIError(
                f"header {PRIORITY_HEADER}: {asked_level!r} is not a priority level; the levels "
                f"are {config.levels} (most urgent first), and a request may only lower its own",
                code="invalid_priority",
            )
        asked = max(asked, config.index(asked_level))
    return max(placed, asked)


def level_names(config: Priorities | None) -> list[str]:
    """Level names by engine priority: the configured levels, or one unset level."""
    return list(config.levels) if config is not None else [UNSET_LEVEL]
