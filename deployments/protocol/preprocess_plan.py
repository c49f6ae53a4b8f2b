"""What the router asks a model replica to do to a prompt, and what the replica reports back.

The router applies the text rules (`configs.preprocessing`) itself and sends the replica a
`PreprocessPlan` next to the request: the truncation policy in force, and the texts it
compacted, so that the replica counts the tokens saved with its own tokenizer. The replica
answers with a `PreprocessReport` attached to its response (non-streamed) or its first chunk,
which the router turns into the `x-ascend-router-preprocess` header and metrics.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

from configs.preprocessing import Truncation

PREPROCESS_HEADER = "x-ascend-router-preprocess"

SystemEdit = Literal["injected", "prepended", "replaced"]
PreprocessRule = Literal["system_prompt", "compact_whitespace", "truncation"]


class PreprocessPlan(BaseModel):
    """The replica's part of preprocessing for one request.

    Attributes:
        system: How the router changed the system prompt, if it did.
        compacted: `(before, after)` texts of each message whose whitespace the router
            compacted, for counting the tokens saved.
        truncation: The truncation policy, or None when it is off.
        fit_context: Truncate to fit the context too (the router sets it only when no
            candidate with a longer context remains); otherwise only `max_prompt_tokens`
            applies and a prompt over the context is answered 400.
    """

    model_config = ConfigDict(frozen=True)

    system: SystemEdit | None = None
    compacted: list[tuple[str, str]] = []
    truncation: Truncation | None = None
    fit_context: bool = False

    def is_empty(self) -> bool:
        """Nothing to do or report."""
        return self.system is None and not self.compacted and self.truncation is None


class PreprocessReport(BaseModel):
    """What preprocessing did to one request, counted with the replica's tokenizer.

    Attributes:
        system: The system-prompt change, if any.
        compacted_messages: Messages whose whitespace was compacted.
        truncated_messages: Messages dropped by truncation.
        tokens_saved: Rule -> prompt tokens it saved (compaction and truncation).
    """

    model_config = ConfigDict(frozen=True)

    system: SystemEdit | None = None
    compacted_messages: int = 0
    truncated_messages: int = 0
    tokens_saved: dict[PreprocessRule, int] = {}

    def header(self) -> str | None:
        """The header value, e.g. `system=injected; truncated_messages=3; tokens_saved=512`;
        None when nothing changed."""
        parts = []
        if self.system is not None:
            parts.append(f"system={self.system}")
        if self.compacted_messages:
            parts.append(f"compacted_messages={self.compacted_messages}")
        if self.truncated_messages:
            parts.append(f"truncated_messages={self.truncated_messages}")
        if parts:
            parts.append(f"tokens_saved={sum(self.tokens_saved.values())}")
        return "; ".join(parts) or None

    def applied(self) -> list[PreprocessRule]:
        """The rules that changed the request."""
        rules: list[PreprocessRule] = []
        if self.system is not None:
            rules.append("system_prompt")
        if self.compacted_messages:
            rules.append("compact_whitespace")
        if self.truncated_messages:
            rules.append("truncation")
        return rules
