"""Llama 3.x JSON tool calls.

Format (Meta Llama 3.1/3.2/3.3 model cards, "JSON based tool calling"; vLLM
`llama_tool_parser.py`)::

    {"name": "f", "parameters": {...}}

optionally after `<|python_tag|>`, parallel calls joined by `; ` or written as one JSON array
`[{...}, {...}]` (as Llama 3.2/3.3 often do). `arguments` is accepted for `parameters`. Output
starting with `{` or `[` (after whitespace) or containing `<|python_tag|>` is read as calls; JSON
that is not a call (e.g. an answer the user asked for in JSON) stays content.
"""

from __future__ import annotations

from typing import Any

from deployments.toolcalls.base import ToolParser
from deployments.toolcalls.call_list import CallListReader
from deployments.toolcalls.reader import CallStatus
from deployments.toolcalls.scan import skip_ws

_START, _CONTENT, _KIND, _LIST = range(4)


class Llama3JsonParser(ToolParser):
    """Parser for `{"name", "parameters"}` objects separated by `;`, or a JSON array of them."""

    PYTHON_TAG = "<|python_tag|>"
    CALL_OPENERS = (PYTHON_TAG,)

    def __init__(self, tools: list[dict[str, Any]] | None = None, prompt_suffix: str = "") -> None:
        """See `ToolParser.__init__`."""
        super().__init__(tools, prompt_suffix)
        self._state = _START
        self._list = CallListReader(self._sink, 0, 0)

    def _step(self, final: bool) -> bool:
        state, buf = self._state, self._buf
        if state == _START:  # the output's first non-space character decides
            p = skip_ws(buf, self._pos)
            if p == len(buf) and not final:
                return False
            if p < len(buf) and buf[p] in "{[":
                self._sink.content(buf[self._pos : p])
                self._pos, self._mark, self._state = p, p, _KIND
            else:
                self._state = _CONTENT
        elif state == _CONTENT:
            if self._content_until(self.CALL_OPENERS, final) is None:
                return False
            self._state = _KIND
        elif state == _KIND:  # `[` opens an array, anything else `;`-separated objects
            p = skip_ws(buf, self._pos)
            if p == len(buf) and not final:
                return False
            shape = ("[", ",", "]") if buf.startswith("[", p) else ("", ";", "")
            self._list = CallListReader(self._sink, p, self._mark, *shape)
            self._state = _LIST
        else:
            if self._list.advance(buf, final) is CallStatus.READING:
                return False
            self._pos, self._state = self._list.end, _CONTENT
        return True
