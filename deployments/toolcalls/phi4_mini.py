"""Phi-4-mini tool calls.

Format (microsoft/Phi-4-mini-instruct model card and chat template; vLLM
`phi4mini_tool_parser.py`)::

    functools[{"name": "f", "arguments": {...}}, {"name": "g", "parameters": {...}}]

`functools` is ordinary text split over several tokens, so its prefix is held back until it is
resolved; `parameters` is an alias of `arguments`; arguments may nest arrays. A `functools` not
followed by `[` is plain text.
"""

from __future__ import annotations

from typing import Any

from deployments.toolcalls.base import ToolParser
from deployments.toolcalls.call_list import CallListReader
from deployments.toolcalls.reader import CallStatus

_CONTENT, _LIST = range(2)


class Phi4MiniParser(ToolParser):
    """Parser for `functools[...]` call lists."""

    OPENER = "functools"
    CALL_OPENERS = ("functools[",)

    def __init__(self, tools: list[dict[str, Any]] | None = None, prompt_suffix: str = "") -> None:
        """See `ToolParser.__init__`."""
        super().__init__(tools, prompt_suffix)
        self._state = _CONTENT
        self._list = CallListReader(self._sink, 0, 0)

    def _step(self, final: bool) -> bool:
        if self._state == _CONTENT:
            if self._content_until((self.OPENER,), final) is None:
                return False
            self._list = CallListReader(self._sink, self._pos, self._mark)
            self._state = _LIST
            return True
        status = self._list.advance(self._buf, final)
        if status is CallStatus.READING:
            return False
        if status is CallStatus.DONE:
            self._pos = self._list.end
        else:  # no `[`: the word was text
            self._sink.content(self._buf[self._mark : self._pos])
        self._state = _CONTENT
        return True
