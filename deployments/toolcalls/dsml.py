"""DeepSeek V3.2 and V4 DSML tool calls.

Format (reference encoders `encoding_dsv32.py` / `encoding_dsv4.py`; vLLM
`vllm/parser/deepseek_v4.py`, `vllm/tool_parsers/deepseekv32_tool_parser.py`)::

    …content…

    <｜DSML｜tool_calls>
    <｜DSML｜invoke name="get_weather">
    <｜DSML｜parameter name="city" string="true">杭州</｜DSML｜parameter>
    <｜DSML｜parameter name="days" string="false">3</｜DSML｜parameter>
    </｜DSML｜invoke>
    </｜DSML｜tool_calls>

V3.2 names the block `function_calls`; V4 names it `tool_calls`, and its parser reads the V3.2
name too (V4 models write it, sgl-project/sglang#40236). `｜` is U+FF5C. Several invokes in one
block are parallel calls; `dsml_invoke.py` reads each one (values, streaming, cut calls).

Reasoning (V4): in thinking mode the prompt ends with `<think>`, so the output starts inside
reasoning, which ends at `</think>` or at a block opener (`CALL_ENDS_REASONING`, as the reference
decoder and vLLM do). In chat mode (the prompt ends with `</think>`) there is no reasoning.

Malformed output seen in the field (PROTOCOL.md, section DSML, has the same rules):

* the blank line before a block is the format's separator, not content;
* a block holding no invoke is dropped (vllm-project/vllm#56184); one whose invokes are all no
  call comes back verbatim as content, opener and closer included; invalid invokes in a block
  with a call come back as their own raw text;
* an invoke of a declared tool outside any block is a call (the opener omitted at long context,
  vllm-project/vllm#48931); a malformed `<｜DSML｜invoke` outside a block is text;
* stray closers (`</｜DSML｜tool_calls>`, `</｜DSML｜invoke>`, `</｜DSML｜parameter>`) and a stray
  `</think>` are dropped from content, and stray closers and a repeated `<think>` from reasoning;
  a repeated block opener inside a block is skipped;
* text after a block is content (S6), not dropped as the reference decoder's strictness would
  have it (vllm-project/vllm#55954); text inside a block after a call ends the block;
* an invoke whose closer is missing is closed by the block's closer; one cut by the output's end
  is void (its raw text becomes content), the finished invokes before it stay (S7); a closer cut
  by the output's end after the last invoke is dropped, also when the cut split its `｜`
  (3 UTF-8 bytes, which the detokenizer then ends with U+FFFD).
"""

from __future__ import annotations

from typing import Any, ClassVar

from deployments.toolcalls.base import ToolParser
from deployments.toolcalls.dsml_invoke import DSML, INVOKE, INVOKE_END, PARAM_END, InvokeReader
from deployments.toolcalls.reader import CallStatus
from deployments.toolcalls.scan import Look, find_first, held_suffix_len, look_any, skip_ws
from deployments.toolcalls.think import THINK_END, THINK_START

BLOCK_SEP = "\n\n"  # written before every block; part of the markup, not content
REPLACEMENT_CHAR = "\ufffd"  # what the detokenizer makes of a character cut by the output's end
_CONTENT, _BLOCK, _INVOKE, _RAW, _TEXT = range(5)


class DsmlParser(ToolParser):
    """Parser for DSML blocks; subclasses name their blocks in `BLOCKS`.

    `__init_subclass__` derives the markers from `BLOCKS`: `OPENERS`, `CLOSERS`, `CALL_OPENERS`
    (each opener with and without its separator), `STRAY` and `REASONING_DROPS`.
    """

    BLOCKS: ClassVar[tuple[str, ...]] = ()
    OPENERS: ClassVar[tuple[str, ...]] = ()
    CLOSERS: ClassVar[tuple[str, ...]] = ()
    STRAY: ClassVar[tuple[str, ...]] = ()
    CALL_ENDS_REASONING = True

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.OPENERS = tuple(f"<{DSML}{block}>" for block in cls.BLOCKS)
        cls.CLOSERS = tuple(f"</{DSML}{block}>" for block in cls.BLOCKS)
        cls.CALL_OPENERS = (*(BLOCK_SEP + o for o in cls.OPENERS), *cls.OPENERS)
        cls.STRAY = (*cls.CLOSERS, INVOKE_END, PARAM_END)
        cls.REASONING_DROPS = (THINK_START, *cls.STRAY)

    def __init__(self, tools: list[dict[str, Any]] | None = None, prompt_suffix: str = "") -> None:
        """See `ToolParser.__init__`."""
        super().__init__(tools, prompt_suffix)
        self._markers = (*self.CALL_OPENERS, INVOKE, *self.STRAY, THINK_END)
        self._state = _CONTENT
        self._reader: InvokeReader | None = None
        self._start = 0  # where the invoke being read starts
        self._in_block = False  # False: invokes written without their block
        self._valid = False  # the current block (or run of bare invokes) made a call
        # Invokes of the current block that made no call while it has made none yet: (index if
        # it was opened, start, end). Held: the block is text if it never makes a call.
        self._failed: list[tuple[int | None, int, int]] = []

    def _step(self, final: bool) -> bool:
        state = self._state
        if state == _CONTENT:
            marker = self._content_until(self._markers, final)
            if marker is None:
                return False
            if marker in self.CALL_OPENERS:  # `_mark` is the block's start
                self._in_block, self._valid, self._state = True, False, _BLOCK
            elif marker == INVOKE:  # an invoke without its block
                self._in_block, self._valid = False, False
                self._read_invoke(self._mark)
            # else: a stray closer or `</think>`, dropped
        elif state == _BLOCK:
            return self._between(final)
        elif state == _INVOKE:
            return self._invoke(final)
        elif state == _RAW:
            return self._raw(final)
        else:
            return self._text(final)
        return True

    def _between(self, final: bool) -> bool:
        """Inside a block (or after a bare invoke): the next invoke, the end, or other text."""
        buf = self._buf
        p = skip_ws(buf, self._pos)
        if p == len(buf):
            if final:
                self._end_block(p)
            return final
        markers = (INVOKE, *self.CLOSERS, *self.OPENERS)
        look, tag = look_any(buf, p, markers)
        if look is Look.FAIL:  # `｜` cut in half by the output's end decodes as U+FFFD: held
            cut = buf[p:].rstrip(REPLACEMENT_CHAR)
            if len(cut) < len(buf) - p and look_any(cut, 0, markers)[0] is not Look.FAIL:
                look = Look.PARTIAL
        if look is Look.PARTIAL:  # at the output's end: markup cut off, the block ends
            if final:
                self._end_block(len(buf))
            return final
        if tag == INVOKE:
            self._read_invoke(p)
        elif tag in self.CLOSERS:
            self._end_block(p + len(tag))
        elif tag:
            self._pos = p + len(tag)  # the opener repeated
        elif self._in_block and not self._valid:  # text in a block without a call: all text
            self._pos, self._state = p, _TEXT
        else:  # text after the calls, the block's closer missing: content
            self._pos, self._state = p, _CONTENT
        return True

    def _read_invoke(self, start: int) -> None:
        closers = self.CLOSERS if self._in_block else ()  # a bare invoke needs its own closer
        self._reader = InvokeReader(self._sink, start, closers)
        self._start, self._pos, self._state = start, start, _INVOKE

    def _invoke(self, final: bool) -> bool:
        reader = self._reader
        assert reader is not None, "no invoke being read"
        status = reader.advance(self._buf, final)
        if status is CallStatus.READING:
            return False
        if status is CallStatus.DONE:
            self._valid = True
            for index, start, end in self._failed:  # the block made a call: they are no part
                self._sink.fallback(self._buf[start:end], index)
            self._failed.clear()
            self._pos, self._state = reader.end, _BLOCK
        elif not reader.named and not self._in_block:  # `<｜DSML｜invoke` in prose
            end = self._start + len(INVOKE)
            self._sink.content(self._buf[self._start : end])
            self._pos, self._state = end, _CONTENT
        else:
            self._pos, self._state = reader.resume, _RAW
        return True

    def _raw(self, final: bool) -> bool:
        """An invoke that is no call: its raw text runs to its closer or the next invoke."""
        buf = self._buf
        ends = (INVOKE_END, INVOKE, *self.CLOSERS)
        hit = find_first(buf, ends, self._pos)
        if hit is None and not final:
            self._pos = len(buf) - held_suffix_len(buf, self._pos, ends)  # searched up to here
            return False
        stop = len(buf) if hit is None else hit[0]
        if hit is not None and hit[1] == INVOKE_END:
            stop += len(INVOKE_END)
        index = self._reader.index if self._reader else None
        if self._in_block and not self._valid:
            self._failed.append((index, self._start, stop))
        else:
            self._sink.fallback(buf[self._start : stop], index)
        self._pos, self._state = stop, _BLOCK
        return True

    def _text(self, final: bool) -> bool:
        """Text in a block that has made no call: the block is text up to its closer."""
        buf = self._buf
        hit = find_first(buf, self.CLOSERS, self._pos)
        if hit is None and not final:
            self._pos = len(buf) - held_suffix_len(buf, self._pos, self.CLOSERS)
            return False
        self._end_block(len(buf) if hit is None else hit[0] + len(hit[1]), text=True)
        return True

    def _end_block(self, stop: int, text: bool = False) -> None:
        """The block ends at `stop` (its closer, or the output's end).

        Its markup is dropped if it made a call or holds nothing else; otherwise (`text`, or
        invokes that made no call) the whole block is returned verbatim.
        """
        if self._in_block and not self._valid and (text or self._failed):
            start = self._mark
            for index, _, end in self._failed:
                self._sink.fallback(self._buf[start:end], index)
                start = end
            self._sink.content(self._buf[start:stop])
            self._failed.clear()
        self._pos, self._state = stop, _CONTENT


class DeepSeekV32Parser(DsmlParser):
    """DeepSeek V3.2: `<｜DSML｜function_calls>` blocks."""

    BLOCKS = ("function_calls",)


class DeepSeekV4Parser(DsmlParser):
    """DeepSeek V4: `<｜DSML｜tool_calls>` blocks, and the V3.2 name when a V4 model writes it."""

    BLOCKS = ("tool_calls", "function_calls")
