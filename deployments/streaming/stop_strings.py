"""Stop strings over streamed text, without leaking any part of a stop string.

Text that could still be the start of a stop string is held back until the next delta rules it
in or out (vLLM issue #3574, SGLang issue #6997); held text is released when generation ends
for another reason (llama.cpp PR #15007).
"""

from __future__ import annotations


class StopStringMatcher:
    """Cuts generated text at the first stop string.

    Args:
        stops: stop strings (non-empty).
    """

    def __init__(self, stops: list[str]) -> None:
        self.stops = stops
        self.max_len = max((len(s) for s in stops), default=0)
        self.text = ""
        self.emitted = 0
        self.stopped = False
        self.matched: str | None = None
        """The stop string that matched (the earliest in the text), once `stopped`."""

    def _held_suffix(self) -> int:
        """Length of the longest tail of the text that is a proper prefix of a stop string."""
        tail = self.text[self.emitted :]
        for size in range(min(len(tail), self.max_len - 1), 0, -1):
            piece = tail[-size:]
            if any(s.startswith(piece) for s in self.stops):
                return size
        return 0

    def push(self, delta: str) -> str:
        """Add text; return what can be sent now. Sets `stopped` when a stop string matched."""
        if self.stopped or not delta:
            return ""
        search_from = max(0, len(self.text) - self.max_len + 1)
        self.text += delta
        if self.stops:
            hits = [(i, s) for s in self.stops if (i := self.text.find(s, search_from)) != -1]
            if hits:
                at, self.matched = min(hits, key=lambda hit: hit[0])
                self.stopped = True
                self.text = self.text[:at]
                return self.flush()
        end = len(self.text) - self._held_suffix()
        out = self.text[self.emitted : end]
        self.emitted = end
        return out

    def flush(self) -> str:
        """Release held text (generation ended without completing a stop string)."""
        out = self.text[self.emitted :]
        self.emitted = len(self.text)
        return out
