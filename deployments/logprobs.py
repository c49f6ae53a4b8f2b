"""Engine logprobs -> OpenAI logprob objects (chat and legacy completions)."""

from __future__ import annotations

from typing import Any

from deployments.protocol.responses import ChatTokenLogprob, CompletionLogprobs, TopLogprob
from engine.outputs import TokenLogprob


def token_text(tokenizer: Any, token_id: int) -> str:
    """The text of one token, as OpenAI reports it (leading spaces kept)."""
    return tokenizer.decode([token_id], skip_special_tokens=False)


def chat_logprobs(tokenizer: Any, entries: tuple[TokenLogprob, ...]) -> list[ChatTokenLogprob]:
    """Chat `logprobs.content` items for generated tokens."""
    items = []
    for e in entries:
        text = token_text(tokenizer, e.token_id)
        tops = []
        for tid, lp in e.top:
            t = token_text(tokenizer, tid)
            tops.append(TopLogprob(token=t, logprob=lp, bytes=list(t.encode())))
        items.append(
            ChatTokenLogprob(
                token=text, logprob=e.logprob or 0.0, bytes=list(text.encode()), top_logprobs=tops
            )
        )
    return items


def append_completion_logprobs(
    tokenizer: Any,
    target: CompletionLogprobs,
    entries: tuple[TokenLogprob, ...],
    text_offset: int,
) -> int:
    """Append entries to a legacy logprobs object; returns the text offset after them.

    The first echoed prompt token has `token_logprobs` null and `top_logprobs` null.
    """
    for e in entries:
        text = token_text(tokenizer, e.token_id)
        target.tokens.append(text)
        target.token_logprobs.append(e.logprob)
        target.top_logprobs.append(
            None if e.logprob is None else {token_text(tokenizer, t): lp for t, lp in e.top}
        )
        target.text_offset.append(text_offset)
        text_offset += len(text)
    return text_offset
