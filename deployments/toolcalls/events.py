"""Events a tool-call parser emits while it reads a model's output.

A parser turns raw model text into an ordered stream of these events; `assemble.py` turns the
stream into an OpenAI message (non-streaming) or into OpenAI `delta` dicts (streaming). The
contract they serve is `shared/toolcalls/PROTOCOL.md`.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ContentDelta:
    """Plain assistant text (`message.content`).

    Attributes:
        text: Non-empty text, markup-free unless it is the verbatim fallback of an invalid call.
    """

    text: str


@dataclass(frozen=True)
class ReasoningDelta:
    """Text from a `<think>` block (`message.reasoning_content`).

    Attributes:
        text: Non-empty reasoning text without the `<think>` / `</think>` tags.
    """

    text: str


@dataclass(frozen=True)
class ToolCallStart:
    """Opens one tool call; its argument fragments follow as `ToolCallArgsDelta`.

    Attributes:
        index: Position of the call in the response, 0..n-1 in order of appearance.
        id: Call id, unique in the response (`call_` + 24 alphanumerics unless the format
            carries its own, e.g. Mistral's 9-alphanumeric ids).
        name: The complete function name, already checked against the request's tools.
    """

    index: int
    id: str
    name: str


@dataclass(frozen=True)
class ToolCallArgsDelta:
    """A fragment of a call's arguments JSON text.

    The fragments of one index concatenate to exactly the final arguments string, a JSON object.

    Attributes:
        index: The call the fragment belongs to.
        fragment: Non-empty next piece of the arguments string.
    """

    index: int
    fragment: str


@dataclass(frozen=True)
class ToolCallAbort:
    """A call opened earlier turned out invalid (PROTOCOL.md rule S11).

    Its fragments cannot be taken back from a stream, so the streaming side stops emitting for
    the index and sends `text` as content; the non-streaming side drops the call and puts `text`
    into `content` where the call stood, so nothing the model wrote is lost.

    Attributes:
        index: The call that was opened and is now void.
        text: The call's complete raw markup, as the model wrote it.
    """

    index: int
    text: str


ParserEvent = ContentDelta | ReasoningDelta | ToolCallStart | ToolCallArgsDelta | ToolCallAbort
"""Everything `ToolParser.feed` and `ToolParser.finish` may return."""
