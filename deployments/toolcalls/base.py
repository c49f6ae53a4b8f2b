"""The tool-call parser contract and the machinery every family parser shares.

One parser object serves one response in both modes: streaming feeds it each text delta, the
non-streaming parse feeds it the whole text once; both then call `finish()`. Every chunking of
the same text yields the same final message (PROTOCOL.md). The shape follows SGLang's
`function_call/base_format_detector.py` (one detector per family owning its buffer), without
its catch-all excepts: an invalid call comes back as content, never as an empty result.
"""

from __future__ import annotations

import logging
import random
import string
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any, ClassVar

from deployments.toolcalls.events import (
    ContentDelta,
    ParserEvent,
    ReasoningDelta,
    ToolCallAbort,
    ToolCallArgsDelta,
    ToolCallStart,
)
from deployments.toolcalls.scan import find_first, held_suffix_len
from deployments.toolcalls.think import ThinkSplitter

logger = logging.getLogger(__name__)

_ALNUM = string.ascii_letters + string.digits
_ID_RNG = random.SystemRandom()


def random_alnum(length: int) -> str:
    """`length` random ASCII letters and digits (from the OS entropy source)."""
    return "".join(_ID_RNG.choices(_ALNUM, k=length))


def openai_call_id() -> str:
    """A fresh OpenAI-style tool call id: `call_` + 24 random alphanumerics."""
    return "call_" + random_alnum(24)


def index_tools(tools: list[dict[str, Any]] | None) -> dict[str, dict[str, Any]] | None:
    """Map each declared function name to its JSON-schema `parameters` (`{}` when absent).

    Args:
        tools: OpenAI tool objects (`{"type": "function", "function": {...}}`); bare function
            objects (`{"name": ..., "parameters": ...}`) are accepted too. `None` means the
            caller declared nothing, and then any well-formed name is accepted.

    Raises:
        ValueError: A tool has no string `name`.
    """
    if tools is None:
        return None
    out: dict[str, dict[str, Any]] = {}
    for i, tool in enumerate(tools):
        fn = tool.get("function", tool) if isinstance(tool, dict) else None
        name = fn.get("name") if isinstance(fn, dict) else None
        if not isinstance(name, str) or not name:
            raise ValueError(
                f"tools[{i}] has no function name; expected {{'function': {{'name'}}}}"
            )
        params = fn.get("parameters") if isinstance(fn, dict) else None
        out[name] = params if isinstance(params, dict) else {}
    return out


class CallSink:
    """Collects a parser's events, numbers its calls and knows the request's tools.

    Events may be held back (`hold`) while it is open whether text is a call at all; they are
    then released (`commit`) or dropped with the calls they numbered (`discard`).
    """

    def __init__(self, tools: dict[str, dict[str, Any]] | None, new_id: Callable[[], str]) -> None:
        """Create a sink.

        Args:
            tools: Declared name -> parameters schema, or None to accept any name.
            new_id: Zero-argument callable returning a fresh call id.
        """
        self.events: list[ParserEvent] = []
        self._tools = tools
        self._new_id = new_id
        self._opened = 0
        self._held: tuple[int, int] | None = None  # (first held event, calls opened before)

    def accepts(self, name: str) -> bool:
        """Whether a call to `name` may be emitted (undeclared names come back as content)."""
        if self._tools is None:
            return bool(name) and name.strip() == name
        return name in self._tools

    def schema(self, name: str) -> dict[str, Any]:
        """The JSON schema of `name`'s parameters (`{}` when unknown)."""
        return (self._tools or {}).get(name, {})

    def content(self, text: str) -> None:
        """Emit assistant text (nothing if empty)."""
        if text:
            self.events.append(ContentDelta(text))

    def reasoning(self, text: str) -> None:
        """Emit reasoning text (nothing if empty)."""
        if text:
            self.events.append(ReasoningDelta(text))

    def open(self, name: str, call_id: str | None = None) -> int:
        """Open the next call and return its index."""
        index = self._opened
        self._opened += 1
        self.events.append(ToolCallStart(index, call_id or self._new_id(), name))
        return index

    def args(self, index: int, fragment: str) -> None:
        """Emit the next piece of call `index`'s arguments string (nothing if empty)."""
        if fragment:
            self.events.append(ToolCallArgsDelta(index, fragment))

    def fallback(self, raw: str, index: int | None) -> None:
        """Return an invalid call's raw markup as content, voiding the call if it was opened."""
        if index is None:
            self.content(raw)
            return
        logger.warning("tool call %d turned invalid after it was streamed: %.200r", index, raw)
        self.events.append(ToolCallAbort(index, raw))

    def hold(self) -> None:
        """Keep the events from now on back from `take` until `commit` or `discard`."""
        assert self._held is None, "events are already held"
        self._held = (len(self.events), self._opened)

    def commit(self) -> None:
        """Release the held events to the next `take`."""
        assert self._held is not None, "commit() without hold()"
        self._held = None

    def discard(self) -> None:
        """Drop the held events; the calls they opened are numbered afresh later."""
        assert self._held is not None, "discard() without hold()"
        first, self._opened = self._held
        del self.events[first:]
        self._held = None

    def take(self) -> list[ParserEvent]:
        """The events collected since the last call, less any held back."""
        if self._held is None:
            out, self.events = self.events, []
            return out
        first, opened = self._held
        if first == 0:
            return []
        out, self.events = self.events[:first], self.events[first:]
        self._held = (0, opened)
        return out


class ToolParser(ABC):
    """Stateful parser of one response's output for one model family.

    Subclasses implement `_step`, a state machine over `self._buf` from `self._pos`, and list
    their markup openers in `CALL_OPENERS` (used to hold a call made inside unclosed reasoning,
    or, with `CALL_ENDS_REASONING`, to end reasoning there; see `think.py`).
    """

    CALL_OPENERS: ClassVar[tuple[str, ...]] = ()
    CALL_ENDS_REASONING: ClassVar[bool] = False
    REASONING_DROPS: ClassVar[tuple[str, ...]] = ()  # markers deleted from reasoning text

    def __init__(self, tools: list[dict[str, Any]] | None = None, prompt_suffix: str = "") -> None:
        """Create a parser for one response.

        Args:
            tools: The request's OpenAI tool objects; calls to other names come back as
                content. None accepts any name (diagnostics without a tools file).
            prompt_suffix: The end of the rendered prompt; a pre-opened `<think>` there makes
                the output start in reasoning.

        Raises:
            ValueError: A tool object has no function name.
        """
        self._sink = CallSink(index_tools(tools), self._new_call_id)
        self._think = ThinkSplitter(
            prompt_suffix, self.CALL_OPENERS, self.CALL_ENDS_REASONING, self.REASONING_DROPS
        )
        self._buf = ""
        self._pos = 0
        self._mark = 0  # where the markup being read started (its raw text for a fallback)
        self._finished = False

    def feed(self, delta: str) -> list[ParserEvent]:
        """Read the next piece of output; returns the events it decided."""
        assert not self._finished, "feed() called after finish()"
        for reasoning, text in self._think.feed(delta):
            self._route(reasoning, text)
        return self._sink.take()

    def finish(self) -> list[ParserEvent]:
        """End of output: resolve everything held back; returns the last events."""
        assert not self._finished, "finish() called twice"
        for reasoning, text in self._think.finish():
            self._route(reasoning, text)
        while self._step(True):
            pass
        self._finished = True
        return self._sink.take()

    def _route(self, reasoning: bool, text: str) -> None:
        if reasoning:
            self._sink.reasoning(text)
            return
        self._buf += text
        while self._step(False):
            pass

    def _new_call_id(self) -> str:
        """A fresh id for a call whose markup carries none."""
        return openai_call_id()

    @abstractmethod
    def _step(self, final: bool) -> bool:
        """Advance over `self._buf`; True if progress was made (the loop calls again).

        Args:
            final: The output has ended: resolve held text instead of waiting.
        """

    def _content_until(self, markers: tuple[str, ...], final: bool) -> str | None:
        """Emit content up to the first marker, holding back a partial one.

        Returns the marker found (then `_mark` is its offset and `_pos` is past it), or None
        when no marker is complete yet (everything decidable was emitted).
        """
        self._buf, self._pos = self._buf[self._pos :], 0  # nothing before _pos is needed now
        buf = self._buf
        hit = find_first(buf, markers, 0)
        if hit is None:
            end = len(buf) if final else len(buf) - held_suffix_len(buf, 0, markers)
            self._sink.content(buf[:end])
            self._pos = end
            return None
        idx, marker = hit
        self._sink.content(buf[:idx])
        self._mark, self._pos = idx, idx + len(marker)
        return marker

    def _fallback_until(
        self, resume: int | None, ends: tuple[str, ...], final: bool, index: int | None
    ) -> bool:
        """Hand the invalid markup from `_mark` back as content once its end is found.

        Args:
            resume: Offset from which an end marker may be searched plainly (past the JSON
                body, string-aware), or None while still inside it.
            ends: End markers included in the fallback text; empty: the markup ends at `resume`.
            final: The output has ended; the markup then runs to the end of the buffer.
            index: The call's index if it was already opened (it is then voided).

        Returns:
            True once the fallback text was emitted (`_pos` is past it).
        """
        stop = -1
        if resume is not None:
            hit = find_first(self._buf, ends, resume) if ends else (resume, "")
            if hit is not None:
                stop = hit[0] + len(hit[1])
        if stop < 0:
            if not final:
                return False
            stop = len(self._buf)
        self._sink.fallback(self._buf[self._mark : stop], index)
        self._pos = stop
        return True
