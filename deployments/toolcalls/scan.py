"""Scanning helpers shared by every tool-call parser.

Three tools, used by all families so that no parser re-implements them:

* marker search (`find_first`) and partial-marker hold-back (`held_suffix_len`): a streamed
  delta may end in the middle of `<tool_call>`, so the undecided tail is held until resolved;
* `match_literal`: a tri-state look-ahead (matches / may still match / cannot match);
* `JsonScanner`: an incremental, string-aware JSON object validator. It finds where an object
  ends (a `}` or `</tool_call>` inside a string value does not end it, the fault behind
  vllm-project/vllm#45167 and ollama/ollama#12017) and tells whether the text so far is still a
  valid prefix of a JSON object (RFC 8259), which rule S11 of PROTOCOL.md needs to stream long
  arguments safely.
"""

from __future__ import annotations

import enum
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass


class Look(enum.Enum):
    """Result of looking for a literal at a position of a growing buffer."""

    MATCH = "match"
    PARTIAL = "partial"  # the buffer ends inside a prefix of the literal: wait for more text
    FAIL = "fail"


def match_literal(buf: str, pos: int, literal: str) -> Look:
    """Whether `buf[pos:]` starts with `literal`, could still do so, or cannot."""
    if len(buf) - pos >= len(literal):
        return Look.MATCH if buf.startswith(literal, pos) else Look.FAIL
    return Look.PARTIAL if literal.startswith(buf[pos:]) else Look.FAIL


def look_any(buf: str, pos: int, literals: tuple[str, ...]) -> tuple[Look, str]:
    """MATCH (with the literal) if one matches at `pos`, PARTIAL if one still may, else FAIL."""
    partial = False
    for literal in literals:
        look = match_literal(buf, pos, literal)
        if look is Look.MATCH:
            return look, literal
        partial = partial or look is Look.PARTIAL
    return (Look.PARTIAL if partial else Look.FAIL), ""


def skip_ws(buf: str, pos: int) -> int:
    """Offset of the first non-whitespace character at or after `pos` (or `len(buf)`)."""
    n = len(buf)
    while pos < n and buf[pos].isspace():
        pos += 1
    return pos


def find_first(buf: str, markers: Iterable[str], start: int) -> tuple[int, str] | None:
    """Earliest occurrence of any marker in `buf[start:]` (the longest one on a tie)."""
    best: tuple[int, str] | None = None
    for marker in markers:
        i = buf.find(marker, start)
        if i != -1 and (
            best is None or i < best[0] or (i == best[0] and len(marker) > len(best[1]))
        ):
            best = (i, marker)
    return best


def held_suffix_len(buf: str, start: int, markers: Iterable[str]) -> int:
    """Length of the longest tail of `buf[start:]` that is a proper prefix of some marker.

    That tail must be held back: the next delta decides whether it opens markup or is text.
    """
    n = len(buf)
    best = 0
    for marker in markers:
        j = buf.find(marker[0], max(start, n - len(marker) + 1))
        while j != -1 and n - j > best:
            if marker.startswith(buf[j:]):
                best = n - j
                break
            j = buf.find(marker[0], j + 1)
    return best


def read_token(
    buf: str, pos: int, stop: str, chars: re.Pattern[str], max_len: int
) -> tuple[Look, int]:
    """Read a non-empty token of `chars` (a `[...]*` pattern) that ends where `stop` starts.

    Returns:
        `(MATCH, offset of stop)`, `(PARTIAL, pos)` while the token may still grow, or
        `(FAIL, pos)` when a character outside `chars` or more than `max_len` of them came.
    """
    idx = buf.find(stop, pos, pos + max_len + len(stop))
    if idx != -1:
        ok = idx > pos and chars.fullmatch(buf, pos, idx) is not None
        return (Look.MATCH, idx) if ok else (Look.FAIL, pos)
    tail = len(buf) - held_suffix_len(buf, pos, (stop,))
    if tail - pos > max_len or chars.fullmatch(buf, pos, tail) is None:
        return Look.FAIL, pos
    return Look.PARTIAL, pos


@dataclass
class JsonMember:
    """One member of the scanned top-level object (absolute buffer offsets).

    Attributes:
        key: The decoded key.
        value_start: Offset of the value's first character, -1 until it is seen.
        value_end: Offset just past the value, -1 until it is complete.
    """

    key: str
    value_start: int = -1
    value_end: int = -1


# Scanner states.
_VALUE, _OBJ_FIRST, _OBJ_KEY, _COLON, _OBJ_NEXT, _ARR_FIRST, _ARR_NEXT = range(7)
_STRING, _ESCAPE, _UNICODE, _LITERAL, _NUMBER, _DONE, _FAILED = range(7, 14)
# Number sub-states; the terminal ones may end the number.
_N_MINUS, _N_ZERO, _N_INT, _N_DOT, _N_FRAC, _N_E, _N_ESIGN, _N_EXP = range(8)
_N_TERMINAL = frozenset((_N_ZERO, _N_INT, _N_FRAC, _N_EXP))
_DIGIT_NEXT = {_N_MINUS: _N_INT, _N_DOT: _N_FRAC, _N_E: _N_EXP, _N_ESIGN: _N_EXP}
_STRING_RUN = re.compile(r'[^"\\\x00-\x1f]*')
_WS = frozenset(" \t\n\r")
_DIGITS = frozenset("0123456789")
_HEX = frozenset("0123456789abcdefABCDEF")
_ESCAPES = frozenset('"\\/bfnrt')
_LITERALS = {"t": "rue", "f": "alse", "n": "ull"}


class JsonScanner:
    """Incremental validator of one JSON object that starts at an offset of a growing buffer.

    Call `advance(buf)` whenever the buffer grows. The scanner stops right after the object's
    closing brace (`done`) or at the first character that no JSON object could continue with
    (`failed`); `pos` is then that end or that character. While neither, `buf[start:pos]` is a
    valid prefix of a JSON object. Members of the top-level object are recorded in `members`
    so that envelope formats (`{"name": ..., "arguments": {...}}`) can locate their parts.
    """

    def __init__(self, start: int) -> None:
        """Start scanning at `start`; leading whitespace is allowed, then `{` must follow."""
        self.pos = start
        self.members: list[JsonMember] = []
        self._state = _VALUE
        self._stack: list[str] = []
        self._key_start = -1
        self._is_key = False
        self._literal = ""
        self._num = _N_MINUS
        self._hex_left = 0

    @property
    def done(self) -> bool:
        """The object is complete; `pos` is just past its closing brace."""
        return self._state == _DONE

    @property
    def failed(self) -> bool:
        """The text stopped being a JSON object prefix at `pos`."""
        return self._state == _FAILED

    def advance(self, buf: str) -> None:
        """Consume `buf[pos:]` as far as the object goes."""
        n = len(buf)
        pos = self.pos
        while pos < n and self._state < _DONE:
            state = self._state
            if state == _STRING:
                pos = _STRING_RUN.match(buf, pos).end()  # type: ignore[union-attr]
                if pos >= n:
                    break
                c = buf[pos]
                if c == '"':
                    pos += 1
                    self._end_string(buf, pos)
                elif c == "\\":
                    pos += 1
                    self._state = _ESCAPE
                else:  # a raw control character is not allowed in a JSON string
                    self._state = _FAILED
                continue
            c = buf[pos]
            if state == _NUMBER and not self._number_char(c):
                if self._num in _N_TERMINAL:
                    self._end_value(pos)  # re-read `c` in the state after the number
                else:
                    self._state = _FAILED
                continue
            if state == _ESCAPE:
                if c == "u":
                    self._state, self._hex_left = _UNICODE, 4
                elif c in _ESCAPES:
                    self._state = _STRING
                else:
                    self._state = _FAILED
                    continue
            elif state == _UNICODE:
                if c not in _HEX:
                    self._state = _FAILED
                    continue
                self._hex_left -= 1
                if self._hex_left == 0:
                    self._state = _STRING
            elif state == _LITERAL:
                if c != self._literal[0]:
                    self._state = _FAILED
                    continue
                self._literal = self._literal[1:]
                if not self._literal:
                    self._end_value(pos + 1)
            elif state != _NUMBER and c not in _WS and not self._structural(c, pos):
                continue
            pos += 1
        self.pos = pos

    def _structural(self, c: str, pos: int) -> bool:
        """Handle `c` between tokens; False (and the scan failed) if it cannot go here."""
        state = self._state
        if state == _VALUE or (state == _ARR_FIRST and c != "]"):
            return self._begin_value(c, pos)
        if state in (_OBJ_FIRST, _OBJ_KEY) and c == '"':
            self._state, self._is_key, self._key_start = _STRING, True, pos
        elif (c == "}" and state in (_OBJ_FIRST, _OBJ_NEXT)) or (
            c == "]" and state in (_ARR_FIRST, _ARR_NEXT)
        ):
            self._stack.pop()
            self._end_value(pos + 1)
        elif c == ":" and state == _COLON:
            self._state = _VALUE
        elif c == "," and state == _OBJ_NEXT:
            self._state = _OBJ_KEY
        elif c == "," and state == _ARR_NEXT:
            self._state = _VALUE
        else:
            self._state = _FAILED
            return False
        return True

    def _begin_value(self, c: str, pos: int) -> bool:
        if not self._stack and c != "{":
            self._state = _FAILED
            return False
        if len(self._stack) == 1 and self._stack[0] == "{":
            self.members[-1].value_start = pos
        if c == "{" or c == "[":
            self._stack.append(c)
            self._state = _OBJ_FIRST if c == "{" else _ARR_FIRST
        elif c == '"':
            self._state, self._is_key = _STRING, False
        elif c in _LITERALS:
            self._state, self._literal = _LITERAL, _LITERALS[c]
        elif c == "-" or c in _DIGITS:
            self._state = _NUMBER
            self._num = _N_MINUS if c == "-" else (_N_ZERO if c == "0" else _N_INT)
        else:
            self._state = _FAILED
            return False
        return True

    def _number_char(self, c: str) -> bool:
        """Advance the number sub-state with `c`; False if `c` cannot continue the number."""
        num = self._num
        if c in _DIGITS:
            if num == _N_ZERO:
                return False
            nxt = _DIGIT_NEXT.get(num, num)
            if num == _N_MINUS and c == "0":
                nxt = _N_ZERO
        elif c == "." and num in (_N_ZERO, _N_INT):
            nxt = _N_DOT
        elif c in "eE" and num in (_N_ZERO, _N_INT, _N_FRAC):
            nxt = _N_E
        elif c in "+-" and num == _N_E:
            nxt = _N_ESIGN
        else:
            return False
        self._num = nxt
        return True

    def _end_string(self, buf: str, end: int) -> None:
        if not self._is_key:
            self._end_value(end)
            return
        if len(self._stack) == 1:
            self.members.append(JsonMember(json.loads(buf[self._key_start : end])))
        self._state = _COLON

    def _end_value(self, end: int) -> None:
        if not self._stack:
            self._state = _DONE
            return
        if len(self._stack) == 1:
            self.members[-1].value_end = end
        self._state = _OBJ_NEXT if self._stack[-1] == "{" else _ARR_NEXT
