"""Parsers for outputs shaped by constrained decoding (`tool_choice` required or named).

With a named function, vLLM-style guided decoding lets the model emit only the arguments
object and the server supplies the name (ggml-org/llama.cpp#26849 describes the contract); with
`"required"` it emits a JSON array of `{"name", "parameters"}` objects (vLLM
`serving_chat.py`, required tool choice). Output that still fails to parse comes back as
content, never as an error.
"""

from __future__ import annotations

from typing import Any

from deployments.toolcalls.base import ToolParser
from deployments.toolcalls.call_list import CallListReader
from deployments.toolcalls.reader import CallStatus, JsonCallReader

_CALL, _REST, _RAW = range(3)


class NamedFunctionParser(ToolParser):
    """The whole output (after reasoning) is the arguments object of one named function."""

    def __init__(
        self, function_name: str, tools: list[dict[str, Any]] | None = None, prompt_suffix: str = ""
    ) -> None:
        """Create a parser for one forced function.

        Args:
            function_name: The function `tool_choice` names.
            tools: The request's tools; the name must be among them (checked by the caller).
            prompt_suffix: See `ToolParser.__init__`.
        """
        super().__init__(tools, prompt_suffix)
        self._reader = JsonCallReader(self._sink, 0, function_name)
        self._state = _CALL

    def _step(self, final: bool) -> bool:
        if self._state == _CALL:
            status = self._reader.advance(self._buf, final)
            if status is CallStatus.READING:
                return False
            self._pos = self._reader.end if status is CallStatus.DONE else self._pos
            self._state = _REST if status is CallStatus.DONE else _RAW
            return True
        if self._state == _RAW:  # not an object after all: all of it is content
            if not self._fallback_until(None, (), final, self._reader.index):
                return False
            self._state = _REST
            return True
        self._content_until((), final)  # text after the object (constraints normally forbid it)
        return False


class RequiredListParser(ToolParser):
    """The whole output (after reasoning) is a JSON array of `{"name", "parameters"}` calls."""

    def __init__(self, tools: list[dict[str, Any]] | None = None, prompt_suffix: str = "") -> None:
        """See `ToolParser.__init__`."""
        super().__init__(tools, prompt_suffix)
        self._list = CallListReader(self._sink, 0, 0)
        self._done = False

    def _step(self, final: bool) -> bool:
        if not self._done:
            status = self._list.advance(self._buf, final)
            if status is CallStatus.READING:
                return False
            self._done = True
            self._pos = self._list.end if status is CallStatus.DONE else 0
            return True
        self._content_until((), final)
        return False
