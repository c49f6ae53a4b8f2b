"""A whole output that is one JSON tool call (or an array of them), without the family's markup.

Some models answer a tool request with the bare call: Qwen2.5-Coder, prompted for Hermes
`<tool_call>` blocks, often writes just::

    {"name": "get_weather", "arguments": {"city": "Paris"}}

or the same inside a ```json fence, or a JSON array of such objects. The whole output (after
reasoning, trimmed) must be that JSON: `name` a declared tool, `arguments` (or `parameters`) an
object, no other key (`JsonCallReader`'s `bare` mode). JSON inside prose, JSON naming an
undeclared function and every other text stay content.

Whether the output is such a call is known only at its end, so from its first `{`, `[` or fence
on the call's events are held back (`CallSink.hold`) until the output ends as a call, or until it
stops looking like one (an unknown key, an undeclared name, a broken JSON, text after it): then
nothing was emitted, and the family's parser reads the text again from the start. Streamed and
non-streamed answers therefore agree (PROTOCOL.md S6).
"""

from __future__ import annotations

from deployments.toolcalls.base import CallSink
from deployments.toolcalls.call_list import CallListReader
from deployments.toolcalls.reader import CallStatus, JsonCallReader
from deployments.toolcalls.scan import Look, match_literal, skip_ws

FENCE = "```json"
FENCE_END = "```"
_OPEN, _JSON, _TAIL = range(3)


class BareCallReader:
    """Decides whether a whole output is bare JSON calls, emitting them if it is."""

    def __init__(self, sink: CallSink, start: int) -> None:
        """Create a reader.

        Args:
            sink: The parser's event sink.
            start: Buffer offset where the output's text begins.
        """
        self._sink = sink
        self._pos = start
        self._state = _OPEN
        self._fence_open = False
        self._reader: JsonCallReader | CallListReader | None = None
        self.status = CallStatus.READING
        self.end = -1

    def advance(self, buf: str, final: bool) -> CallStatus:
        """Read as far as `buf` allows; `final` means the output has ended.

        Returns:
            DONE once the whole output was read as calls (their events released, `end` is
            `len(buf)`), INVALID as soon as it cannot be (nothing was emitted), else READING.
        """
        while self.status is CallStatus.READING and self._step(buf, final):
            pass
        return self.status

    def _step(self, buf: str, final: bool) -> bool:
        state = self._state
        p = skip_ws(buf, self._pos)
        if state != _JSON and p == len(buf):
            return self._end(buf, state == _TAIL and not self._fence_open) if final else False
        if state == _JSON:
            assert self._reader is not None, "no JSON being read"
            status = self._reader.advance(buf, final)
            if status is CallStatus.READING:
                return False
            if status is CallStatus.INVALID:
                return self._end(buf, False)
            self._pos, self._state = self._reader.end, _TAIL
            return True
        fence = FENCE if state == _OPEN else FENCE_END
        if (state == _TAIL) == self._fence_open:  # a fence may open here, or must close here
            look = match_literal(buf, p, fence)
            if look is Look.PARTIAL and not final:
                return False
            if look is Look.MATCH:
                self._fence_open = state == _OPEN
                self._pos = p + len(fence)
                return True
        if state == _TAIL or buf[p] not in "{[":
            return self._end(buf, False)  # text after the JSON, or no JSON at all
        self._sink.hold()
        if buf[p] == "{":
            self._reader = JsonCallReader(self._sink, p, bare=True)
        else:
            self._reader = CallListReader(self._sink, p, p, bare=True)
        self._state = _JSON
        return True

    def _end(self, buf: str, calls: bool) -> bool:
        """Settle the output as calls or as no call; always False (nothing more to read)."""
        if self._reader is not None:
            if calls:
                self._sink.commit()
            else:
                self._sink.discard()
        self.status = CallStatus.DONE if calls else CallStatus.INVALID
        self.end = len(buf)
        return False
