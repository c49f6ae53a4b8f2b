"""Turns parser events into OpenAI message fields, whole or as streaming `delta` dicts.

Both paths trim the text channels the same way (leading and trailing whitespace of `content`
and `reasoning_content` is dropped, so whitespace between calls is not content), which keeps
rule S6 of `shared/toolcalls/PROTOCOL.md`: the streamed content equals the non-streaming one.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass
from typing import Any

from deployments.toolcalls.base import ToolParser
from deployments.toolcalls.events import (
    ContentDelta,
    ParserEvent,
    ReasoningDelta,
    ToolCallAbort,
    ToolCallArgsDelta,
    ToolCallStart,
)


def parse_text(parser: ToolParser, text: str) -> list[ParserEvent]:
    """The non-streaming parse: the streaming parser fed the whole text, then finished."""
    return parser.feed(text) + parser.finish()


def assemble(events: Iterable[ParserEvent]) -> dict[str, Any]:
    """Build the non-streaming message fields from a response's events.

    Returns:
        `{"content": str | None, "reasoning_content": str | None, "tool_calls": [{"id",
        "type": "function", "function": {"name", "arguments": str}}]}`; a voided call
        (`ToolCallAbort`) is dropped and its raw text stands in `content`.
    """
    content: list[str] = []
    reasoning: list[str] = []
    calls: dict[int, dict[str, Any]] = {}
    for event in events:
        if isinstance(event, ContentDelta):
            content.append(event.text)
        elif isinstance(event, ReasoningDelta):
            reasoning.append(event.text)
        elif isinstance(event, ToolCallStart):
            calls[event.index] = _call(event.id, event.name, "")
        elif isinstance(event, ToolCallArgsDelta):
            calls[event.index]["function"]["arguments"] += event.fragment
        elif isinstance(event, ToolCallAbort):
            del calls[event.index]
            content.append(event.text)
    return {
        "content": "".join(content).strip() or None,
        "reasoning_content": "".join(reasoning).strip() or None,
        "tool_calls": [calls[i] for i in sorted(calls)],
    }


def finish_reason(has_tool_calls: bool, engine_finish_reason: str | None) -> str:
    """PROTOCOL.md S7: `"length"` whenever the engine stopped at `max_tokens` (a call may have
    been cut off); else `"tool_calls"` iff a call was sent; else the engine's reason (`"stop"`
    by default)."""
    if engine_finish_reason == "length":
        return "length"
    return "tool_calls" if has_tool_calls else (engine_finish_reason or "stop")


@dataclass
class CallLedger:
    """What a stream has sent for one call index (PROTOCOL.md: keep a ledger per index)."""

    id: str
    name: str
    arguments: str = ""
    aborted: bool = False


class _TrimmedText:
    """Streams a text channel so that its concatenation equals the whole text `.strip()`ped."""

    def __init__(self) -> None:
        self._started = False
        self._pending = ""

    def push(self, text: str) -> str:
        if not self._started:
            text = text.lstrip()
            if not text:
                return ""
            self._started = True
        text = self._pending + text
        body = text.rstrip()
        self._pending = text[len(body) :]
        return body


class StreamAssembler:
    """Maps one response's parser events to OpenAI streaming `delta` dicts.

    Each call opens with a header entry (`index`, `id`, `type`, full `name`, `arguments: ""`),
    then fragments carrying only `index` and `function.arguments` (rules S1-S4). The first delta
    returned carries `role: "assistant"` (S9). Adjacent pieces of one kind are merged, and a
    delta never holds two entries for one index.
    """

    def __init__(self) -> None:
        self.ledger: dict[int, CallLedger] = {}
        self._content = _TrimmedText()
        self._reasoning = _TrimmedText()
        self._role_sent = False

    @property
    def tool_calls_sent(self) -> bool:
        """Whether a call that was not voided went out."""
        return len(self.voided) < len(self.ledger)

    @property
    def voided(self) -> frozenset[int]:
        """Indices of the calls voided after they had opened (rule S11)."""
        return frozenset(i for i, call in self.ledger.items() if call.aborted)

    def push(self, events: Iterable[ParserEvent]) -> list[dict[str, Any]]:
        """Deltas for the next events (possibly none)."""
        deltas: list[dict[str, Any]] = []
        for event in events:
            if isinstance(event, ContentDelta):
                self._text(deltas, "content", self._content.push(event.text))
            elif isinstance(event, ReasoningDelta):
                self._text(deltas, "reasoning_content", self._reasoning.push(event.text))
            elif isinstance(event, ToolCallStart):
                assert event.index not in self.ledger, f"call index {event.index} opened twice"
                self.ledger[event.index] = CallLedger(event.id, event.name)
                header = {
                    "index": event.index,
                    "id": event.id,
                    "type": "function",
                    "function": {"name": event.name, "arguments": ""},
                }
                deltas.append({"tool_calls": [header]})
            elif isinstance(event, ToolCallArgsDelta):
                self._fragment(deltas, event.index, event.fragment)
            elif isinstance(event, ToolCallAbort):
                self.ledger[event.index].aborted = True
                self._text(deltas, "content", self._content.push(event.text))
        if deltas and not self._role_sent:
            deltas[0] = {"role": "assistant", **deltas[0]}
            self._role_sent = True
        return deltas

    def close(self, engine_finish_reason: str | None = "stop") -> tuple[list[dict[str, Any]], str]:
        """Last deltas (only the role, if nothing was sent) and the response's finish reason."""
        deltas: list[dict[str, Any]] = []
        if not self._role_sent:
            deltas.append({"role": "assistant", "content": ""})
            self._role_sent = True
        return deltas, finish_reason(self.tool_calls_sent, engine_finish_reason)

    def _fragment(self, deltas: list[dict[str, Any]], index: int, fragment: str) -> None:
        call = self.ledger[index]
        if call.aborted:
            return
        call.arguments += fragment
        last = deltas[-1].get("tool_calls") if deltas else None
        if last and len(last) == 1 and "id" not in last[0] and last[0]["index"] == index:
            last[0]["function"]["arguments"] += fragment
        else:
            deltas.append({"tool_calls": [{"index": index, "function": {"arguments": fragment}}]})

    @staticmethod
    def _text(deltas: list[dict[str, Any]], key: str, text: str) -> None:
        if not text:
            return
        if deltas and list(deltas[-1]) == [key]:
            deltas[-1][key] += text
        else:
            deltas.append({key: text})


def accumulate(deltas: Iterable[dict[str, Any]], voided: Collection[int] = ()) -> dict[str, Any]:
    """Rebuild message fields from streamed deltas, as an OpenAI client does.

    Args:
        deltas: One choice's streamed deltas.
        voided: Indices of calls voided after they opened (`StreamAssembler.voided`); they are
            left out, as `assemble` leaves them out (their text is in `content`). A client of
            the stream keeps them, with their partial arguments.

    Returns:
        The same shape as `assemble`; text channels are None when empty.
    """
    content: list[str] = []
    reasoning: list[str] = []
    calls: dict[int, dict[str, Any]] = {}
    for delta in deltas:
        content.append(delta.get("content") or "")
        reasoning.append(delta.get("reasoning_content") or "")
        for entry in delta.get("tool_calls") or ():
            fn = entry.get("function", {})
            if "id" in entry:
                calls[entry["index"]] = _call(entry["id"], fn["name"], "")
            calls[entry["index"]]["function"]["arguments"] += fn.get("arguments") or ""
    return {
        "content": "".join(content) or None,
        "reasoning_content": "".join(reasoning) or None,
        "tool_calls": [calls[i] for i in sorted(calls) if i not in voided],
    }


def _call(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
