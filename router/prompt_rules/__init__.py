"""The prompt rules of gateway preprocessing, applied per candidate model: the router's text
rules and the replica's plan.

The rules in force for a request sent to one model come from `configs.preprocessing` (the
router's `preprocessing:` config; tenant over model over alias). The router applies
system-prompt injection and whitespace compaction to a copy of the request, and hands the model
replica a `PreprocessPlan`: the truncation policy, and the compacted texts for counting tokens
saved with its tokenizer.
"""

from __future__ import annotations

from typing import TypeVar

from configs.preprocessing import PreprocessRules
from deployments.protocol.preprocess_plan import PreprocessPlan, SystemEdit
from deployments.protocol.requests import ChatCompletionRequest, ChatMessage, CompletionRequest
from router.prompt_rules.compaction import compact_text
from router.prompt_rules.system_prompt import apply_system_prompt

Req = TypeVar("Req", ChatCompletionRequest, CompletionRequest)

__all__ = ["apply_prompt_rules", "compact_text"]


def _compact(messages: list[ChatMessage]) -> tuple[list[ChatMessage], list[tuple[str, str]]]:
    """User messages compacted (text parts one by one); `(before, after)` of each change."""
    out: list[ChatMessage] = []
    changes: list[tuple[str, str]] = []
    for m in messages:
        if m.role != "user" or not m.content:
            out.append(m)
            continue
        if isinstance(m.content, str):
            after = compact_text(m.content)
            content: object = after
            if after != m.content:
                changes.append((m.content, after))
        else:
            parts = []
            for part in m.content:
                text = getattr(part, "text", None)
                if text is None:
                    parts.append(part)
                    continue
                after = compact_text(text)
                if after != text:
                    changes.append((text, after))
                parts.append(part.model_copy(update={"text": after}))
            content = parts
        out.append(m.model_copy(update={"content": content}))
    return out, changes


def apply_prompt_rules(
    request: Req, rules: PreprocessRules, fit_context: bool
) -> tuple[Req, PreprocessPlan | None]:
    """Apply the router's rules to a copy of `request` and plan the replica's part.

    Args:
        request: The validated request (left unchanged; legacy completions pass as they are).
        rules: The rules in force for the model it is sent to (`Preprocessing.resolve`).
        fit_context: No candidate with a longer context follows this model, so truncation may
            drop turns to fit its context.

    Returns:
        The request to send and the replica's plan (None when there is nothing to do).
    """
    if not isinstance(request, ChatCompletionRequest):
        return request, None
    messages = request.messages
    system: SystemEdit | None = None
    compacted: list[tuple[str, str]] = []
    if rules.system_prompt:
        messages, system = apply_system_prompt(messages, rules.system_prompt)
    if rules.compact_whitespace:
        messages, compacted = _compact(messages)
    truncation = rules.truncation or None
    plan = PreprocessPlan(
        system=system, compacted=compacted, truncation=truncation, fit_context=fit_context
    )
    if plan.is_empty():
        return request, None
    changed = (
        request.model_copy(update={"messages": messages})
        if messages is not request.messages
        else request
    )
    return changed, plan
