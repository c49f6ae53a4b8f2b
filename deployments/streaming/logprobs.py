"""Engine logprobs -> OpenAI logprob objects (chat and legacy completions).

A masked token (grammar, top-k) has logprob -inf, which JSON cannot carry: it is reported as
`MIN_LOGPROB`, as vLLM does (`serving_chat.py`, `max(logprob, -9999.0)`).
"""

from __future__ import annotations

from typing import Any

from deployments.protocol.responses import ChatTokenLogprob, CompletionLogprobs, TopLogprob
from engine.outputs import TokenLogprob

MIN_LOGPROB = -9999.0


def finite(logprob: float) -> float:
    """`logprob` as a JSON-safe number: -inf (and NaN) become `MIN_LOGPROB`."""
    return logprob if logprob >= MIN_LOGPROB else MIN_LOGPROB


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
            tops.append(TopLogprob(token=t, logprob=finite(lp), bytes=list(t.encode())))
        items.append(
            ChatTokenLogprob(
                token=text,
                logprob=finite(e.logprob or 0.0),
                bytes=list(text.encode()),
                top_logprobs=tops,
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
        target.token_logprobs.append(None if e.logprob is None else finite(e.logprob))
        target.top_logprobs.append(
            None if e.logprob is None else {token_text(tokenizer, t): finite(lp) for t, lp in e.top}
        )
        target.text_offset.append(text_offset)
        text_offset += len(text)
    return text_offset
