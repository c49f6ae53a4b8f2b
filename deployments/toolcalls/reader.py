"""Reads one tool call whose arguments are a JSON object, streaming them as they arrive.

Two shapes cover every JSON family:

* envelope: `{"name": "f", "arguments": {...}}` (Hermes/Qwen, Llama 3 with the `parameters`
  alias, Phi-4-mini, old Mistral). Keys may come in any order; `arguments` written as a JSON
  *string* is decoded once (Qwen models sometimes do this, see PROTOCOL.md);
* arguments only: the name came from the surrounding markup (DeepSeek, Mistral v11+, XML).

The arguments string is the model's own text of the object, so streamed fragments are exact
prefixes of it (rule S2/S3) and non-ASCII stays literal (S10). A call opens only once its name
is known and accepted and its arguments start with `{`; text that is not a valid call is
reported `INVALID` and its parser hands the raw markup back as content (rule S5).

A call is whole only once its JSON closed: an envelope's arguments keep their closing brace
until the envelope itself ends, so a call cut off by `max_tokens` never streamed arguments that
parse, and the output's end inside the JSON voids it (PROTOCOL.md S7, S11).
"""

from __future__ import annotations

import enum
import json

from deployments.toolcalls.base import CallSink
from deployments.toolcalls.scan import JsonMember, JsonScanner, skip_ws

ARGUMENT_KEYS = ("arguments", "parameters")
ENVELOPE_KEYS = ("name", *ARGUMENT_KEYS)


class CallStatus(enum.Enum):
    """Where a reader stands."""

    READING = "reading"
    DONE = "done"  # a valid call was emitted; `end` is just past its JSON
    INVALID = "invalid"  # not a call; `index` is set if it had been opened (abort it)


class JsonCallReader:
    """Reads one call starting at an offset of its parser's buffer."""

    def __init__(
        self,
        sink: CallSink,
        start: int,
        name: str | None = None,
        call_id: str | None = None,
        bare: bool = False,
    ) -> None:
        """Create a reader.

        Args:
            sink: The parser's event sink.
            start: Buffer offset where the JSON (after optional whitespace) begins.
            name: The function name when the markup carries it (arguments-only shape);
                None to read an envelope.
            call_id: An id the markup carries (Mistral v11), else a fresh one is drawn.
            bare: The envelope stands without markup (`bare.py`): only `name` and an object
                `arguments`/`parameters` make it a call; any other key, arguments left out or
                written as a string, make it no call.
        """
        self._sink = sink
        self._start = start
        self._name = name
        self._envelope = name is None
        self._call_id = call_id
        self._bare = bare
        self._scanner: JsonScanner | None = None
        self._emitted = -1  # next argument offset to stream; -1: nothing (more) to stream
        self._args_done = False
        self.index: int | None = None
        self.status = CallStatus.READING
        self.end = -1

    def advance(self, buf: str, final: bool) -> CallStatus:
        """Read `buf` as far as it goes; `final` means no more text will come."""
        if self.status is not CallStatus.READING:
            return self.status
        if self._scanner is None:
            p = skip_ws(buf, self._start)
            if p == len(buf):
                return self._invalid() if final else self.status
            if buf[p] != "{":
                self._start = p
                return self._invalid()
            self._scanner = JsonScanner(p)
            if not self._envelope and not self._sink.accepts(self._name or ""):
                return self._invalid()  # the scanner stays, so `settle` finds the body's end
            if not self._envelope:
                self.index = self._sink.open(self._name or "", self._call_id)
                self._emitted = p
        scanner = self._scanner
        scanner.advance(buf)
        if self._bare and scanner.failed:
            return self._invalid()  # bare JSON must be JSON (markup tolerates a missing brace)
        ended = scanner.done or scanner.failed
        if self._envelope:
            if not self._read_envelope(buf, scanner, ended):
                return self._invalid()
        elif self._emitted >= 0:
            self._stream(buf, scanner.pos)
            self._args_done = scanner.done
        if ended or final:
            if (
                self.index is None
                and scanner.done
                and self._name is not None
                and not self._bare
                and not self._member(scanner, ARGUMENT_KEYS)
            ):
                self.index = self._sink.open(self._name, self._call_id)  # `{"name": "f"}`
                self._sink.args(self.index, "{}")
                self._args_done = True
            if not self._args_done:  # also: the output ended inside the JSON
                return self._invalid()
            self.end = scanner.pos
            self.status = CallStatus.DONE
        return self.status

    def settle(self, buf: str) -> int | None:
        """For an invalid call: offset past its JSON body (or where the JSON broke).

        Returns None while the body is still open, so a marker inside a JSON string is not
        taken for the end of the markup.
        """
        if self._scanner is None:
            return self._start
        self._scanner.advance(buf)
        if self._scanner.done or self._scanner.failed:
            return self._scanner.pos
        return None

    def _read_envelope(self, buf: str, scanner: JsonScanner, ended: bool) -> bool:
        """Open and stream the call as far as the envelope allows; False if it is no call.

        `ended`: the envelope's JSON closed (or broke off after its members).
        """
        if self._bare and any(m.key not in ENVELOPE_KEYS for m in scanner.members):
            return False
        if self._name is None:
            name_member = self._member(scanner, ("name",))
            if name_member is not None and name_member.value_end >= 0:
                name = json.loads(buf[name_member.value_start : name_member.value_end])
                if not isinstance(name, str) or not self._sink.accepts(name):
                    return False
                self._name = name
        args = self._member(scanner, ARGUMENT_KEYS)
        if self._name is None or args is None or args.value_start < 0:
            return True
        if self.index is None:
            first = buf[args.value_start]
            if first == "{":
                self.index = self._sink.open(self._name, self._call_id)
                self._emitted = args.value_start
            elif first == '"' and not self._bare:
                if args.value_end < 0:
                    return True
                inner = json.loads(buf[args.value_start : args.value_end]).strip()
                if not _is_json_object(inner):
                    return False
                if ended:  # decoded, so it comes whole, and only once the envelope is whole
                    self.index = self._sink.open(self._name, self._call_id)
                    self._sink.args(self.index, inner)
                    self._args_done = True
                return True
            else:
                return False
        if self._emitted >= 0:
            stop = args.value_end if args.value_end >= 0 else scanner.pos
            if args.value_end >= 0 and not ended:
                stop -= 1  # the closing brace waits for the envelope's
            self._stream(buf, stop)
            self._args_done = ended and args.value_end >= 0
        return True

    def _stream(self, buf: str, stop: int) -> None:
        assert self.index is not None, "arguments streamed before the call was opened"
        if stop > self._emitted:
            self._sink.args(self.index, buf[self._emitted : stop])
            self._emitted = stop

    def _invalid(self) -> CallStatus:
        self.status = CallStatus.INVALID
        return self.status

    @staticmethod
    def _member(scanner: JsonScanner, keys: tuple[str, ...]) -> JsonMember | None:
        for member in scanner.members:
            if member.key in keys:
                return member
        return None


def _is_json_object(text: str) -> bool:
    """Whether `text` is exactly one JSON object (RFC 8259, no NaN/Infinity)."""
    scanner = JsonScanner(0)
    scanner.advance(text)
    return scanner.done and scanner.pos == len(text)
