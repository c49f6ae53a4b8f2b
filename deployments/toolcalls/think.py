"""Separates `<think>…</think>` reasoning from the rest of a model's output.

Rules (PROTOCOL.md rule S8 and the `qwen35-toolcall-inside-unclosed-think` case):

* Reasoning is open from the start when the rendered prompt ends inside a `<think>` block
  (Qwen3 / DeepSeek-R1 templates pre-fill `<think>\\n`), or when the output itself starts with
  `<think>` (after optional whitespace). It closes at `</think>`.
* A tool-call opener inside open reasoning is ambiguous: a draft the model is thinking about
  (when `</think>` follows) or a real call the model made without closing its reasoning
  (vllm-project/vllm#39056). Everything from the opener on is held until `</think>` shows up
  (then it was reasoning) or the output ends (then reasoning ended at the opener).
* Option `call_ends_reasoning` (DeepSeek V4 DSML, vLLM `vllm/parser/deepseek_v4.py` and the
  reference decoder `parse_message_from_completion_text`): a tool-call opener ends reasoning at
  once, as `</think>` does; the opener and what follows go to the tool parser.
* Option `drop`: markers removed from reasoning text (DSML's stray closers and a repeated
  `<think>`, vllm-project/vllm#56184), held back while partial like the other markers.
"""

from __future__ import annotations

from deployments.toolcalls.scan import find_first, held_suffix_len, skip_ws

THINK_START = "<think>"
THINK_END = "</think>"

_START_CHECK, _REASONING, _HELD, _PASS = range(4)

Segment = tuple[bool, str]
"""`(is_reasoning, text)`: a piece of output routed to reasoning or to the tool parser."""


def prompt_opens_reasoning(prompt_suffix: str) -> bool:
    """Whether the rendered prompt ends inside an unclosed `<think>` block."""
    return prompt_suffix.rfind(THINK_START) > prompt_suffix.rfind(THINK_END)


class ThinkSplitter:
    """Streaming splitter of reasoning text; one per response."""

    def __init__(
        self,
        prompt_suffix: str = "",
        call_openers: tuple[str, ...] = (),
        call_ends_reasoning: bool = False,
        drop: tuple[str, ...] = (),
    ) -> None:
        """Create a splitter.

        Args:
            prompt_suffix: The end of the rendered prompt; decides whether reasoning is open.
            call_openers: Markers that open the family's tool-call markup.
            call_ends_reasoning: A call opener inside reasoning ends reasoning there (instead of
                holding the call until `</think>` or the end of the output).
            drop: Markers deleted from reasoning text.
        """
        self._state = _REASONING if prompt_opens_reasoning(prompt_suffix) else _START_CHECK
        self._stops = (THINK_END, *call_openers, *drop)
        self._call_ends_reasoning = call_ends_reasoning
        self._drop = frozenset(drop)
        self._buf = ""
        self._search_from = 0  # in _HELD: where the next search for `</think>` starts

    def feed(self, text: str) -> list[Segment]:
        """Route `text` (a streamed delta); returns the segments that can be decided now."""
        if self._state == _PASS:
            return [(False, text)] if text else []
        self._buf += text
        return self._drain(final=False)

    def finish(self) -> list[Segment]:
        """Flush what is still held at the end of the output."""
        return self._drain(final=True)

    def _drain(self, final: bool) -> list[Segment]:
        out: list[Segment] = []
        while True:
            state = self._state
            if state == _START_CHECK:
                start = skip_ws(self._buf, 0)
                rest = self._buf[start:]
                if rest.startswith(THINK_START):
                    self._buf = self._buf[start + len(THINK_START) :]
                    self._state = _REASONING
                    continue
                if not final and THINK_START.startswith(rest):
                    return out
                self._state = _PASS
            elif state == _REASONING:
                hit = find_first(self._buf, self._stops, 0)
                if hit is None:
                    keep = 0 if final else held_suffix_len(self._buf, 0, self._stops)
                    self._emit(out, True, self._buf[: len(self._buf) - keep])
                    self._buf = self._buf[len(self._buf) - keep :]
                    return out
                idx, marker = hit
                self._emit(out, True, self._buf[:idx])
                if marker in self._drop:
                    self._buf = self._buf[idx + len(marker) :]
                elif marker == THINK_END:
                    self._buf = self._buf[idx + len(marker) :]
                    self._state = _PASS
                elif self._call_ends_reasoning:
                    self._buf = self._buf[idx:]
                    self._state = _PASS
                else:
                    self._buf = self._buf[idx:]
                    self._state, self._search_from = _HELD, 0
            elif state == _HELD:
                idx = self._buf.find(THINK_END, self._search_from)
                if idx != -1:
                    self._emit(out, True, self._buf[:idx])
                    self._buf = self._buf[idx + len(THINK_END) :]
                    self._state = _PASS
                elif not final:
                    self._search_from = max(0, len(self._buf) - len(THINK_END) + 1)
                    return out
                else:  # the output ended inside reasoning: the held call was meant
                    self._state = _PASS
            else:
                self._emit(out, False, self._buf)
                self._buf = ""
                return out

    @staticmethod
    def _emit(out: list[Segment], reasoning: bool, text: str) -> None:
        if text:
            out.append((reasoning, text))
