"""Qwen3-Coder / Qwen3.5 XML tool calls.

Format (Qwen3-Coder chat template; vLLM `qwen3coder_tool_parser.py`)::

    <tool_call>
    <function=NAME>
    <parameter=P>
    VALUE
    </parameter>
    </function>
    </tool_call>

Values are unescaped text: one leading and one trailing newline are separators, and the type
comes from the tool's schema (`schema_values.py`). A value ends at the last `</parameter>`
before the next structural boundary (`<parameter=`, `</function>`, `</tool_call>`), so a literal
`</parameter>` inside a value is data (vllm-project/vllm#33965); a missing `</parameter>` is
tolerated. String values stream as JSON-escaped fragments as they arrive (rule S11,
vllm-project/vllm#30439), holding back one trailing newline and any partial tag.
"""

from __future__ import annotations

import json
import re
from typing import Any

from deployments.toolcalls.base import ToolParser
from deployments.toolcalls.scan import (
    Look,
    find_first,
    held_suffix_len,
    look_any,
    read_token,
    skip_ws,
)
from deployments.toolcalls.schema_values import streams_as_string, strip_value, to_json

START, END = "<tool_call>", "</tool_call>"
FUNC, FUNC_END = "<function=", "</function>"
PARAM, PARAM_END = "<parameter=", "</parameter>"
_BOUNDARIES = (PARAM, FUNC_END, END)  # what may follow a value's closing tag
_VALUE_MARKERS = (PARAM_END, *_BOUNDARIES)
_NAME = re.compile(r"[^<>\n]*")
_CONTENT, _BLOCK, _FUNC_NAME, _PARAMS, _PARAM_NAME, _VALUE, _AFTER_FUNC, _RAW = range(8)


class Qwen3CoderParser(ToolParser):
    """Parser for `<tool_call><function=..><parameter=..>` blocks."""

    CALL_OPENERS = (START,)

    def __init__(self, tools: list[dict[str, Any]] | None = None, prompt_suffix: str = "") -> None:
        """See `ToolParser.__init__`."""
        super().__init__(tools, prompt_suffix)
        self._state = _CONTENT
        self._index: int | None = None  # the open call
        self._properties: dict[str, Any] = {}
        self._first_param = True
        self._param: tuple[str, dict[str, Any] | None, bool] = ("", None, True)
        self._vstart = self._vemit = self._search = 0

    def _step(self, final: bool) -> bool:
        state = self._state
        if state == _CONTENT:
            if self._content_until(self.CALL_OPENERS, final) is None:
                return False
            self._index, self._state = None, _BLOCK
        elif state == _RAW:
            if not self._fallback_until(self._pos, (END,), final, self._index):
                return False
            self._state = _CONTENT
        elif state == _VALUE:
            return self._value(final)
        elif state in (_FUNC_NAME, _PARAM_NAME):
            look, i = read_token(self._buf, self._pos, ">", _NAME, 256)
            if look is Look.PARTIAL and not final:
                return False
            name = self._buf[self._pos : i].strip()
            if look is not Look.MATCH:
                self._state = _RAW
            elif state == _FUNC_NAME:
                self._open_function(name, i + 1)
            else:
                self._open_param(name, i + 1)
        else:
            return self._tag(state, final)
        return True

    def _tag(self, state: int, final: bool) -> bool:
        """Handle the tag expected after whitespace in `_BLOCK`, `_PARAMS` or `_AFTER_FUNC`."""
        p = skip_ws(self._buf, self._pos)
        expected = {_BLOCK: (FUNC,), _PARAMS: _BOUNDARIES}.get(state, (END, FUNC))
        look, tag = look_any(self._buf, p, expected)
        if look is Look.PARTIAL and not final:
            return False
        if state == _AFTER_FUNC:
            if tag == FUNC:  # a second function in the same block
                self._mark, self._pos, self._state = p, p + len(FUNC), _FUNC_NAME
            else:  # without `</tool_call>`, what follows is content
                self._pos = p + len(END) if tag == END else self._pos
                self._state = _CONTENT
        elif look is not Look.MATCH:
            self._state = _RAW
        elif tag == FUNC:
            self._pos, self._state = p + len(FUNC), _FUNC_NAME
        elif tag == PARAM:
            self._pos, self._state = p + len(PARAM), _PARAM_NAME
        else:  # `</function>`, or `</tool_call>` with `</function>` missing
            assert self._index is not None, "parameters read outside a function"
            self._sink.args(self._index, "}")
            self._index = None
            self._pos, self._state = p + len(tag), (_AFTER_FUNC if tag == FUNC_END else _CONTENT)
        return True

    def _open_function(self, name: str, after: int) -> None:
        if not name or not self._sink.accepts(name):
            self._state = _RAW
            return
        self._index = self._sink.open(name)
        self._sink.args(self._index, "{")
        props = self._sink.schema(name).get("properties")
        self._properties = props if isinstance(props, dict) else {}
        self._first_param = True
        self._pos, self._state = after, _PARAMS

    def _open_param(self, name: str, after: int) -> None:
        assert self._index is not None, "a parameter outside a function"
        schema = self._properties.get(name)
        schema = schema if isinstance(schema, dict) else None
        streamed = streams_as_string(schema)
        self._param = (name, schema, streamed)
        if streamed:
            self._sink.args(self._index, self._key() + '"')
        self._vstart, self._vemit, self._search = after, -1, after
        self._pos, self._state = after, _VALUE

    def _key(self) -> str:
        sep = "" if self._first_param else ", "
        self._first_param = False
        return f"{sep}{json.dumps(self._param[0], ensure_ascii=False)}: "

    def _value(self, final: bool) -> bool:
        """Find the value's end, streaming what is safe of a string value meanwhile."""
        buf = self._buf
        end, resume, limit = self._value_end(final)
        if end < 0 and final:
            self._state = _RAW  # the output ended inside a parameter: no call
            return True
        assert self._index is not None, "a value outside a function"
        _, schema, streamed = self._param
        if not streamed:
            if end < 0:
                return False
            raw = strip_value(buf[self._vstart : end])
            self._sink.args(self._index, self._key() + to_json(raw, schema))
        else:
            if self._vemit < 0 and (end >= 0 or limit > self._vstart):  # first char known
                lead = end != self._vstart and buf.startswith("\n", self._vstart)
                self._vemit = self._vstart + int(lead)  # the separator newline is not data
            if self._vemit >= 0:
                stop = end if end >= 0 else limit
                if stop > self._vemit and buf[stop - 1] == "\n":
                    stop -= 1  # a trailing newline may be the separator before the tag
                if stop > self._vemit:
                    piece = json.dumps(buf[self._vemit : stop], ensure_ascii=False)[1:-1]
                    self._sink.args(self._index, piece)
                    self._vemit = stop
            if end < 0:
                return False
            self._sink.args(self._index, '"')
        self._pos, self._state = resume, _PARAMS
        return True

    def _value_end(self, final: bool) -> tuple[int, int, int]:
        """Locate the end of the current value.

        Returns:
            `(end, resume, safe)`: the value's end offset and where parsing resumes after it
            (both -1 while unknown), and the offset up to which the value is known to go on.
        """
        buf = self._buf
        while True:
            hit = find_first(buf, _VALUE_MARKERS, self._search)
            if hit is None:
                self._search = len(buf) - held_suffix_len(buf, self._search, _VALUE_MARKERS)
                return -1, -1, self._search
            idx, marker = hit
            if marker != PARAM_END:
                return idx, idx, idx
            after = idx + len(PARAM_END)
            look, _ = look_any(buf, skip_ws(buf, after), _BOUNDARIES)
            if look is Look.MATCH or (look is Look.PARTIAL and final):
                return idx, after, idx
            if look is Look.PARTIAL:
                self._search = idx
                return -1, -1, idx
            self._search = after  # a literal `</parameter>` inside the value
