"""Every recorded real-world case (tests/data/toolcalls.json) through the parsers."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from toolcall_cases import (
    MARKUP,
    NOT_PARSER_CASES,
    PARSER_BY_CASE_FAMILY,
    all_cases,
    case_tools,
    load_cases,
    parse_chunks,
    run_chunks,
    summary,
)

from deployments.toolcalls.assemble import accumulate, finish_reason
from deployments.toolcalls.choice import apply_tool_choice

CASES = load_cases()


def _ids(cases: list[dict[str, Any]]) -> list[str]:
    return [c["id"] for c in cases]


def _by_kind(*kinds: str) -> list[dict[str, Any]]:
    return [c for c in CASES if c["kind"] in kinds]


def _text(value: str | None) -> str | None:
    return (value or "").strip() or None


def _engine_reason(case: dict[str, Any]) -> str:
    return str(case["input"].get("engine_finish_reason", "stop"))


def _content_may_hold_markup(case: dict[str, Any], content: str | None) -> bool:
    """Whether the case expects this very content although it holds markup (rule S5's
    exception: text that forms no valid call comes back verbatim)."""
    expected = case["expected"]
    allowed = [expected["content"]] if "content" in expected else []
    allowed += expected.get("content_any_of", [])
    return _text(content) in [_text(a) for a in allowed]


def check_expected(case: dict[str, Any], message: dict[str, Any], reason: str) -> None:
    """Compare a result with `case["expected"]` as tests/data/README.md prescribes."""
    expected = case["expected"]
    if "content" in expected:
        assert _text(message["content"]) == _text(expected["content"])
    if "content_any_of" in expected:
        assert _text(message["content"]) in [_text(c) for c in expected["content_any_of"]]
    if "reasoning_content" in expected:
        assert _text(message["reasoning_content"]) == _text(expected["reasoning_content"])
    calls = message["tool_calls"]
    got = [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls]
    want = [(c["name"], c["arguments"]) for c in expected.get("tool_calls", [])]
    assert got == want
    for call in calls:
        assert call["type"] == "function" and call["id"]
        assert isinstance(json.loads(call["function"]["arguments"]), dict)
    if "finish_reason" in expected:
        assert reason == expected["finish_reason"]
    if "finish_reason_any_of" in expected:
        assert reason in expected["finish_reason_any_of"]
    if "exactly_one_call_named" in expected:
        assert [c["function"]["name"] for c in calls] == [expected["exactly_one_call_named"]]
    if expected.get("ids_unique"):
        assert len({c["id"] for c in calls}) == len(calls)
    if "assembled_arguments_string" in expected:
        assert [c["function"]["arguments"] for c in calls] == [
            expected["assembled_arguments_string"]
        ]
    for forbidden in expected.get("arguments_string_must_not_contain", ()):
        assert all(forbidden not in c["function"]["arguments"] for c in calls)


def _parser(case: dict[str, Any]) -> str:
    return PARSER_BY_CASE_FAMILY[case["family"]]


@pytest.mark.parametrize("case", _by_kind("parse", "stream"), ids=_ids(_by_kind("parse", "stream")))
def test_case_non_streaming(case: dict[str, Any]) -> None:
    message, _ = parse_chunks(
        _parser(case),
        case_tools(case),
        [case["input"]["raw"]],
        case["input"].get("prompt_suffix", ""),
    )
    check_expected(case, message, finish_reason(bool(message["tool_calls"]), _engine_reason(case)))


@pytest.mark.parametrize("case", _by_kind("stream"), ids=_ids(_by_kind("stream")))
def test_case_streaming_protocol(case: dict[str, Any]) -> None:
    """Feed the recorded chunks; check the deltas against rules S1-S9 and S11."""
    chunks = case["input"]["chunks"]
    assert "".join(chunks) == case["input"]["raw"]
    run = run_chunks(
        _parser(case), case_tools(case), chunks, case["input"].get("prompt_suffix", "")
    )
    message, deltas = run.message, run.deltas
    client = accumulate(deltas, run.voided)  # a voided call's text is in `content`
    check_expected(case, client, finish_reason(bool(client["tool_calls"]), _engine_reason(case)))
    assert summary(client) == summary(message)  # S6: stream and non-stream agree
    if case["expected"].get("tool_calls_complete") is False:  # S7: the cut call never looked whole
        streamed = accumulate(deltas)["tool_calls"]
        for call in streamed[len(client["tool_calls"]) :]:
            with pytest.raises(json.JSONDecodeError):
                json.loads(call["function"]["arguments"])
    else:
        assert not run.voided
    assert deltas and deltas[0].get("role") == "assistant"  # S9
    seen: list[int] = []
    for delta in deltas:
        entries = delta.get("tool_calls") or []
        assert len({e["index"] for e in entries}) == len(entries)  # S4
        for entry in entries:
            fn = entry["function"]
            if entry["index"] not in seen:  # S1: the header
                assert entry["index"] == len(seen)
                assert entry["id"] and entry["type"] == "function" and fn["name"]
                assert fn["arguments"] == ""
                seen.append(entry["index"])
            else:  # S2: fragments carry only index and arguments
                assert set(entry) == {"index", "function"} and set(fn) == {"arguments"}
                assert fn["arguments"]
    for call in client["tool_calls"]:  # S5
        assert not any(m in call["function"]["arguments"] for m in MARKUP)
    if not _content_may_hold_markup(case, client["content"]):
        assert not any(m in (client["content"] or "") for m in MARKUP)


def test_every_recorded_output_is_run_or_skipped_with_a_reason() -> None:
    run = {c["id"] for c in CASES}
    for case in all_cases():
        if "raw" in case["input"] or case["family"] in ("deepseek-v4", "deepseek-v32"):
            assert case["id"] in run or case["id"] in NOT_PARSER_CASES, case["id"]
    for case_id in NOT_PARSER_CASES:
        assert case_id in {c["id"] for c in all_cases()} and case_id not in run


@pytest.mark.parametrize(
    "case",
    [c for c in CASES if "min_argument_deltas_before_param_close" in c["expected"]],
    ids=lambda c: c["id"],
)
def test_long_string_argument_streams_before_its_parameter_closes(case: dict[str, Any]) -> None:
    """S11: the last parameter's value arrives in several fragments before its closer does."""
    raw, chunks = case["input"]["raw"], case["input"]["chunks"]
    closer = "</｜DSML｜parameter>"
    opened = raw.index(">", raw.rindex("<｜DSML｜parameter")) + 1  # past the last opening tag
    closed = raw.rindex(closer) + len(closer)
    run = run_chunks(
        _parser(case), case_tools(case), chunks, case["input"].get("prompt_suffix", "")
    )
    fed, early = 0, 0
    for chunk, events in zip(chunks, run.feeds):
        fed += len(chunk)
        if opened <= fed < closed:
            early += sum(1 for e in events if getattr(e, "fragment", ""))
    assert early >= case["expected"]["min_argument_deltas_before_param_close"]


def test_qwen3coder_string_argument_streams_before_its_end_tag() -> None:
    """S11: part of `content` is sent before `</parameter>` closing it has arrived."""
    case = next(c for c in CASES if c["id"] == "qwen3coder-incremental-argument-streaming")
    from deployments.toolcalls.registry import get_parser

    parser = get_parser("qwen3_coder", case_tools(case))
    fed, arguments, early = "", "", False
    for chunk in case["input"]["chunks"]:
        fed += chunk
        arguments += "".join(getattr(e, "fragment", "") for e in parser.feed(chunk))
        if len(re.findall("</parameter>", fed)) < 2 and '"content": "import sys' in arguments:
            early = True
    assert early


@pytest.mark.parametrize("case", _by_kind("tool_choice"), ids=_ids(_by_kind("tool_choice")))
def test_case_tool_choice(case: dict[str, Any]) -> None:
    request = case["input"]["request"]
    result = apply_tool_choice(
        case["input"]["raw"],
        parser_name=_parser(case),
        tools=case_tools(case),
        tool_choice=request.get("tool_choice"),
        prompt_suffix=case["input"].get("prompt_suffix", ""),
        engine_finish_reason=case["input"].get("engine_finish_reason", "stop"),
        constrained_output=case["input"].get("constrained_output"),
    )
    check_expected(case, result, result["finish_reason"])
