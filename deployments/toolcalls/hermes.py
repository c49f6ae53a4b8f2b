"""Hermes-style tool calls, as emitted by Qwen2, Qwen2.5 and Qwen3.

Format (Qwen2.5/Qwen3 chat templates, `tool_call` section; NousResearch Hermes-2-Pro)::

    <tool_call>
    {"name": "f", "arguments": {...}}
    </tool_call>

one block per call. The block's JSON ends at its matching brace, string-aware, so a literal
`</tool_call>` inside a value is data (vllm-project/vllm#45167). A block that is not a valid
call (undeclared name, broken JSON) comes back verbatim as content; a missing `</tool_call>`
after a complete call is tolerated. An output that is nothing but a call's JSON, without the
tags (Qwen2.5-Coder writes these, often inside a ```json fence), is read as that call
(`bare.py`).
"""

from __future__ import annotations

from typing import Any

from deployments.toolcalls.bare import BareCallReader
from deployments.toolcalls.base import ToolParser
from deployments.toolcalls.reader import CallStatus, JsonCallReader
from deployments.toolcalls.scan import Look, match_literal, skip_ws

_BARE, _CONTENT, _CALL, _AFTER, _RAW = range(5)


class HermesParser(ToolParser):
    """Parser for `<tool_call>{json}</tool_call>` blocks."""

    START = "<tool_call>"
    END = "</tool_call>"
    CALL_OPENERS = (START,)

    def __init__(self, tools: list[dict[str, Any]] | None = None, prompt_suffix: str = "") -> None:
        """See `ToolParser.__init__`."""
        super().__init__(tools, prompt_suffix)
        self._state = _BARE
        self._bare = BareCallReader(self._sink, 0)
        self._reader = JsonCallReader(self._sink, 0)

    def _step(self, final: bool) -> bool:
        state = self._state
        if state == _BARE:  # the whole output may be a call without tags
            status = self._bare.advance(self._buf, final)
            if status is CallStatus.READING:
                return False
            if status is CallStatus.DONE:
                self._pos = self._bare.end
            self._state = _CONTENT  # else: read it again from the start, as usual
        elif state == _CONTENT:
            if self._content_until(self.CALL_OPENERS, final) is None:
                return False
            self._reader = JsonCallReader(self._sink, self._pos)
            self._state = _CALL
        elif state == _CALL:
            status = self._reader.advance(self._buf, final)
            if status is CallStatus.READING:
                return False
            if status is CallStatus.DONE:
                self._pos, self._state = self._reader.end, _AFTER
            else:
                self._state = _RAW
        elif state == _AFTER:
            p = skip_ws(self._buf, self._pos)
            look = match_literal(self._buf, p, self.END)
            if look is Look.PARTIAL and not final:
                return False
            if look is Look.MATCH:
                self._pos = p + len(self.END)
            self._state = _CONTENT  # without an end tag, what follows is content
        else:
            resume = self._reader.settle(self._buf)
            if not self._fallback_until(resume, (self.END,), final, self._reader.index):
                return False
            self._state = _CONTENT
        return True
