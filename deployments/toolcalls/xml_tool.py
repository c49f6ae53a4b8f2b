"""The router's own simple XML tool-call format.

Format::

    <tool name="NAME">{"arg": ...}</tool>

one element per call; single quotes around the name are accepted. The JSON body ends at its
matching brace, string-aware, so `</tool>` or `<tool name=` inside a string value is data
(ollama/ollama#12017, vllm-project/vllm#45167); a missing `</tool>` after a complete body is
tolerated. Any name valid for the request's tools is accepted (dots, dashes, colons).
"""

from __future__ import annotations

import re
from typing import Any

from deployments.toolcalls.base import ToolParser
from deployments.toolcalls.reader import CallStatus, JsonCallReader
from deployments.toolcalls.scan import Look, match_literal, read_token, skip_ws

_NAME = re.compile(r"[^\s\"'<>]*")
_CONTENT, _HEADER, _CALL, _AFTER, _RAW = range(5)


class XmlToolParser(ToolParser):
    """Parser for `<tool name="x">{json}</tool>` elements."""

    START = "<tool name="
    END = "</tool>"
    CALL_OPENERS = (START,)

    def __init__(self, tools: list[dict[str, Any]] | None = None, prompt_suffix: str = "") -> None:
        """See `ToolParser.__init__`."""
        super().__init__(tools, prompt_suffix)
        self._state = _CONTENT
        self._reader: JsonCallReader | None = None

    def _step(self, final: bool) -> bool:
        state, buf = self._state, self._buf
        if state == _CONTENT:
            if self._content_until(self.CALL_OPENERS, final) is None:
                return False
            self._reader, self._state = None, _HEADER
        elif state == _HEADER:
            return self._header(final)
        elif state == _CALL:
            assert self._reader is not None, "no call being read"
            status = self._reader.advance(buf, final)
            if status is CallStatus.READING:
                return False
            self._state = _AFTER if status is CallStatus.DONE else _RAW
            self._pos = self._reader.end if status is CallStatus.DONE else self._pos
        elif state == _AFTER:
            p = skip_ws(buf, self._pos)
            look = match_literal(buf, p, self.END)
            if look is Look.PARTIAL and not final:
                return False
            if look is Look.MATCH:
                self._pos = p + len(self.END)
            self._state = _CONTENT  # without an end tag, what follows is content
        else:
            reader = self._reader
            resume = reader.settle(buf) if reader else self._pos
            index = reader.index if reader else None
            if not self._fallback_until(resume, (self.END,), final, index):
                return False
            self._state = _CONTENT
        return True

    def _header(self, final: bool) -> bool:
        """Read `"NAME">` after `<tool name=`."""
        buf, p = self._buf, self._pos
        if p == len(buf):
            if not final:
                return False
            self._state = _RAW
            return True
        quote = buf[p]
        look, i = (Look.FAIL, p)
        if quote in "\"'":
            look, i = read_token(buf, p + 1, quote, _NAME, 256)
        if look is Look.MATCH:
            j = skip_ws(buf, i + 1)
            look = match_literal(buf, j, ">")
            if look is Look.MATCH:
                self._reader = JsonCallReader(self._sink, j + 1, name=buf[p + 1 : i])
                self._state = _CALL
                return True
        if look is Look.PARTIAL and not final:
            return False
        self._state = _RAW
        return True
