"""Mistral tool calls, all three generations of the format.

Formats (mistral-common tokenizer versions; vLLM `mistral_tool_parser.py`)::

    [TOOL_CALLS] [{"name": "f", "arguments": {...}}, ...]      # before v11
    [TOOL_CALLS]NAME[CALL_ID]ID[ARGS]{...}                      # v11
    [TOOL_CALLS]NAME[ARGS]{...}                                 # v13 and later

Call ids must be 9 alphanumerics (Mistral's tokenizer rejects others): a `[CALL_ID]` of that
shape is kept, any other call gets a fresh one. Non-string values (`3`, `true`) stream and close
like any other JSON (vllm-project/vllm#13622).
"""

from __future__ import annotations

import re
from typing import Any

from deployments.toolcalls.base import ToolParser, random_alnum
from deployments.toolcalls.call_list import CallListReader
from deployments.toolcalls.reader import CallStatus, JsonCallReader
from deployments.toolcalls.scan import Look, match_literal, read_token, skip_ws

TOOL_CALLS = "[TOOL_CALLS]"
CALL_ID = "[CALL_ID]"
ARGS = "[ARGS]"
_NAME = re.compile(r"[^\s\[\]{}\"<>]*")
_ID = re.compile(r"[^\s\[\]{}]*")  # any id; replaced unless 9 alphanumerics
_MISTRAL_ID = re.compile(r"[A-Za-z0-9]{9}")
_CONTENT, _KIND, _LIST, _HEADER, _CALL, _RAW = range(6)


class MistralParser(ToolParser):
    """Parser for `[TOOL_CALLS]` calls (list, v11 and v13+ shapes)."""

    CALL_OPENERS = (TOOL_CALLS,)

    def __init__(self, tools: list[dict[str, Any]] | None = None, prompt_suffix: str = "") -> None:
        """See `ToolParser.__init__`."""
        super().__init__(tools, prompt_suffix)
        self._state = _CONTENT
        self._list = CallListReader(self._sink, 0, 0)
        self._reader: JsonCallReader | None = None

    def _new_call_id(self) -> str:
        return random_alnum(9)

    def _step(self, final: bool) -> bool:
        state, buf = self._state, self._buf
        if state == _CONTENT:
            if self._content_until(self.CALL_OPENERS, final) is None:
                return False
            self._state = _KIND
        elif state == _KIND:  # `[` opens the old list, `{` a bare object, else a name
            p = skip_ws(buf, self._pos)
            if p == len(buf) and not final:
                return False
            first = buf[p : p + 1]
            if first in ("[", "{"):
                self._list = CallListReader(
                    self._sink, p, self._mark, *(("[", ",", "]") if first == "[" else ("", ",", ""))
                )
                self._state = _LIST
            else:
                self._pos, self._reader, self._state = p, None, _HEADER
        elif state == _LIST:
            if self._list.advance(buf, final) is CallStatus.READING:
                return False
            self._pos, self._state = self._list.end, _CONTENT
        elif state == _HEADER:
            look, name, call_id, start = self._header(buf, self._pos)
            if look is Look.PARTIAL and not final:
                return False
            if look is Look.MATCH:
                self._reader = JsonCallReader(self._sink, start, name, call_id)
            self._state = _CALL if look is Look.MATCH else _RAW
        elif state == _CALL:
            assert self._reader is not None, "no call being read"
            status = self._reader.advance(buf, final)
            if status is CallStatus.READING:
                return False
            if status is CallStatus.DONE:
                self._pos, self._state = self._reader.end, _CONTENT
            else:
                self._state = _RAW
        else:
            reader = self._reader
            resume = reader.settle(buf) if reader else self._pos
            if not self._fallback_until(resume, (), final, reader.index if reader else None):
                return False
            self._state = _CONTENT
        return True

    @staticmethod
    def _header(buf: str, pos: int) -> tuple[Look, str, str | None, int]:
        """Read `NAME[CALL_ID]ID[ARGS]` or `NAME[ARGS]`: (look, name, id, arguments offset)."""
        look, i = read_token(buf, pos, "[", _NAME, 256)
        if look is not Look.MATCH:
            return look, "", None, pos
        name, call_id = buf[pos:i], None
        tag = match_literal(buf, i, CALL_ID)
        if tag is Look.MATCH:
            look, j = read_token(buf, i + len(CALL_ID), "[", _ID, 64)
            if look is not Look.MATCH:
                return look, "", None, pos
            call_id = buf[i + len(CALL_ID) : j]
            call_id = call_id if _MISTRAL_ID.fullmatch(call_id) else None
            i = j
        elif tag is Look.PARTIAL:
            return tag, "", None, pos
        look = match_literal(buf, i, ARGS)
        if look is not Look.MATCH:
            return look, "", None, pos
        return Look.MATCH, name, call_id, i + len(ARGS)
