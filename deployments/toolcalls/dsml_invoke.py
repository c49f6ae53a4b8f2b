"""Reads one DSML `invoke` (DeepSeek V3.2 / V4) and streams the call it makes.

Shape (reference encoder `encode_arguments_to_dsml`; `dsml.py` reads the block around it)::

    <｜DSML｜invoke name="NAME">
    <｜DSML｜parameter name="P" string="true">VALUE</｜DSML｜parameter>
    </｜DSML｜invoke>

Rules (PROTOCOL.md, section DSML):

* A value ends only at the exact `</｜DSML｜parameter>`; `string="true"` text is data, verbatim
  (quotes, `<`, `&`, newlines, other DSML tags). Its value is typed by the flag first and the
  schema second (`schema_values.flagged_to_json`); a value that will be a string streams as
  JSON-escaped fragments as it arrives, holding back only a tail that may begin the closer (S11).
* The call opens at its first parameter (or its end), is whole only at `</｜DSML｜invoke>` (or the
  block's closer when the invoke's own closer is missing), and is void if the output ends first:
  a call cut by `max_tokens` is never returned whole (S7).
* A parameter name seen before in the invoke is dropped (the first value already streamed).
* A lone `arguments` or `input` parameter that is not a schema field and holds a JSON object
  whose keys all are schema fields is unwrapped (vLLM `_repair_param_dict`,
  sgl-project/sglang#38924).
* A JSON object instead of parameters is read as the arguments (SGLang's "Direct JSON" body).
* Anything else (an undeclared name, a malformed tag, text between parameters) makes the invoke
  no call; its parser returns the raw text as content.
"""

from __future__ import annotations

import enum
import json
import logging
import re
from typing import Any

from deployments.toolcalls.base import CallSink
from deployments.toolcalls.reader import CallStatus, JsonCallReader
from deployments.toolcalls.scan import Look, held_suffix_len, look_any, read_token, skip_ws
from deployments.toolcalls.schema_values import (
    accepts_string,
    flagged_to_json,
    parse_json,
    streams_as_string,
)

logger = logging.getLogger(__name__)

DSML = "｜DSML｜"
INVOKE, INVOKE_END = f"<{DSML}invoke", f"</{DSML}invoke>"
PARAM, PARAM_END = f"<{DSML}parameter", f"</{DSML}parameter>"
WRAPPERS = ("arguments", "input")
_INVOKE_ATTRS = re.compile(r'\s+name="(?P<name>[^"\n]+)"\s*')
_PARAM_ATTRS = re.compile(r'\s+name="(?P<name>[^"\n]+)"(?:\s+string="(?P<string>true|false)")?\s*')
_ATTR_CHARS = re.compile(r"[^<>]*")
_TAG_MAX = 512
_FLAGS = {"true": True, "false": False}


class _State(enum.Enum):
    TAG = "tag"  # the invoke's own tag
    PARAMS = "params"  # between parameters
    VALUE = "value"
    JSON = "json"  # a JSON body instead of parameters


class _Mode(enum.Enum):
    STREAM = "stream"  # a string value, streamed as it arrives
    BUFFER = "buffer"  # converted once whole
    WRAP = "wrap"  # a possible `arguments` wrapper: decided at the invoke's end
    SKIP = "skip"  # a duplicate name


_Param = tuple[str, bool | None, dict[str, Any] | None, _Mode]
"""The value being read: parameter name, its `string=` flag, its schema, how it is read."""


class InvokeReader:
    """Reads one invoke that starts at `<｜DSML｜invoke` at an offset of its parser's buffer."""

    def __init__(self, sink: CallSink, start: int, closers: tuple[str, ...]) -> None:
        """Create a reader.

        Args:
            sink: The parser's event sink.
            start: Buffer offset of the invoke's `<｜DSML｜invoke`.
            closers: The block closers, which also end an invoke whose closer is missing.
        """
        self._sink = sink
        self._pos = start
        self._closers = closers
        self._state = _State.TAG
        self._name = ""
        self._props: dict[str, Any] = {}
        self._seen: set[str] = set()
        self._keyed = False  # a key went out: the arguments need their closing brace
        self._json: JsonCallReader | None = None
        self._wrapper: tuple[str, str, bool | None] | None = None
        self._param: _Param = ("", None, None, _Mode.SKIP)
        self._vstart = self._vemit = self._search = 0
        self.status = CallStatus.READING
        self.index: int | None = None
        self.named = False  # the tag parsed (else `<｜DSML｜invoke` may be prose)
        self.end = -1  # DONE: offset past the invoke
        self.resume = start + 1  # INVALID: where a search for the markup's end may start

    def advance(self, buf: str, final: bool) -> CallStatus:
        """Read `buf` as far as it goes; `final` means no more text will come."""
        while self.status is CallStatus.READING and self._step(buf, final):
            pass
        return self.status

    def _step(self, buf: str, final: bool) -> bool:
        state = self._state
        if state is _State.TAG:
            look, m, end = _tag(buf, self._pos, INVOKE, _INVOKE_ATTRS, final)
            if look is Look.PARTIAL:
                return False
            self.named = m is not None
            if m is None or not self._sink.accepts(m["name"]):
                return self._invalid(self._pos + 1)
            self._name = m["name"]
            props = self._sink.schema(self._name).get("properties")
            self._props = props if isinstance(props, dict) else {}
            self._pos, self._state = end, _State.PARAMS
            return True
        if state is _State.PARAMS:
            return self._between(buf, final)
        if state is _State.VALUE:
            return self._value(buf, final)
        assert self._json is not None, "no JSON body being read"
        status = self._json.advance(buf, final)
        if status is CallStatus.READING:
            return False
        self.index = self._json.index
        if status is CallStatus.INVALID:
            resume = self._json.settle(buf)
            return self._invalid(len(buf) if resume is None else resume)
        self._pos, self._state = self._json.end, _State.PARAMS
        return True

    def _between(self, buf: str, final: bool) -> bool:
        """After the tag or a value: a parameter, a JSON body, or the invoke's end."""
        p = skip_ws(buf, self._pos)
        if p == len(buf):
            return self._invalid(p) if final else False
        fresh = self.index is None and not self._seen
        if fresh and buf[p] == "{":
            self._json = JsonCallReader(self._sink, p, self._name)
            self._state = _State.JSON
            return True
        look, tag = look_any(buf, p, (PARAM, INVOKE_END, *self._closers))
        if look is Look.PARTIAL and not final:
            return False
        if tag == PARAM and self._json is None:
            return self._param_tag(buf, p, final)
        if tag and tag != PARAM:
            self._close(p + len(tag) if tag == INVOKE_END else p)
            return False
        return self._invalid(p)  # text between parameters, or a parameter after a JSON body

    def _param_tag(self, buf: str, p: int, final: bool) -> bool:
        look, m, end = _tag(buf, p, PARAM, _PARAM_ATTRS, final)
        if look is Look.PARTIAL:
            return False
        if m is None:
            return self._invalid(p)
        name, flag = m["name"], _FLAGS.get(m["string"] or "")
        schema = self._props.get(name)
        schema = schema if isinstance(schema, dict) else None
        self._flush_wrapper()
        if name in self._seen:
            logger.warning(
                "DSML call %r repeats parameter %r: later value dropped", self._name, name
            )
            mode = _Mode.SKIP
        elif not self._seen and name in WRAPPERS and self._props and name not in self._props:
            mode = _Mode.WRAP
        elif (flag is True and accepts_string(schema)) or (
            flag is None and streams_as_string(schema)
        ):
            mode = _Mode.STREAM  # it will be a string whatever its text
        else:
            mode = _Mode.BUFFER
        self._seen.add(name)
        index = self._open()
        if mode is _Mode.STREAM:
            self._sink.args(index, self._key(name) + '"')
        self._param = (name, flag, schema, mode)
        self._vstart = self._vemit = self._search = end
        self._pos, self._state = end, _State.VALUE
        return True

    def _value(self, buf: str, final: bool) -> bool:
        """Find the value's closer, streaming what is safe of a string value meanwhile."""
        name, flag, schema, mode = self._param
        idx = buf.find(PARAM_END, self._search)
        if idx < 0:
            if final:
                return self._invalid(len(buf))  # the output ended inside a value
            self._search = len(buf) - held_suffix_len(buf, self._search, (PARAM_END,))
            if mode is _Mode.STREAM:
                self._stream(buf, self._search)
            return False
        index = self._open()
        text = buf[self._vstart : idx]
        if mode is _Mode.STREAM:
            self._stream(buf, idx)
            self._sink.args(index, '"')
        elif mode is _Mode.BUFFER:
            self._sink.args(index, self._key(name) + flagged_to_json(text, flag, schema))
        elif mode is _Mode.WRAP:
            self._wrapper = (name, text, flag)
        self._pos, self._state = idx + len(PARAM_END), _State.PARAMS
        return True

    def _stream(self, buf: str, stop: int) -> None:
        if stop > self._vemit:
            piece = json.dumps(buf[self._vemit : stop], ensure_ascii=False)[1:-1]
            self._sink.args(self._open(), piece)
            self._vemit = stop

    def _close(self, end: int) -> None:
        """The invoke ended: finish its arguments; the call is whole."""
        index = self._open()
        wrapper = self._wrapper
        inner = _unwrapped(wrapper[1], self._props) if wrapper is not None else None
        if wrapper is not None and inner is not None:
            logger.info("DSML call %r: unwrapped its lone %r parameter", self._name, wrapper[0])
            self._wrapper = None
            self._sink.args(index, inner)
        elif self._json is None:
            self._flush_wrapper()
            self._sink.args(index, "}" if self._keyed else "{}")
        self.end, self.status = end, CallStatus.DONE

    def _flush_wrapper(self) -> None:
        """A held `arguments` parameter turned out to be an ordinary one."""
        if self._wrapper is not None:
            name, text, flag = self._wrapper
            self._wrapper = None
            self._sink.args(self._open(), self._key(name) + flagged_to_json(text, flag, None))

    def _open(self) -> int:
        if self.index is None:
            self.index = self._sink.open(self._name)
        return self.index

    def _key(self, name: str) -> str:
        sep = ", " if self._keyed else "{"
        self._keyed = True
        return f"{sep}{json.dumps(name, ensure_ascii=False)}: "

    def _invalid(self, resume: int) -> bool:
        self.resume, self.status = resume, CallStatus.INVALID
        return False


def _tag(
    buf: str, pos: int, prefix: str, attrs: re.Pattern[str], final: bool
) -> tuple[Look, re.Match[str] | None, int]:
    """Read the tag `prefix ATTRS>` at `pos` (the prefix is known to match).

    Returns:
        `(MATCH, attributes, offset past '>')`, `(PARTIAL, None, -1)` while it may still come,
        or `(FAIL, None, -1)`.
    """
    start = pos + len(prefix)
    look, gt = read_token(buf, start, ">", _ATTR_CHARS, _TAG_MAX)
    if look is not Look.MATCH:
        return (Look.FAIL if final else look), None, -1
    m = attrs.fullmatch(buf, start, gt)
    return (Look.MATCH if m else Look.FAIL), m, gt + 1


def _unwrapped(text: str, props: dict[str, Any]) -> str | None:
    """The arguments inside a lone wrapper parameter's `text`, or None if it is no wrapper."""
    try:
        inner = parse_json(text)
        if isinstance(inner, str):
            inner = parse_json(inner)
    except ValueError:
        return None
    if not isinstance(inner, dict) or not set(inner) <= set(props):
        return None
    return json.dumps(inner, ensure_ascii=False)
