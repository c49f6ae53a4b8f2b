"""The replica's part of gateway preprocessing: truncation, and counting what was saved.

The router sends a `PreprocessPlan` with the request (`router.prompt_rules`); this module runs it
against the exact prompt: it truncates the history when the plan's truncation applies, and
counts the tokens that compaction and truncation saved with this model's tokenizer.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from deployments.prompting.truncation import Encode, truncate
from deployments.protocol.preprocess_plan import PreprocessPlan, PreprocessReport, PreprocessRule


def run_plan(
    plan: PreprocessPlan,
    messages: list[dict[str, Any]],
    encode: Encode,
    count_tokens: Callable[[str], int],
    max_model_len: int,
    output_limit: int | None,
) -> tuple[str, list[int], PreprocessReport]:
    """Render the prompt of `messages`, truncated if the plan says so, and report.

    Truncation runs when the prompt does not fit: over `max_prompt_tokens`, or, with
    `plan.fit_context`, over the context less the completion's room (`output_limit` tokens, else
    `min_output_tokens`). When dropping every droppable turn still leaves it over the context,
    nothing is dropped, and the context check answers 400 as without truncation.

    Args:
        plan: The router's plan.
        messages: Template-ready messages (`normalize_history`).
        encode: Renders and tokenises a message list: (prompt text, token ids).
        count_tokens: Tokens of one text, for the compaction savings.
        max_model_len: The model's context, tokens.
        output_limit: The request's completion limit, tokens; None when not sent.

    Returns:
        The prompt text, its token ids and the report.
    """
    text, prompt = encode(messages)
    saved: dict[PreprocessRule, int] = {}
    if plan.compacted:
        saved["compact_whitespace"] = sum(
            count_tokens(before) - count_tokens(after) for before, after in plan.compacted
        )
    dropped = 0
    rule = plan.truncation
    if rule is not None:
        room = max_model_len - (
            output_limit if output_limit is not None else rule.min_output_tokens
        )

        def in_context(n: int) -> bool:
            return not plan.fit_context or n <= room

        def fits(n: int) -> bool:
            return in_context(n) and (rule.max_prompt_tokens is None or n <= rule.max_prompt_tokens)

        cut = None if fits(len(prompt)) else truncate(messages, encode, fits)
        if cut is not None and in_context(len(cut.prompt)):
            saved["truncation"] = len(prompt) - len(cut.prompt)
            text, prompt, dropped = cut.text, cut.prompt, cut.dropped
    report = PreprocessReport(
        system=plan.system,
        compacted_messages=len(plan.compacted),
        truncated_messages=dropped,
        tokens_saved=saved,
    )
    return text, prompt, report
