"""A Response's output items, built from chat deltas, with the stream events that build them.

The streamed and the non-streamed answer share this builder: a stream feeds each chunk's delta,
a whole completion feeds its message as one reasoning, one content and one delta per call
(`output.answer`), so both give the same items. Item and event shapes are the `openai` SDK's
(`types/responses/response_output_item.py`, `response_stream_event.py`):

- `reasoning` (`rs_...`): `summary: []`, `content: [{"type": "reasoning_text", "text"}]`;
  events `content_part.added`, `reasoning_text.delta`..., `reasoning_text.done`,
  `content_part.done`.
- `message` (`msg_...`): one `output_text` part with `annotations: []`; events
  `content_part.added`, `output_text.delta`..., `output_text.done`, `content_part.done`;
  status `incomplete` when the output was cut at `max_output_tokens`.
- `function_call` (`fc_...`): `call_id` is the chat call's id, `namespace` set for a function
  declared in a `namespace` tool; events
  `function_call_arguments.delta`..., `function_call_arguments.done`.

Items keep the order reasoning, message, calls, whatever order the deltas come in: a chat
stream may write text after a call (the xml and hermes families do), and a Response lists that
text's message before the calls, as a non-streamed answer must. So calls that start before any
text are held until text opens the message or the answer ends, and then stream on live. Every
item is closed (`output_item.done`) when the answer ends, in output order.
"""

from __future__ import annotations

import copy
import uuid
from typing import Any

Event = dict[str, Any]
"""One stream event without its `sequence_number` (the stream numbers them)."""


def _id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


class OutputBuilder:
    """Output items of one Response, fed chat deltas; each feed returns the events it made.

    Args:
        namespaces: function name -> the namespace its calls name (`ResponseContext`).
    """

    def __init__(self, namespaces: dict[str, str]) -> None:
        self.namespaces = namespaces
        self.items: list[dict[str, Any]] = []
        self._reasoning: int | None = None
        self._message: int | None = None
        self._calls: dict[int, int] = {}  # chat call index -> output index
        self._held: list[dict[str, Any]] = []
        self._texts: dict[int, list[str]] = {}  # output index -> text pieces

    def _open(self, item: dict[str, Any]) -> list[Event]:
        index = len(self.items)
        self.items.append(item)
        added = {"type": "response.output_item.added", "output_index": index}
        return [added | {"item": copy.deepcopy(item)}]

    def _part(self, index: int, kind: str, part: dict[str, Any]) -> Event:
        where = {"item_id": self.items[index]["id"], "output_index": index, "content_index": 0}
        return {"type": f"response.content_part.{kind}", **where, "part": part}

    def _text_delta(self, index: int, kind: str, text: str) -> Event:
        self._texts[index].append(text)
        where = {"item_id": self.items[index]["id"], "output_index": index, "content_index": 0}
        event = {"type": f"response.{kind}.delta", **where, "delta": text}
        return event | {"logprobs": []} if kind == "output_text" else event

    def reasoning(self, text: str) -> list[Event]:
        """Feed reasoning text (`reasoning_content`)."""
        if not text:
            return []
        events: list[Event] = []
        if self._reasoning is None:
            self._reasoning = len(self.items)
            self._texts[self._reasoning] = []
            item = {"id": _id("rs"), "type": "reasoning", "summary": [], "content": []}
            events += self._open(item)
            part = {"type": "reasoning_text", "text": ""}
            events.append(self._part(self._reasoning, "added", part))
        return [*events, self._text_delta(self._reasoning, "reasoning_text", text)]

    def _open_message(self) -> list[Event]:
        self._message = len(self.items)
        self._texts[self._message] = []
        item = {
            "id": _id("msg"),
            "type": "message",
            "role": "assistant",
            "status": "in_progress",
            "content": [],
        }
        part = {"type": "output_text", "text": "", "annotations": []}
        events = [*self._open(item), self._part(self._message, "added", part)]
        held, self._held = self._held, []
        return events + self._live_calls(held)

    def content(self, text: str) -> list[Event]:
        """Feed answer text (`content`)."""
        if not text:
            return []
        events = self._open_message() if self._message is None else []
        assert self._message is not None, "opened above"
        return [*events, self._text_delta(self._message, "output_text", text)]

    def tool_calls(self, deltas: list[dict[str, Any]]) -> list[Event]:
        """Feed chat tool-call deltas (`{"index", "id", "function": {"name", "arguments"}}`, the
        id and name in a call's first delta, arguments in fragments)."""
        if self._message is None:
            self._held += deltas
            return []
        return self._live_calls(deltas)

    def _live_calls(self, deltas: list[dict[str, Any]]) -> list[Event]:
        events: list[Event] = []
        for delta in deltas:
            function = delta.get("function") or {}
            if delta["index"] not in self._calls:
                self._calls[delta["index"]] = len(self.items)
                item = {
                    "id": _id("fc"),
                    "type": "function_call",
                    "call_id": delta.get("id") or _id("call"),
                    "name": function.get("name", ""),
                    "arguments": "",
                    "status": "in_progress",
                }
                if item["name"] in self.namespaces:
                    item["namespace"] = self.namespaces[item["name"]]
                events += self._open(item)
            index = self._calls[delta["index"]]
            fragment = function.get("arguments") or ""
            if fragment:
                self.items[index]["arguments"] += fragment
                events.append(
                    {
                        "type": "response.function_call_arguments.delta",
                        "item_id": self.items[index]["id"],
                        "output_index": index,
                        "delta": fragment,
                    }
                )
        return events

    def finish(self, incomplete: bool) -> list[Event]:
        """End the answer: place held calls, give an answer with neither text nor calls an
        empty message, and close every item in output order.

        Args:
            incomplete: the output was cut at its token limit (the message ends `incomplete`).
        """
        events: list[Event] = []
        if self._message is None and not self._held and not self._calls:
            events += self._open_message()
        held, self._held = self._held, []
        events += self._live_calls(held)
        for index, item in enumerate(self.items):
            events += self._close(index, item, incomplete)
        return events

    def partial(self) -> list[dict[str, Any]]:
        """The items so far, texts filled in and unfinished ones `incomplete`, for a Response
        that failed mid-answer."""
        out = []
        for index, item in enumerate(copy.deepcopy(self.items)):
            if item["type"] == "function_call":
                item["status"] = "incomplete"
            else:
                text = "".join(self._texts[index])
                part: dict[str, Any] = {"type": "reasoning_text", "text": text}
                if item["type"] == "message":
                    part = {"type": "output_text", "text": text, "annotations": []}
                    item["status"] = "incomplete"
                item["content"] = [part]
            out.append(item)
        return out

    def _close(self, index: int, item: dict[str, Any], incomplete: bool) -> list[Event]:
        where = {"item_id": item["id"], "output_index": index}
        events: list[Event] = []
        if item["type"] == "function_call":
            item["status"] = "completed"
            done = {"type": "response.function_call_arguments.done", **where}
            events.append(done | {"name": item["name"], "arguments": item["arguments"]})
        else:
            text = "".join(self._texts[index])
            kind = "reasoning_text" if item["type"] == "reasoning" else "output_text"
            part: dict[str, Any] = {"type": kind, "text": text}
            done = {"type": f"response.{kind}.done", **where, "content_index": 0, "text": text}
            if kind == "output_text":
                part["annotations"] = []
                done["logprobs"] = []
                item["status"] = "incomplete" if incomplete else "completed"
            item["content"] = [part]
            events += [done, self._part(index, "done", copy.deepcopy(part))]
        item_done = {"type": "response.output_item.done", "output_index": index}
        return [*events, item_done | {"item": copy.deepcopy(item)}]
