"""DSML markup and the prompt pieces both DeepSeek encoders (V3.2, V4) share.

Source: the encoders shipped with the weights (`encoding/encoding_dsv4.py`,
`encoding/encoding_dsv32.py`, read through `vllm/tokenizers/deepseek_v{4,32}_encoding.py` and
SGLang's `encoding_dsv{4,32}.py`) and `shared/research/deepseek-v4.md` §3.1 and §4.

A call is written as

    <｜DSML｜invoke name="NAME">
    <｜DSML｜parameter name="KEY" string="true">raw text</｜DSML｜parameter>
    <｜DSML｜parameter name="KEY" string="false">JSON</｜DSML｜parameter>
    </｜DSML｜invoke>

inside a block opened by a blank line: `<｜DSML｜tool_calls>` (V4) or `<｜DSML｜function_calls>`
(V3.2). A value is `string="true"` exactly when it is a Python `str`, written with no escaping;
any other value is JSON (`ensure_ascii=False`, Python's default separators).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

BOS = "<｜begin▁of▁sentence｜>"
EOS = "<｜end▁of▁sentence｜>"
USER = "<｜User｜>"
ASSISTANT = "<｜Assistant｜>"
THINK_START = "<think>"
THINK_END = "</think>"
DSML = "｜DSML｜"


def to_json(value: Any) -> str:
    """`value` as the encoders write JSON: `json.dumps(value, ensure_ascii=False)`.

    Raises:
        ValueError: `value` holds something JSON cannot represent.
    """
    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"cannot write {type(value).__name__} value as JSON: {exc}") from None


def parameters(arguments: dict[str, Any]) -> str:
    """The `<｜DSML｜parameter>` lines of one call, in the arguments' key order, `\\n`-joined."""
    lines = []
    for key, value in arguments.items():
        literal = isinstance(value, str)
        text = value if literal else to_json(value)
        flag = "true" if literal else "false"
        lines.append(f'<{DSML}parameter name="{key}" string="{flag}">{text}</{DSML}parameter>')
    return "\n".join(lines)


def invoke(name: str, arguments: dict[str, Any]) -> str:
    """One `<｜DSML｜invoke>` element (a call with no arguments keeps its empty line)."""
    return f'<{DSML}invoke name="{name}">\n{parameters(arguments)}\n</{DSML}invoke>'


def calls_block(block: str, calls: Iterable[tuple[str, dict[str, Any]]]) -> str:
    """The text an assistant turn's calls add after its content.

    Args:
        block: the block's element name, `tool_calls` (V4) or `function_calls` (V3.2).
        calls: `(name, arguments)` pairs in call order.

    Returns:
        `"\\n\\n<｜DSML｜{block}>\\n" + invokes joined by "\\n" + "\\n</｜DSML｜{block}>"`.
    """
    body = "\n".join(invoke(name, arguments) for name, arguments in calls)
    return f"\n\n<{DSML}{block}>\n{body}\n</{DSML}{block}>"


def response_format_section(schema: dict[str, Any]) -> str:
    """The `## Response Format` section both encoders append to the system part."""
    return (
        "## Response Format:\n\nYou MUST strictly adhere to the following schema to reply:\n"
        + to_json(schema)
    )
