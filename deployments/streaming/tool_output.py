"""One choice's text through the tool-call layer: parser events -> OpenAI message deltas.

Streaming and non-streaming share this path (the non-streamed message is the streamed deltas
accumulated, less the calls voided after they streamed), so the two always agree.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from deployments.toolcalls.assemble import StreamAssembler
from deployments.toolcalls.choice import ToolChoice, parser_for_choice


@dataclass(frozen=True)
class ToolSetup:
    """How a request's outputs are parsed.

    Attributes:
        choice: the validated `tool_choice`.
        parser_name: the model family's parser.
        tools: the request's tools.
        prompt_suffix: the end of the rendered prompt (a pre-opened `<think>` counts).
        constrained: constrained decoding enforces `required` / the named function.
    """

    choice: ToolChoice
    parser_name: str
    tools: list[dict[str, Any]] | None
    prompt_suffix: str
    constrained: bool

    def output(self) -> ToolOutput:
        """A fresh per-choice output processor."""
        parser = parser_for_choice(
            self.choice, self.parser_name, self.tools, self.prompt_suffix, self.constrained
        )
        return ToolOutput(parser)


class ToolOutput:
    """Feeds text to a parser and returns OpenAI `delta` dicts (without `role`)."""

    def __init__(self, parser: Any) -> None:
        self.parser = parser
        self.assembler = StreamAssembler()

    @staticmethod
    def _strip_role(deltas: list[dict[str, Any]]) -> list[dict[str, Any]]:
        out = []
        for d in deltas:
            d = {k: v for k, v in d.items() if k != "role"}
            if d and d != {"content": ""}:
                out.append(d)
        return out

    def push(self, text: str) -> list[dict[str, Any]]:
        """Deltas decided by the next piece of text."""
        return self._strip_role(self.assembler.push(self.parser.feed(text))) if text else []

    @property
    def voided(self) -> frozenset[int]:
        """Calls voided after they had streamed: a non-streamed message leaves them out."""
        return self.assembler.voided

    def finish(self, engine_finish_reason: str | None) -> tuple[list[dict[str, Any]], str]:
        """Last deltas and the finish reason (`tool_calls` iff a call was sent)."""
        deltas = self.assembler.push(self.parser.finish())
        closing, reason = self.assembler.close(engine_finish_reason)
        return self._strip_role(deltas + closing), reason
