"""A chat stream's deltas as the content-block events of an Anthropic message stream.

Blocks are sent one at a time, as Anthropic sends them (`content_block_start`, its
`content_block_delta`s, `content_block_stop`), each opened when a different kind of output
arrives: `reasoning_content` → a `thinking` block (`thinking_delta`s, then a `signature_delta`
with the same signature as the non-streamed answer's, just before the block stops), `content` →
a `text` block (`text_delta`s), a tool call's first entry (the one with its `id`) → a `tool_use`
block, its `arguments` fragments → `input_json_delta`s. Text written after a call thus opens a
new text block after it, in the order the model wrote it.
"""

from __future__ import annotations

from typing import Any

from deployments.protocol.tools import JsonObject
from router.apis.anthropic.message import signature, tool_use_id


class BlockEvents:
    """The open block of one streamed message and the events that open, fill and close blocks.

    Attributes:
        count: blocks opened so far (the next block's `index`).
    """

    def __init__(self) -> None:
        self.count = 0
        self._open: str | None = None
        self._thinking: list[str] = []
        self._call: int | None = None  # the chat call index of the open tool_use block

    def thinking(self, text: str) -> list[JsonObject]:
        """Events for reasoning text."""
        self._thinking.append(text)
        return self._delta("thinking", {"type": "thinking_delta", "thinking": text})

    def text(self, text: str) -> list[JsonObject]:
        """Events for answer text."""
        return self._delta("text", {"type": "text_delta", "text": text})

    def tool_call(self, entry: dict[str, Any]) -> list[JsonObject]:
        """Events for one `delta.tool_calls` entry: a call's header (`index`, `id`,
        `function.name`, maybe `arguments`) opens a block; later entries carry fragments of the
        open call's arguments (the chat stream sends one call after another)."""
        out: list[JsonObject] = []
        function = entry.get("function") or {}
        if "id" in entry:
            out += self.close()
            block = {"type": "tool_use", "id": tool_use_id(), "name": function["name"], "input": {}}
            out.append(self._start(block))
            self._open, self._call = "tool_use", entry["index"]
        fragment = function.get("arguments") or ""
        if fragment:
            assert self._open == "tool_use" and self._call == entry["index"], (
                f"arguments for tool call {entry['index']} arrived outside its block"
            )
            delta = {"type": "input_json_delta", "partial_json": fragment}
            out.append(self._event("content_block_delta", delta=delta))
        return out

    def close(self) -> list[JsonObject]:
        """Events that stop the open block, if any."""
        if self._open is None:
            return []
        out = []
        if self._open == "thinking":
            delta = {"type": "signature_delta", "signature": signature("".join(self._thinking))}
            out.append(self._event("content_block_delta", delta=delta))
            self._thinking = []
        out.append(self._event("content_block_stop"))
        self._open, self._call = None, None
        return out

    def _delta(self, kind: str, delta: JsonObject) -> list[JsonObject]:
        out = []
        if self._open != kind:
            out += self.close()
            empty = {"type": "thinking", "thinking": "", "signature": ""}
            out.append(self._start(empty if kind == "thinking" else {"type": "text", "text": ""}))
            self._open = kind
        out.append(self._event("content_block_delta", delta=delta))
        return out

    def _start(self, block: JsonObject) -> JsonObject:
        self.count += 1
        return self._event("content_block_start", content_block=block)

    def _event(self, kind: str, **fields: Any) -> JsonObject:
        return {"type": kind, "index": self.count - 1, **fields}
