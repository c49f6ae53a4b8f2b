"""DeepSeek V3.1 tool calls.

Format (DeepSeek-V3.1 chat template; vLLM `deepseekv31_tool_parser.py`)::

    <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{ARGS}<｜tool▁call▁end｜>…<｜tool▁calls▁end｜>

No `function` word and no fence. Arguments that are not a JSON object (the `}!}!` of
vllm-project/vllm-ascend#7989) are never emitted as a call: the text comes back as content.
"""

from __future__ import annotations

import re

from deployments.toolcalls.deepseek_v3 import CALL_END, SEP, DeepSeekV3Parser
from deployments.toolcalls.scan import Look, read_token

_NAME = re.compile(r"[^<>\n]*")


class DeepSeekV31Parser(DeepSeekV3Parser):
    """Parser for DeepSeek V3.1 tool-call sections (sections and fallbacks as in V3)."""

    TRAILER = (CALL_END,)

    def _header(self, buf: str, pos: int) -> tuple[Look, str, int]:
        """Read `NAME<｜tool▁sep｜>` at `pos`: (look, name, arguments offset)."""
        look, i = read_token(buf, pos, SEP, _NAME, 256)
        if look is not Look.MATCH:
            return look, "", pos
        return look, buf[pos:i].strip(), i + len(SEP)
