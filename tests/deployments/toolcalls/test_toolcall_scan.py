"""The shared scanning helpers: hold-back, look-ahead, and the incremental JSON scanner."""

from __future__ import annotations

import json
import random
import re

import pytest

from deployments.toolcalls.scan import (
    JsonScanner,
    Look,
    find_first,
    held_suffix_len,
    match_literal,
    read_token,
)
from deployments.toolcalls.think import prompt_opens_reasoning


def test_held_suffix_len_holds_only_marker_prefixes() -> None:
    assert held_suffix_len("text <tool_", 0, ("<tool_call>",)) == 6
    assert held_suffix_len("text <tool_x", 0, ("<tool_call>",)) == 0
    assert held_suffix_len("abc<", 0, ("<a>", "<tool>")) == 1
    assert held_suffix_len("abc<", 4, ("<a>",)) == 0  # nothing after `start`
    assert held_suffix_len("func", 0, ("functools",)) == 4


def test_find_first_and_match_literal() -> None:
    assert find_first("a [ARGS] [CALL_ID]", ("[CALL_ID]", "[ARGS]"), 0) == (2, "[ARGS]")
    assert find_first("abc", ("x",), 0) is None
    assert match_literal("ab</tool>", 2, "</tool>") is Look.MATCH
    assert match_literal("ab</to", 2, "</tool>") is Look.PARTIAL
    assert match_literal("ab</x", 2, "</tool>") is Look.FAIL


def test_read_token() -> None:
    chars = re.compile(r"[a-z_]*")
    assert read_token("get_time[ARGS]", 0, "[", chars, 32) == (Look.MATCH, 8)
    assert read_token("get_ti", 0, "[", chars, 32) == (Look.PARTIAL, 0)
    assert read_token("get ti[", 0, "[", chars, 32)[0] is Look.FAIL
    assert read_token("[", 0, "[", chars, 32)[0] is Look.FAIL  # empty token
    assert read_token("a" * 40, 0, "[", chars, 32)[0] is Look.FAIL  # too long


def test_prompt_opens_reasoning() -> None:
    assert prompt_opens_reasoning("<|im_start|>assistant\n<think>\n")
    assert not prompt_opens_reasoning("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert not prompt_opens_reasoning("")


@pytest.mark.parametrize(
    ("text", "end"),
    [
        ('{"a": "}</tool_call>"} tail', 22),
        ('{"a": [1, {"b": "\\"}"}], "c": -0.5e+3} x', 38),
        ("{}", 2),
        ('{"x": true, "y": null, "z": false}', 34),
    ],
)
def test_scanner_finds_the_string_aware_end(text: str, end: int) -> None:
    scanner = JsonScanner(0)
    scanner.advance(text)
    assert scanner.done and scanner.pos == end
    assert json.loads(text[:end]) is not None


@pytest.mark.parametrize(
    "text",
    [
        "}!}!",
        '{"a": 1 x}',
        "{'a': 1}",
        '{"a": 01}',
        '{"a": tru}',
        '{"a": "\x01"}',
        "[1]",
        '{"a": 1,}',
        '{"a" 1}',
    ],
)
def test_scanner_rejects_invalid_json(text: str) -> None:
    scanner = JsonScanner(0)
    scanner.advance(text)
    assert scanner.failed


def test_scanner_agrees_with_json_on_random_texts() -> None:
    """Fuzz: the scanner ends exactly where `raw_decode` does, fed in random pieces."""
    rng = random.Random(7)
    atoms = [0, -1, 2.5, 1e10, True, False, None, 'q"\\\n', "}</tool_call>", "社区", ""]

    def value(depth: int) -> object:
        roll = rng.random()
        if depth > 2 or roll < 0.4:
            return rng.choice(atoms)
        if roll < 0.7:
            return {f"k{i}": value(depth + 1) for i in range(rng.randint(0, 3))}
        return [value(depth + 1) for _ in range(rng.randint(0, 3))]

    noise = list('{}[]",:0.e-tfn\\ ')
    for _ in range(400):
        text = json.dumps({"v": value(0)}, ensure_ascii=rng.random() < 0.5)
        if rng.random() < 0.5:
            i = rng.randrange(len(text))
            text = text[:i] + rng.choice(noise) + text[i + 1 :]
        scanner = JsonScanner(0)
        for stop in range(1, len(text) + 1, rng.randint(1, 4)):
            scanner.advance(text[:stop])
        scanner.advance(text)
        try:
            obj, end = json.JSONDecoder().raw_decode(text)
        except json.JSONDecodeError:
            assert not scanner.done, text
            continue
        if isinstance(obj, dict) and "NaN" not in text and "Infinity" not in text:
            assert scanner.done and scanner.pos == end, text
            for member in scanner.members:
                assert json.loads(text[member.value_start : member.value_end]) == obj[member.key]
