"""Property: every chunking of an output gives the same message (PROTOCOL.md).

For each case's and each synthetic sample's raw text: several seeded random chunkings and the
one-character-at-a-time chunking must assemble to the single-feed result, and the streamed
argument fragments must concatenate to the final arguments of that result.
"""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
from toolcall_cases import (
    MARKUP,
    PARSER_BY_CASE_FAMILY,
    SAMPLES,
    case_tools,
    load_cases,
    parse_chunks,
    random_chunks,
    run_chunks,
    summary,
)
from toolcall_samples import Sample, with_tools

from deployments.toolcalls.assemble import accumulate

RANDOM_CHUNKINGS = 6

# (id, parser, tools, raw, prompt_suffix, stream_equal, tool_choice)
INPUTS: list[tuple[str, str, Any, str, str, bool, Any]] = [
    (
        c["id"],
        PARSER_BY_CASE_FAMILY[c["family"]],
        case_tools(c),
        c["input"]["raw"],
        c["input"].get("prompt_suffix", ""),
        c["expected"].get("tool_calls_complete", True),  # False: a call was cut (rule S7)
        None,
    )
    for c in load_cases()
] + [
    (s.id, s.parser, with_tools(s), s.raw, s.prompt_suffix, s.stream_equal, s.tool_choice)
    for s in SAMPLES
]


def _chunkings(raw: str, seed: str) -> list[list[str]]:
    rng = random.Random(seed)
    out = [list(raw)]
    out += [
        random_chunks(raw, rng, max_len=rng.choice((2, 5, 12))) for _ in range(RANDOM_CHUNKINGS)
    ]
    return out


@pytest.mark.parametrize(
    ("case_id", "parser", "tools", "raw", "suffix", "stream_equal", "choice"),
    INPUTS,
    ids=[i[0] for i in INPUTS],
)
def test_every_chunking_gives_the_same_message(
    case_id: str, parser: str, tools: Any, raw: str, suffix: str, stream_equal: bool, choice: Any
) -> None:
    whole, _ = parse_chunks(parser, tools, [raw], suffix, choice)
    expected = summary(whole)
    for arguments in (c["function"]["arguments"] for c in whole["tool_calls"]):
        assert isinstance(json.loads(arguments), dict)
    for chunks in _chunkings(raw, case_id):
        run = run_chunks(parser, tools, chunks, suffix, choice)
        assert summary(run.message) == expected, chunks
        assert summary(accumulate(run.deltas, run.voided)) == expected, chunks
        if stream_equal:  # fragments concatenate exactly to the final arguments
            assert not run.voided and summary(accumulate(run.deltas)) == expected, chunks
        _check_deltas(run.deltas)


def _check_deltas(deltas: list[dict[str, Any]]) -> None:
    assert deltas[0].get("role") == "assistant"
    opened: list[int] = []
    for delta in deltas:
        entries = delta.get("tool_calls") or []
        assert len({e["index"] for e in entries}) == len(entries)
        for entry in entries:
            if "id" in entry:
                assert entry["index"] == len(opened) and entry["function"]["arguments"] == ""
                opened.append(entry["index"])
            else:
                assert entry["index"] in opened and entry["function"]["arguments"]


@pytest.mark.parametrize("sample", SAMPLES, ids=[s.id for s in SAMPLES])
def test_sample_result(sample: Sample) -> None:
    message, _ = parse_chunks(
        sample.parser, with_tools(sample), [sample.raw], sample.prompt_suffix, sample.tool_choice
    )
    content, reasoning, calls = summary(message)
    assert content == sample.content
    assert reasoning == sample.reasoning
    assert [(name, json.loads(args)) for name, args in calls] == sample.calls
    for _, args in calls:
        assert not any(m in args for m in MARKUP)
