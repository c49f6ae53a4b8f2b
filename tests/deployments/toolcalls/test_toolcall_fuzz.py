"""Seeded fuzz: random soups of each family's markup keep the chunking property.

Besides the recorded cases, random mixes of openers, closers, valid and invalid calls and
partial markers must (1) assemble to the same message under any chunking, (2) stream to the
same message unless a call was voided (rule S11), and (3) lose nothing: with no call and no
reasoning, the content is the whole output.
"""

from __future__ import annotations

import json
import random
import re

import pytest
from toolcall_cases import parse_chunks, random_chunks, summary
from toolcall_samples import TOOLS

from deployments.toolcalls.assemble import accumulate, parse_text
from deployments.toolcalls.events import ToolCallAbort
from deployments.toolcalls.registry import PARSERS, get_parser

_DS_CALL = "<｜tool▁call▁begin｜>"
PIECES = {
    "hermes": [
        "<tool_call>",
        "</tool_call>",
        "\n",
        '{"name": "get_time", "arguments": {}}',
        '{"name": "get_weather", "arguments": {"city": "A}"}}',
        '{"name": "nope"}',
        '{"name": "get_time", "arguments": "{}"}',
        "<tool_",
        '"',
        "{",
        "}",
        "hi ",
        "```json\n",  # bare calls (no tags), fenced or in an array
        "```",
        "[",
        "]",
        ", ",
        '{"name": "get_time", "parameters": {}, "x": 1}',
    ],
    "qwen3_coder": [
        "<tool_call>",
        "</tool_call>",
        "\n",
        "<function=get_weather>",
        "<function=nope>",
        "<parameter=city>",
        "<parameter=days>",
        "</parameter>",
        "</function>",
        "Oslo",
        "3",
        "x</parameter>y",
        "hi ",
    ],
    "deepseek_v3": [
        "<｜tool▁calls▁begin｜>",
        _DS_CALL,
        "function<｜tool▁sep｜>get_time\n```json\n",
        "{}",
        '{"city": "x"}',
        "\n```",
        "<｜tool▁call▁end｜>",
        "<｜tool▁calls▁end｜>",
        "hi ",
        "}!",
    ],
    "deepseek_v31": [
        "<｜tool▁calls▁begin｜>",
        _DS_CALL,
        "get_time<｜tool▁sep｜>",
        "nope<｜tool▁sep｜>",
        "{}",
        '{"city": "x"}',
        "<｜tool▁call▁end｜>",
        "<｜tool▁calls▁end｜>",
        "}!",
    ],
    "phi4_mini": [
        "functools",
        "[",
        "]",
        ", ",
        '{"name": "get_time", "arguments": {}}',
        '{"name": "nope", "parameters": {}}',
        "func",
        "hi ",
        "{",
    ],
    "llama3_json": [
        "<|python_tag|>",
        '{"name": "get_time", "parameters": {}}',
        "; ",
        "hi ",
        '{"name": "nope", "parameters": {}}',
        '{"a": 1}',
        "{",
        " ",
        "[",  # the JSON-array form
        "]",
        ", ",
    ],
    "mistral": [
        "[TOOL_CALLS]",
        "get_time[ARGS]{}",
        "get_weather[CALL_ID]abcdefghi[ARGS]",
        '{"city": "x"}',
        '[{"name": "get_time", "arguments": {}}]',
        "hi ",
        "[",
        "{",
    ],
    "xml": [
        '<tool name="get_time">',
        '<tool name="nope">',
        "{}",
        '{"a": "</tool>"}',
        "</tool>",
        "<tool name='get_weather'>",
        "<to",
        "hi ",
    ],
}
_DSML_PIECES = [
    "\n\n<｜DSML｜tool_calls>",
    "<｜DSML｜function_calls>",
    "</｜DSML｜tool_calls>",
    "</｜DSML｜function_calls>",
    '<｜DSML｜invoke name="get_weather">',
    '<｜DSML｜invoke name="nope">',
    '<｜DSML｜invoke name="get_time">\n</｜DSML｜invoke>',
    '<｜DSML｜parameter name="city" string="true">',
    '<｜DSML｜parameter name="days" string="false">',
    '<｜DSML｜parameter name="arguments" string="false">{"days": 2}</｜DSML｜parameter>',
    "</｜DSML｜parameter>",
    "</｜DSML｜invoke>",
    "Oslo",
    "3",
    "a < b",
    "\n",
    "hi ",
    "<｜DSML｜",
    "{}",
]
PIECES["deepseek_v32"] = PIECES["deepseek_v4"] = _DSML_PIECES
# Markup a DSML parser drops when it carries no call (empty blocks, stray closers).
_DSML_DROPPED = re.compile(
    r"</?｜DSML｜(?:tool_calls|function_calls|invoke|parameter)>|</think>|\s"
)
THINK = ["<think>", "</think>"]
SOUPS_PER_PARSER = 150


@pytest.mark.parametrize("parser", list(PARSERS))
def test_markup_soup_keeps_the_chunking_property(parser: str) -> None:
    rng = random.Random(f"soup-{parser}")
    for _ in range(SOUPS_PER_PARSER):
        thinking = rng.random() < 0.3
        pieces = PIECES[parser] + (THINK if thinking else [])
        raw = "".join(rng.choice(pieces) for _ in range(rng.randint(1, 12)))
        suffix = "<think>\n" if thinking and rng.random() < 0.5 else ""
        events = parse_text(get_parser(parser, TOOLS, suffix), raw)
        voided = any(isinstance(e, ToolCallAbort) for e in events)
        whole, _ = parse_chunks(parser, TOOLS, [raw], suffix)
        for _, arguments in summary(whole)[2]:
            assert isinstance(json.loads(arguments), dict), raw
        if not thinking and not whole["tool_calls"]:
            if parser in ("deepseek_v32", "deepseek_v4"):  # no text is lost, only markup
                dropped = _DSML_DROPPED.sub("", whole["content"] or "")
                assert dropped == _DSML_DROPPED.sub("", raw), raw
            else:
                assert (whole["content"] or "") == raw.strip(), raw
        for chunks in (list(raw), random_chunks(raw, rng, 3), random_chunks(raw, rng, 9)):
            message, deltas = parse_chunks(parser, TOOLS, chunks, suffix)
            assert summary(message) == summary(whole), chunks
            if not voided:
                assert summary(accumulate(deltas)) == summary(whole), chunks
