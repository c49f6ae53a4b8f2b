"""DeepSeek V2.5 / V3 / R1 tool calls (special tokens with a fenced JSON body).

Format (DeepSeek-V3 and DeepSeek-R1 chat templates; vLLM `deepseekv3_tool_parser.py`)::

    <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME
    ```json
    {ARGS}
    ```<｜tool▁call▁end｜>…<｜tool▁calls▁end｜>

Delimiters use the full-width bar `｜` (U+FF5C) and `▁` (U+2581). One delta may close a call and
open the next (multi-token prediction, sgl-project/sglang#7562), so every call is parsed on its
own. R1's pre-filled `<think>\\n` arrives through `prompt_suffix`. A call whose arguments are not
a JSON object comes back verbatim as content, section markers included when the section held no
valid call (vllm-project/vllm-ascend#7989).
"""

from __future__ import annotations

import re
from typing import Any

from deployments.toolcalls.base import ToolParser
from deployments.toolcalls.reader import CallStatus, JsonCallReader
from deployments.toolcalls.scan import Look, match_literal, read_token, skip_ws

CALLS_BEGIN = "<｜tool▁calls▁begin｜>"
CALLS_END = "<｜tool▁calls▁end｜>"
CALL_BEGIN = "<｜tool▁call▁begin｜>"
CALL_END = "<｜tool▁call▁end｜>"
SEP = "<｜tool▁sep｜>"
_TYPE = re.compile(r"[A-Za-z_]*")
_NAME = re.compile(r"[^<>\n]*")
_CONTENT, _SECTION, _HEADER, _CALL, _TRAILER, _RAW = range(6)


class DeepSeekV3Parser(ToolParser):
    """Parser for DeepSeek V3/R1 tool-call sections."""

    CALL_OPENERS = (CALLS_BEGIN, CALL_BEGIN)
    TRAILER: tuple[str, ...] = ("```", CALL_END)  # optional closers after the arguments

    def __init__(self, tools: list[dict[str, Any]] | None = None, prompt_suffix: str = "") -> None:
        """See `ToolParser.__init__`."""
        super().__init__(tools, prompt_suffix)
        self._state = _CONTENT
        self._reader: JsonCallReader | None = None
        self._valid = False  # the current section emitted a call

    def _header(self, buf: str, pos: int) -> tuple[Look, str, int]:
        """Read `TYPE<｜tool▁sep｜>NAME\\n```json` at `pos`: (look, name, arguments offset)."""
        look, i = read_token(buf, pos, SEP, _TYPE, 32)
        if look is not Look.MATCH and not buf.startswith(SEP, pos):
            return look, "", pos
        start = i + len(SEP) if look is Look.MATCH else pos + len(SEP)
        look, j = read_token(buf, start, "\n", _NAME, 256)
        if look is not Look.MATCH:
            return look, "", pos
        p = skip_ws(buf, j)
        fence = match_literal(buf, p, "```")
        if fence is Look.MATCH:
            p += 3
            fence = match_literal(buf, p, "json")
            p += 4 if fence is Look.MATCH else 0
        if fence is Look.PARTIAL:
            return fence, "", pos
        return Look.MATCH, buf[start:j].strip(), p

    def _step(self, final: bool) -> bool:
        state, buf = self._state, self._buf
        if state == _CONTENT:
            marker = self._content_until(self.CALL_OPENERS, final)
            if marker is None:
                return False
            self._valid = False
            self._state = _SECTION if marker == CALLS_BEGIN else _HEADER
        elif state == _SECTION:
            return self._section(final)
        elif state == _HEADER:
            look, name, start = self._header(buf, self._pos)
            if look is Look.PARTIAL and not final:
                return False
            self._reader = JsonCallReader(self._sink, start, name) if look is Look.MATCH else None
            self._state = _CALL if look is Look.MATCH else _RAW
        elif state == _CALL:
            assert self._reader is not None, "no call being read"
            status = self._reader.advance(buf, final)
            if status is CallStatus.READING:
                return False
            if status is CallStatus.DONE:
                self._pos, self._state = self._reader.end, _TRAILER
            else:
                self._state = _RAW
        elif state == _TRAILER:
            p = self._pos
            for closer in self.TRAILER:
                p = skip_ws(buf, p)
                look = match_literal(buf, p, closer)
                if look is Look.PARTIAL and not final:
                    return False
                p += len(closer) if look is Look.MATCH else 0
            self._pos, self._state, self._valid, self._mark = p, _SECTION, True, -1
        else:
            reader = self._reader
            resume = reader.settle(buf) if reader else self._pos
            index = reader.index if reader else None
            if not self._fallback_until(resume, (CALL_END,), final, index):
                return False
            self._state, self._mark = _SECTION, -1
        return True

    def _section(self, final: bool) -> bool:
        """Between calls: another call, the section's end, or (anything else) content."""
        buf = self._buf
        p = skip_ws(buf, self._pos)
        begin, end = match_literal(buf, p, CALL_BEGIN), match_literal(buf, p, CALLS_END)
        if Look.PARTIAL in (begin, end) and Look.MATCH not in (begin, end) and not final:
            return False
        if begin is Look.MATCH:
            self._mark = self._pos if self._mark < 0 else self._mark
            self._pos, self._state = p + len(CALL_BEGIN), _HEADER
            return True
        stop = p + len(CALLS_END) if end is Look.MATCH else p
        if not self._valid:  # no call in this section: its markup is text
            self._sink.content(buf[self._mark if self._mark >= 0 else self._pos : stop])
        self._pos, self._state = stop, _CONTENT
        return True
