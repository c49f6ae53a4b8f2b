"""Shared test data for the tool-call layer: the real-world cases and synthetic samples.

The cases live in `tests/data/toolcalls.json` (copied from the team's `shared/cases/`). Only cases with a recorded model output are used here (kinds `parse`,
`stream`, and `tool_choice` with `input.raw`); request validation belongs to the server tests.
`SAMPLES` are synthetic outputs per family (`Sample`, `TOOLS` and the `AS_WRITTEN` outputs, which
the HTTP tests share, are in `tests/toolcall_samples.py`).
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from toolcall_samples import AS_WRITTEN, Sample

from deployments.protocol.tools import parse_tool_choice
from deployments.toolcalls.assemble import StreamAssembler, assemble
from deployments.toolcalls.choice import parser_for_choice
from deployments.toolcalls.events import ParserEvent
from deployments.toolcalls.registry import get_parser

REPO_ROOT = Path(__file__).resolve().parents[3]
CASES_DIR = REPO_ROOT / "tests" / "data"

PARSER_BY_CASE_FAMILY = {
    "qwen-hermes": "hermes",
    "qwen3-coder": "qwen3_coder",
    "deepseek-v3": "deepseek_v3",
    "deepseek-v31": "deepseek_v31",
    "deepseek-v32": "deepseek_v32",
    "deepseek-v4": "deepseek_v4",
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


# Cases of a parser family that the parser tests do not run, with the reason.
NOT_PARSER_CASES = {
    "dsv4-parallel-tool-results-folded-in-call-order": "a prompt-encoding case (kind validate): "
    "the DeepSeek V4 prompt encoder's tests run it",
}


def all_cases() -> list[dict[str, Any]]:
    """Every case of tests/data/toolcalls.json."""
    cases: list[dict[str, Any]] = json.loads(
        (CASES_DIR / "toolcalls.json").read_text(encoding="utf-8")
    )
    return cases


def load_cases() -> list[dict[str, Any]]:
    """Cases of kind parse / stream / tool_choice that carry a recorded model output."""
    return [
        c
        for c in all_cases()
        if c["kind"] in ("parse", "stream", "tool_choice")
        and "raw" in c["input"]
        and c["id"] not in NOT_PARSER_CASES
    ]


def case_tools(case: dict[str, Any]) -> list[dict[str, Any]] | None:
    return case["input"].get("tools") or case["input"].get("request", {}).get("tools")


_DS = "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>"
_DS_END = "<｜tool▁call▁end｜><｜tool▁calls▁end｜>"

_DSML_OSLO = (
    '<｜DSML｜invoke name="get_weather">\n'
    '<｜DSML｜parameter name="city" string="true">Oslo</｜DSML｜parameter>\n'
    '<｜DSML｜parameter name="days" string="false">3</｜DSML｜parameter>\n'
    '<｜DSML｜parameter name="units" string="false">["c"]</｜DSML｜parameter>\n'
    "</｜DSML｜invoke>\n"
)
_DSML_TIME = '<｜DSML｜invoke name="get_time">\n</｜DSML｜invoke>\n'


def _dsml(block: str, invokes: str) -> str:
    return f"<｜DSML｜{block}>\n{invokes}</｜DSML｜{block}>"


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
    Sample(
        "dsml-v4-call-ends-reasoning",
        "deepseek_v4",
        "Oslo, three days.\n\n" + _dsml("tool_calls", _DSML_OSLO),
        [("get_weather", {"city": "Oslo", "days": 3, "units": ["c"]})],
        reasoning="Oslo, three days.",
        prompt_suffix="<｜Assistant｜><think>",
    ),
    Sample(
        "dsml-v32-content-then-two-calls",
        "deepseek_v32",
        "Checking.\n\n" + _dsml("function_calls", _DSML_OSLO + _DSML_TIME),
        [("get_weather", {"city": "Oslo", "days": 3, "units": ["c"]}), ("get_time", {})],
        content="Checking.",
        prompt_suffix="<｜Assistant｜></think>",
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


@dataclass
class Run:
    """One parser fed one chunking of an output.

    Attributes:
        message: The message assembled from the events (non-streaming rules).
        deltas: The streamed deltas of a `StreamAssembler` fed the same events.
        voided: Indices of calls voided after they had opened (rule S11).
        feeds: The events of each `feed` call, then those of `finish`.
    """

    message: dict[str, Any]
    deltas: list[dict[str, Any]]
    voided: frozenset[int]
    feeds: list[list[ParserEvent]]


def run_chunks(
    parser_name: str,
    tools: Any,
    chunks: list[str],
    prompt_suffix: str = "",
    tool_choice: Any = None,
) -> Run:
    """Feed `chunks` to one parser, collecting everything a test may check.

    A `tool_choice` of "required" or a named function reads the output as constrained decoding
    shaped it (as the server does).
    """
    if tool_choice is None:
        parser = get_parser(parser_name, tools, prompt_suffix)
    else:
        choice = parse_tool_choice(tool_choice, tools)
        constrained = choice.kind in ("required", "named")
        parser = parser_for_choice(choice, parser_name, tools, prompt_suffix, constrained)
    stream = StreamAssembler()
    feeds = [parser.feed(chunk) for chunk in chunks] + [parser.finish()]
    deltas = [delta for events in feeds for delta in stream.push(events)]
    events = [event for batch in feeds for event in batch]
    return Run(assemble(events), deltas, stream.voided, feeds)


def parse_chunks(
    parser_name: str,
    tools: Any,
    chunks: list[str],
    prompt_suffix: str = "",
    tool_choice: Any = None,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Feed `chunks` to one parser; returns (assembled message, streamed deltas) of `run_chunks`."""
    run = run_chunks(parser_name, tools, chunks, prompt_suffix, tool_choice)
    return run.message, run.deltas


def summary(message: dict[str, Any]) -> tuple[str | None, str | None, list[tuple[str, str]]]:
    """What must not depend on chunking: texts (stripped, "" as None) and calls (not ids)."""

    def text(value: str | None) -> str | None:
        return (value or "").strip() or None

    calls = [(c["function"]["name"], c["function"]["arguments"]) for c in message["tool_calls"]]
    return text(message["content"]), text(message["reasoning_content"]), calls
