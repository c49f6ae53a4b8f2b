"""Whitespace compaction of user text, outside fenced code blocks.

Outside a fenced code block (a line opening with three or more backticks or tildes, up to three
spaces indented, until a closing fence of the same character at least as long: CommonMark
§4.5), trailing spaces and tabs are removed, runs of spaces and tabs after a line's indentation
become one space, and runs of blank lines become one blank line. Indentation is kept, so
indented code and lists keep their shape; fenced blocks are kept byte for byte.
"""

from __future__ import annotations

import re

_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_SPACES = re.compile(r"[ \t]{2,}")


def _closes(line: str, fence: str) -> bool:
    """Whether `line` closes a block opened by `fence` (same character, at least as long,
    nothing after it but whitespace)."""
    match = _FENCE.match(line)
    if match is None:
        return False
    run = match.group(1)
    return run[0] == fence[0] and len(run) >= len(fence) and not line[match.end() :].strip()


def compact_text(text: str) -> str:
    """`text` with its whitespace compacted (see the module docstring); idempotent."""
    out: list[str] = []
    fence: str | None = None
    blank = False
    for line in text.split("\n"):
        if fence is not None:
            out.append(line)
            if _closes(line, fence):
                fence = None
            continue
        opening = _FENCE.match(line)
        if opening is not None:
            fence, blank = opening.group(1), False
            out.append(line)
            continue
        line = line.rstrip(" \t\r")
        if not line.strip():
            if not blank and out:
                out.append("")
            blank = True
            continue
        blank = False
        body = line.lstrip(" \t")
        out.append(line[: len(line) - len(body)] + _SPACES.sub(" ", body))
    return "\n".join(out)
