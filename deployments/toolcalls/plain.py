"""Text-only parser: reasoning is split off, everything else is content.

Used for `tool_choice: "none"` (OpenAI: the model must not call tools, so markup the model
writes anyway is returned verbatim, PROTOCOL.md rule S5) and for families without tool calls.
"""

from __future__ import annotations

from deployments.toolcalls.base import ToolParser


class PlainTextParser(ToolParser):
    """Never emits calls; `<think>` reasoning still goes to `reasoning_content`."""

    def _step(self, final: bool) -> bool:
        self._content_until((), final)
        return False
