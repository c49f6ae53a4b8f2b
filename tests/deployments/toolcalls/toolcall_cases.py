"""Shared test data for the tool-call layer: the real-world cases and synthetic samples.

The cases live in `tests/data/toolcalls.json` (copied from the team's `shared/cases/`). Only cases with a recorded model output are used here (kinds `parse`,
`stream`, and `tool_choice` with `input.raw`); request validation belongs to the server tests.
`SAMPLES` are synthetic outputs per family (`Sample`, `TOOLS` and the `AS_WRITTEN` outputs, which
the HTTP tests share, are in `tests/toolcall_samples.py`).
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from toolcall_samples import AS_WRITTEN, Sample

from deployments.protocol.tools import parse_tool_choice
from deployments.toolcalls.assemble import StreamAssembler, assemble
from deployments.toolcalls.choice import parser_for_choice
from deployments.toolcalls.registry import get_parser

REPO_ROOT = Path(__file__).resolve().parents[3]
CASES_DIR = REPO_ROOT / "tests" / "data"

PARSER_BY_CASE_FAMILY = {
    "qwen-hermes": "hermes",
    "qwen3-coder": "qwen3_coder",
    "deepseek-v3": "deepseek_v3",
    "deepseek-v31": "deepseek_v31",
    "llama3-json": "llama3_json",
    "mistral": "mistral",
    "xml-tool": "xml",
    "generic": "hermes",
}

# Markup that must never reach `content` or `arguments` of a parsed call (rule S5).
MARKUP = (
    "<tool_call>",
    "</tool_call>",
    "<function=",
    "<parameter=",
    "<｜",
    "[TOOL_CALLS]",
    "[ARGS]",
    "```",
    "functools",
    "<|python_tag|>",
    "<tool name=",
    "<think>",
    "</think>",
)


def load_cases() -> list[dict[str, Any]]:
    """Cases of kind parse / stream / tool_choice that carry a recorded model output."""
    cases = json.loads((CASES_DIR / "toolcalls.json").read_text(encoding="utf-8"))
    return [
        c for c in cases if c["kind"] in ("parse", "stream", "tool_choice") and "raw" in c["input"]
    ]


def case_tools(case: dict[str, Any]) -> list[dict[str, Any]] | None:
    return case["input"].get("tools") or case["input"].get("request", {}).get("tools")


_DS = "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>"
_DS_END = "<｜tool▁call▁end｜><｜tool▁calls▁end｜>"

SAMPLES = [
    Sample(
        "hermes-text-around",
        "hermes",
        'Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}'
        "\n</tool_call>\nDone?",
        [("get_weather", {"city": "Paris"})],
        content="Let me check.\n\nDone?",
    ),
    Sample(
        "hermes-think",
        "hermes",
        '<think>\nI should call\n</think>\n\n<tool_call>\n{"name": "get_time", "arguments": {}}'
        "\n</tool_call>",
        [("get_time", {})],
        reasoning="I should call",
    ),
    Sample(
        "hermes-prefilled-think-draft",
        "hermes",
        'draft <tool_call>{"name": "get_time", "arguments": {}}</tool_call>\n</think>\nNo.',
        [],
        content="No.",
        reasoning='draft <tool_call>{"name": "get_time", "arguments": {}}</tool_call>',
        prompt_suffix="<|im_start|>assistant\n<think>\n",
    ),
    Sample(
        "hermes-string-arguments",
        "hermes",
        '<tool_call>\n{"name": "get_weather", "arguments": "{\\"city\\": \\"Oslo\\"}"}\n'
        "</tool_call>",
        [("get_weather", {"city": "Oslo"})],
    ),
    Sample(
        "hermes-truncated",
        "hermes",
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Ca',
        [],
        content='<tool_call>\n{"name": "get_weather", "arguments": {"city": "Ca',
        stream_equal=False,
    ),
    Sample(
        "hermes-partial-markers-are-text",
        "hermes",
        "a <tool_ b <tool_call",
        [],
        content="a <tool_ b <tool_call",
    ),
    Sample(
        "qwen3-coder-typed",
        "qwen3_coder",
        "<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo\n</parameter>\n"
        '<parameter=days>\n3\n</parameter>\n<parameter=units>\n["c"]\n</parameter>\n'
        "</function>\n</tool_call>",
        [("get_weather", {"city": "Oslo", "days": 3, "units": ["c"]})],
    ),
    Sample(
        "qwen3-coder-undeclared",
        "qwen3_coder",
        "<tool_call>\n<function=nope>\n<parameter=a>\n1\n</parameter>\n</function>\n</tool_call>",
        [],
        content="<tool_call>\n<function=nope>\n<parameter=a>\n1\n</parameter>\n</function>"
        "\n</tool_call>",
    ),
    Sample(
        "deepseek-v3-r1-think",
        "deepseek_v3",
        "plan</think>Sure." + _DS + "function<｜tool▁sep｜>get_time\n```json\n{}\n```" + _DS_END,
        [("get_time", {})],
        content="Sure.",
        reasoning="plan",
        prompt_suffix="<｜Assistant｜><think>\n",
    ),
    Sample(
        "deepseek-v31-two",
        "deepseek_v31",
        _DS + 'get_weather<｜tool▁sep｜>{"city": "Oslo"}<｜tool▁call▁end｜>'
        "<｜tool▁call▁begin｜>get_time<｜tool▁sep｜>{}" + _DS_END,
        [("get_weather", {"city": "Oslo"}), ("get_time", {})],
    ),
    Sample(
        "phi4-mini-list",
        "phi4_mini",
        'functools[{"name": "get_weather", "arguments": {"city": "Oslo", "units": [[1, 2], [3]]}}'
        ', {"name": "get_time", "parameters": {}}]',
        [("get_weather", {"city": "Oslo", "units": [[1, 2], [3]]}), ("get_time", {})],
    ),
    Sample(
        "phi4-mini-word-is-text",
        "phi4_mini",
        "Use functools.partial here.",
        [],
        content="Use functools.partial here.",
    ),
    Sample(
        "llama3-parallel",
        "llama3_json",
        '{"name": "get_weather", "parameters": {"city": "Oslo"}}; '
        '{"name": "get_time", "parameters": {}}',
        [("get_weather", {"city": "Oslo"}), ("get_time", {})],
    ),
    Sample(
        "llama3-python-tag",
        "llama3_json",
        '<|python_tag|>{"name": "get_weather", "arguments": {"city": "Oslo"}}',
        [("get_weather", {"city": "Oslo"})],
    ),
    Sample(
        "llama3-plain-json-is-content",
        "llama3_json",
        '{"answer": 42}',
        [],
        content='{"answer": 42}',
    ),
    Sample(
        "mistral-v11",
        "mistral",
        '[TOOL_CALLS]get_weather[CALL_ID]a1B2c3D4e[ARGS]{"city": "Oslo"}',
        [("get_weather", {"city": "Oslo"})],
    ),
    Sample(
        "mistral-v13-two",
        "mistral",
        '[TOOL_CALLS]get_weather[ARGS]{"city": "Oslo"}[TOOL_CALLS]get_time[ARGS]{}',
        [("get_weather", {"city": "Oslo"}), ("get_time", {})],
    ),
    Sample(
        "xml-two",
        "xml",
        '<tool name="get_time">{}</tool> and <tool name=\'get_weather\'>{"city": "x"}</tool>',
        [("get_time", {}), ("get_weather", {"city": "x"})],
        content="and",
    ),
    *AS_WRITTEN,
]


def random_chunks(text: str, rng: random.Random, max_len: int = 8) -> list[str]:
    """Split `text` at random points into chunks of 1..max_len characters."""
    chunks, i = [], 0
    while i < len(text):
        step = rng.randint(1, max_len)
        chunks.append(text[i : i + step])
        i += step
    return chunks


def parse_chunks(
    parser_name: str,
    tools: Any,
    chunks: list[str],
    prompt_suffix: str = "",
    tool_choice: Any = None,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Feed `chunks` to one parser; returns (assembled message, streamed deltas).

    The message is built from the events (non-streaming rules); the deltas come from a
    `StreamAssembler` fed the same events. A `tool_choice` of "required" or a named function
    reads the output as constrained decoding shaped it (as the server does).
    """
    if tool_choice is None:
        parser = get_parser(parser_name, tools, prompt_suffix)
    else:
        choice = parse_tool_choice(tool_choice, tools)
        constrained = choice.kind in ("required", "named")
        parser = parser_for_choice(choice, parser_name, tools, prompt_suffix, constrained)
    stream = StreamAssembler()
    events, deltas = [], []
    for chunk in chunks:
        new = parser.feed(chunk)
        events += new
        deltas += stream.push(new)
    new = parser.finish()
    events += new
    deltas += stream.push(new)
    return assemble(events), deltas


def summary(message: dict[str, Any]) -> tuple[str | None, str | None, list[tuple[str, str]]]:
    """What must not depend on chunking: texts (stripped, "" as None) and calls (not ids)."""

    def text(value: str | None) -> str | None:
        return (value or "").strip() or None

    calls = [(c["function"]["name"], c["function"]["arguments"]) for c in message["tool_calls"]]
    return text(message["content"]), text(message["reasoning_content"]), calls
