"""Truncation of a chat history that does not fit: the oldest whole turns are dropped.

A *turn* is a user message with the assistant and tool messages after it (messages before the
first user message form a turn of their own), so an assistant `tool_calls` message always goes
together with its `tool` results and the roles keep alternating as chat templates expect.
System and developer messages, and the last user turn with everything after it, are never
dropped. The fewest turns that make the prompt fit are found by bisection over the count of
oldest turns dropped (the prompt only shrinks as more are dropped), rendering the template each
time: O(log turns) renders.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

_KEPT_ROLES = ("system", "developer")

Encode = Callable[[list[dict[str, Any]]], tuple[str, list[int]]]
"""Messages -> (rendered prompt text, prompt token ids)."""


@dataclass(frozen=True)
class Truncated:
    """A history after truncation.

    Attributes:
        messages: The messages kept.
        text: Their rendered prompt.
        prompt: Its token ids.
        dropped: Messages dropped.
    """

    messages: list[dict[str, Any]]
    text: str
    prompt: list[int]
    dropped: int


def droppable_turns(messages: list[dict[str, Any]]) -> list[list[int]]:
    """Indices of the messages of each droppable turn, oldest first.

    Args:
        messages: Template-ready messages (`deployments.prompting.tool_history.normalize_history`).

    Returns:
        One index list per turn before the last user message; system and developer messages
        belong to no turn. Empty when there is no user message.
    """
    users = [i for i, m in enumerate(messages) if m["role"] == "user"]
    if not users:
        return []
    turns: list[list[int]] = []
    for i in range(users[-1]):
        role = messages[i]["role"]
        if role in _KEPT_ROLES:
            continue
        if role == "user" or not turns:
            turns.append([])
        turns[-1].append(i)
    return turns


def truncate(
    messages: list[dict[str, Any]], encode: Encode, fits: Callable[[int], bool]
) -> Truncated | None:
    """Drop the fewest oldest turns that make the prompt fit.

    Args:
        messages: Template-ready messages whose prompt does not fit.
        encode: Renders and tokenises a message list.
        fits: Whether a prompt of this many tokens fits.

    Returns:
        The shortest-dropping history that fits; when none does, the history with every
        droppable turn dropped, or None when nothing can be dropped.
    """
    turns = droppable_turns(messages)
    if not turns:
        return None

    def without(count: int) -> Truncated:
        drop = {i for turn in turns[:count] for i in turn}
        kept = [m for i, m in enumerate(messages) if i not in drop]
        text, prompt = encode(kept)
        return Truncated(kept, text, prompt, len(drop))

    low, high = 1, len(turns)
    best = without(high)
    if not fits(len(best.prompt)):
        return best
    while low < high:  # the fewest turns in [low, high] whose dropping fits; `best` drops high
        mid = (low + high) // 2
        candidate = without(mid)
        if fits(len(candidate.prompt)):
            best, high = candidate, mid
        else:
            low = mid + 1
    return best
