"""Reads a list of JSON envelope calls: `[{call}, {call}]` or `{call}; {call}`.

Used after an opener by Phi-4-mini (`functools[...]`), old Mistral (`[TOOL_CALLS] [...]`) and
Llama 3 JSON (`{...}; {...}`, no brackets). List markup (opener, brackets, separators) is
dropped once one element is a valid call; an invalid element comes back verbatim as content,
and a list with no valid call comes back whole, so nothing the model wrote is lost. A bare list
(`bare.py`) is all calls or none: it must close with its bracket and hold only valid calls.
"""

from __future__ import annotations

from deployments.toolcalls.base import CallSink
from deployments.toolcalls.reader import CallStatus, JsonCallReader
from deployments.toolcalls.scan import Look, match_literal, skip_ws

_OPEN, _ELEM, _CALL, _RAW, _SEP = range(5)


class CallListReader:
    """Reads one list of envelope calls from a parser's buffer."""

    def __init__(
        self,
        sink: CallSink,
        start: int,
        mark: int,
        opening: str = "[",
        separator: str = ",",
        closing: str = "]",
        bare: bool = False,
    ) -> None:
        """Create a reader.

        Args:
            sink: The parser's event sink.
            start: Offset where the list (after optional whitespace) begins.
            mark: Offset where the list's markup began (its opener), for the fallback text.
            opening: The bracket that opens the list, or "" for none.
            separator: What separates elements.
            closing: The bracket that closes the list, or "" (it ends at anything else).
            bare: The list stands without markup (`bare.py`): an invalid element, a missing
                closing bracket or no call at all make the whole list INVALID.
        """
        self._sink = sink
        self._pos = start
        self._mark = mark  # start of markup not yet returned or dropped; -1: none pending
        self._opening, self._separator, self._closing = opening, separator, closing
        self._state = _OPEN if opening else _ELEM
        self._bare = bare
        self._reader = JsonCallReader(sink, start)
        self._valid = False
        self.status = CallStatus.READING
        self.end = -1

    def advance(self, buf: str, final: bool) -> CallStatus:
        """Read as far as `buf` allows.

        Returns:
            DONE once the list ended (`end` is the offset after it), INVALID when the opening
            bracket is missing (nothing was emitted) or a bare list is not all calls (its
            events must be discarded), else READING.
        """
        while self.status is CallStatus.READING and self._step(buf, final):
            pass
        return self.status

    def _step(self, buf: str, final: bool) -> bool:
        state = self._state
        p = skip_ws(buf, self._pos)
        if state in (_OPEN, _ELEM, _SEP) and p == len(buf) and not final:
            return False
        if state == _OPEN:
            look = match_literal(buf, p, self._opening)
            if look is Look.PARTIAL and not final:
                return False
            if look is not Look.MATCH:
                self.status = CallStatus.INVALID
                return False
            self._pos, self._state = p + len(self._opening), _ELEM
        elif state == _ELEM:
            if p == len(buf) or (self._closing and buf[p] == self._closing):  # `[]`, `[{..},]`
                self._pos, self._state = p, _SEP
                return True
            self._mark = p if self._mark < 0 else self._mark
            self._reader = JsonCallReader(self._sink, p, bare=self._bare)
            self._pos, self._state = p, _CALL
        elif state == _CALL:
            status = self._reader.advance(buf, final)
            if status is CallStatus.READING:
                return False
            if status is CallStatus.DONE:
                self._valid, self._mark = True, -1
                self._pos, self._state = self._reader.end, _SEP
            elif self._bare:
                self.status = CallStatus.INVALID
                return False
            else:
                self._state = _RAW
        elif state == _RAW:
            stop = self._reader.settle(buf)
            if stop is None:
                if not final:
                    return False
                stop = len(buf)
            self._sink.fallback(buf[self._mark : stop], self._reader.index)
            self._pos, self._mark, self._state = stop, -1, _SEP
        else:
            if match_literal(buf, p, self._separator) is Look.MATCH:
                self._mark = self._pos if self._mark < 0 else self._mark
                self._pos, self._state = p + len(self._separator), _ELEM
            elif self._closing and match_literal(buf, p, self._closing) is Look.MATCH:
                self._mark = self._pos if self._mark < 0 else self._mark
                self._close(buf, p + len(self._closing), True)
            else:  # the list ends without its closing bracket; what follows is content
                self._close(buf, self._pos, not self._closing)
        return True

    def _close(self, buf: str, end: int, closed: bool) -> None:
        if self._bare and not (closed and self._valid):
            self.status = CallStatus.INVALID
            return
        if self._mark >= 0 and not self._valid:
            self._sink.content(buf[self._mark : end])
        self.end, self.status = end, CallStatus.DONE
