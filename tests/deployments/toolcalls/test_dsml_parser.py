"""DeepSeek V3.2 / V4 DSML parsers: every rule of `deployments/toolcalls/dsml.py`.

Each rule of PROTOCOL.md's DSML section has a test here; the recorded cases run in
`test_toolcall_cases.py`, their chunkings in `test_toolcall_chunking.py`, random markup soups in
`test_toolcall_fuzz.py`. The round-trip property at the end writes calls with the prompt
encoder's own DSML writer and reads them back under random chunkings.
"""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from toolcall_cases import MARKUP, Run, random_chunks, run_chunks, summary

from deployments.prompting.encoders.dsml import invoke as write_invoke
from deployments.toolcalls import dsml
from deployments.toolcalls.assemble import accumulate, finish_reason
from deployments.toolcalls.events import ToolCallAbort, ToolCallArgsDelta, ToolCallStart
from deployments.toolcalls.schema_values import flagged_to_json

CHAT = "<｜Assistant｜></think>"  # chat mode: no reasoning
THINKING = "<｜Assistant｜><think>"  # thinking mode: the output starts inside reasoning


def _tool(name: str, **props: Any) -> dict[str, Any]:
    properties = {k: v if isinstance(v, dict) else {"type": v} for k, v in props.items()}
    return {
        "type": "function",
        "function": {"name": name, "parameters": {"type": "object", "properties": properties}},
    }


TOOLS = [
    _tool("get_weather", city="string", days="integer", units="array"),
    _tool("write_file", path="string", content="string"),
    _tool("run", arguments="string"),  # `arguments` is a real field here
    _tool("get_time"),
]


def p(name: str, value: str, string: bool = True) -> str:
    flag = "true" if string else "false"
    return f'<｜DSML｜parameter name="{name}" string="{flag}">{value}</｜DSML｜parameter>\n'


def inv(name: str, *params: str) -> str:
    return f'<｜DSML｜invoke name="{name}">\n{"".join(params)}</｜DSML｜invoke>\n'


def block(*invokes: str, name: str = "tool_calls") -> str:
    return f"\n\n<｜DSML｜{name}>\n{''.join(invokes)}</｜DSML｜{name}>"


OSLO = inv("get_weather", p("city", "Oslo"), p("days", "3", string=False))


def parse(
    raw: str,
    parser: str = "deepseek_v4",
    suffix: str = CHAT,
    chunks: list[str] | None = None,
    tools: list[dict[str, Any]] | None = TOOLS,
) -> Run:
    """Parse `raw` whole and one character at a time; both must agree (S6)."""
    run = run_chunks(parser, tools, chunks or [raw], suffix)
    by_char = run_chunks(parser, tools, list(raw), suffix)
    assert summary(by_char.message) == summary(run.message)
    assert summary(accumulate(by_char.deltas, by_char.voided)) == summary(run.message)
    return run


def calls(run: Run) -> list[tuple[str, dict[str, Any]]]:
    return [
        (c["function"]["name"], json.loads(c["function"]["arguments"]))
        for c in run.message["tool_calls"]
    ]


def content(run: Run) -> str | None:
    return summary(run.message)[0]


def reasoning(run: Run) -> str | None:
    return summary(run.message)[1]


# Parallel calls, both block names.


def test_parallel_calls_open_in_order() -> None:
    run = parse(block(OSLO, inv("get_time"), inv("get_weather", p("city", "Lyon"))))
    starts = [e for batch in run.feeds for e in batch if isinstance(e, ToolCallStart)]
    assert [(s.index, s.name) for s in starts] == [
        (0, "get_weather"),
        (1, "get_time"),
        (2, "get_weather"),
    ]
    assert calls(run) == [
        ("get_weather", {"city": "Oslo", "days": 3}),
        ("get_time", {}),
        ("get_weather", {"city": "Lyon"}),
    ]
    assert content(run) is None and len({c["id"] for c in run.message["tool_calls"]}) == 3


def test_v4_reads_the_v32_block_name_and_v32_only_its_own() -> None:
    v32 = block(OSLO, name="function_calls")
    assert calls(parse(v32, "deepseek_v4")) == [("get_weather", {"city": "Oslo", "days": 3})]
    assert calls(parse(v32, "deepseek_v32")) == [("get_weather", {"city": "Oslo", "days": 3})]
    v4 = block(OSLO)  # to V3.2, `tool_calls` is no block: the invoke inside is read bare
    run = parse(v4, "deepseek_v32")
    assert calls(run) == [("get_weather", {"city": "Oslo", "days": 3})]
    assert content(run) == "<｜DSML｜tool_calls>\n</｜DSML｜tool_calls>"


# Values.


def test_string_values_are_verbatim() -> None:
    text = 'a "quote" & <b> \\n\n</｜DSML｜invoke> </｜DSML｜parameter <｜DSML｜x'
    run = parse(block(inv("write_file", p("path", "x"), p("content", text))))
    assert calls(run) == [("write_file", {"path": "x", "content": text})]


@pytest.mark.parametrize(
    ("text", "declared", "schema", "expected"),
    [
        ("3", False, {"type": "integer"}, "3"),
        (" [1, 2] ", False, {"type": "array"}, "[1, 2]"),
        ("true", False, None, "true"),
        ("null", False, {"type": "string"}, "null"),  # a missing value, not the text "null"
        ("3", False, {"type": "string"}, '"3"'),  # JSON the schema rules out: the text
        ('"3"', False, {"type": "integer"}, "3"),  # a JSON string converted by the schema
        ("3.5", False, {"type": "integer"}, "3.5"),  # fits nothing: the model's value stays
        ("4", False, {"type": "number"}, "4"),
        ("not json", False, {"type": "string"}, '"not json"'),
        ("not json", False, None, '"not json"'),
        ("{'a': 1}", False, {"type": "object"}, '{"a": 1}'),  # a Python literal, as qwen3-coder
        ("NaN", False, {"type": "number"}, '"NaN"'),  # not JSON
        ("3", True, {"type": "string"}, '"3"'),
        ("3", True, {"type": ["string", "integer"]}, '"3"'),  # the flag decides where both fit
        ("3", True, {"type": "integer"}, "3"),  # the schema rules strings out: converted
        ("three", True, {"type": "integer"}, '"three"'),  # nothing fits: kept as written
        (" 3 ", None, {"type": "integer"}, "3"),  # no flag: the schema decides
        (" x ", None, None, '" x "'),
    ],
)
def test_values_follow_the_flag_then_the_schema(
    text: str, declared: bool | None, schema: dict[str, Any] | None, expected: str
) -> None:
    assert flagged_to_json(text, declared, schema) == expected


def test_typed_values_in_a_call() -> None:
    raw = block(
        inv(
            "get_weather",
            p("city", "3", string=False),  # schema: string
            p("days", "3"),  # string="true", schema: integer
            p("units", '["c", "f"]', string=False),
            '<｜DSML｜parameter name="extra">  x </｜DSML｜parameter>\n',  # no flag, no schema
        )
    )
    assert calls(parse(raw)) == [
        ("get_weather", {"city": "3", "days": 3, "units": ["c", "f"], "extra": "  x "})
    ]


def test_cjk_stays_literal_utf8() -> None:
    run = parse(block(inv("get_weather", p("city", "杭州"))))
    assert run.message["tool_calls"][0]["function"]["arguments"] == '{"city": "杭州"}'


# Streaming.


def test_long_string_value_streams_before_its_closer() -> None:
    head = "\n\n<｜DSML｜tool_calls>\n" + '<｜DSML｜invoke name="write_file">\n'
    head += '<｜DSML｜parameter name="content" string="true">'
    pieces = ["line 1\n", "a <", " b <", "docs", "> </｜DSML", "｜par", "x & y"]
    tail = "</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>"
    run = parse(head + "".join(pieces) + tail, chunks=[head, *pieces, tail])
    fragments = [
        [e.fragment for e in batch if isinstance(e, ToolCallArgsDelta)] for batch in run.feeds
    ]
    # Everything known not to begin the closer goes out at once; `<` waits one piece when it
    # may begin `</｜DSML｜parameter>`, never longer.
    assert fragments[1:8] == [
        ["line 1\\n"],
        ["a "],
        ["< b "],
        ["<docs"],
        ["> "],
        [],
        ["</｜DSML｜parx & y"],
    ]
    assert calls(run) == [("write_file", {"content": "line 1\na < b <docs> </｜DSML｜parx & y"})]


def test_markers_split_anywhere_never_leak() -> None:
    raw = "Let me check." + block(OSLO) + "\nDone."
    expected = summary(parse(raw).message)
    for cut in range(1, len(raw)):
        run = run_chunks("deepseek_v4", TOOLS, [raw[:cut], raw[cut:]], CHAT)
        client = accumulate(run.deltas)
        assert summary(client) == expected, cut
        assert not any(m in (client["content"] or "") for m in MARKUP), cut


def test_non_string_values_wait_for_their_closer() -> None:
    head = block(inv("get_weather", p("city", "Oslo"))).split("</｜DSML｜invoke>")[0]
    head += '<｜DSML｜parameter name="days" string="false">1'
    run = run_chunks("deepseek_v4", TOOLS, [head, "2</｜DSML｜parameter>\n</｜DSML｜invoke>"], CHAT)
    first = "".join(e.fragment for e in run.feeds[0] if isinstance(e, ToolCallArgsDelta))
    assert first == '{"city": "Oslo"'
    assert calls(run) == [("get_weather", {"city": "Oslo", "days": 12})]


# Content and reasoning.


def test_content_before_a_call_without_the_blank_line() -> None:
    run = parse("I will check the weather." + block(OSLO))
    assert content(run) == "I will check the weather."
    assert run.deltas[0]["content"] == "I will check the weather."  # no separator newlines
    assert finish_reason(bool(run.message["tool_calls"]), "stop") == "tool_calls"


def test_reasoning_then_call() -> None:
    run = parse("Need weather.</think>Checking." + block(OSLO), suffix=THINKING)
    assert reasoning(run) == "Need weather." and content(run) == "Checking."
    assert calls(run) == [("get_weather", {"city": "Oslo", "days": 3})]


def test_a_block_opener_ends_reasoning() -> None:
    """V4 rule: no `</think>` needed; the block is a call, not held until the output ends."""
    head = "Need weather." + block(OSLO)
    run = parse(head + "\nAnd more.", suffix=THINKING, chunks=[head, "\nAnd more."])
    assert reasoning(run) == "Need weather." and content(run) == "And more."
    assert calls(run) == [("get_weather", {"city": "Oslo", "days": 3})]
    assert any(isinstance(e, ToolCallStart) for e in run.feeds[0])  # before the output ended


def test_a_block_drafted_in_reasoning_is_a_call() -> None:
    run = parse("Plan:" + block(OSLO) + "\n</think>Done.", suffix=THINKING)
    assert reasoning(run) == "Plan:" and content(run) == "Done."
    assert calls(run) == [("get_weather", {"city": "Oslo", "days": 3})]


def test_chat_mode_has_no_reasoning_and_drops_a_stray_think_end() -> None:
    run = parse("Hello </think>there.", suffix=CHAT)
    assert reasoning(run) is None and content(run) == "Hello there."


def test_reasoning_drops_stray_closers_and_a_repeated_think() -> None:
    raw = "<think>a</｜DSML｜parameter>\n</｜DSML｜invoke>b</｜DSML｜tool_calls></think>c"
    run = parse(raw, suffix=THINKING)
    assert reasoning(run) == "a\nb" and content(run) == "c"


# Cut by max_tokens.


def test_cut_second_call_keeps_the_first_and_voids_the_second() -> None:
    raw = "Saving." + block(OSLO, inv("write_file", p("path", "a"), p("content", "x")))
    cut = raw[: raw.rindex("x") + 1]  # inside the second call's last value
    run = parse(cut)
    assert calls(run) == [("get_weather", {"city": "Oslo", "days": 3})]
    assert content(run) == "Saving." + cut[cut.rindex("<｜DSML｜invoke") :]
    assert run.voided == {1}
    streamed = accumulate(run.deltas)["tool_calls"][1]["function"]["arguments"]
    with pytest.raises(json.JSONDecodeError):  # never looked whole
        json.loads(streamed)
    assert finish_reason(bool(run.message["tool_calls"]), "length") == "length"


@pytest.mark.parametrize(
    "cut_after",
    ['name="get_weather">', "Oslo</｜DSML｜parameter>\n", "</｜DSML｜parameter>\n</｜DSML｜invoke"],
)
def test_cut_first_call_is_no_call(cut_after: str) -> None:
    raw = block(OSLO)
    cut = raw[: raw.index(cut_after) + len(cut_after)]
    run = parse(cut)
    assert calls(run) == [] and content(run) == cut.strip()


def test_cut_after_a_whole_invoke_keeps_it() -> None:
    raw = block(OSLO)
    run = parse(raw[: raw.index("</｜DSML｜invoke>") + len("</｜DSML｜invoke>\n</｜DSML")])
    assert calls(run) == [("get_weather", {"city": "Oslo", "days": 3})] and content(run) is None


# Calls that are no call.


def test_undeclared_tool_is_content_verbatim() -> None:
    raw = block(inv("delete_all", p("path", "/")))
    run = parse(raw)
    assert calls(run) == [] and content(run) == raw.strip()


def test_undeclared_then_declared_returns_only_the_bad_invoke() -> None:
    bad = inv("delete_all", p("path", "/"))
    run = parse(block(bad, OSLO))
    assert calls(run) == [("get_weather", {"city": "Oslo", "days": 3})]
    assert content(run) == bad.strip()  # no block opener or closer in content


def test_malformed_parameter_tag_voids_the_call() -> None:
    bad = inv("get_weather", p("city", "Oslo"), "<｜DSML｜parameter nam=x>1</｜DSML｜parameter>\n")
    run = parse(block(bad, inv("get_time")))
    assert calls(run) == [("get_time", {})] and content(run) == bad.strip()
    assert run.voided == {0}


def test_any_name_without_tools() -> None:
    run = parse(block(inv("anything", p("q", "x"))), tools=None)
    assert calls(run) == [("anything", {"q": "x"})]


# Malformations seen in the field (PROTOCOL.md, section DSML).


@pytest.mark.parametrize(
    "raw",
    [
        "Before.\n\n<｜DSML｜tool_calls>\n</｜DSML｜tool_calls>\nAfter.",
        "Before.\n\n<｜DSML｜tool_calls></｜DSML｜tool_calls>After.",
        "Before.\n\n<｜DSML｜tool_calls>\n\n<｜DSML｜tool_calls>\n</｜DSML｜tool_calls>After.",
    ],
)
def test_empty_block_is_dropped_and_the_text_around_it_kept(raw: str) -> None:
    run = parse(raw)
    assert calls(run) == [] and content(run) in ("Before.\nAfter.", "Before.After.")


def test_block_cut_before_any_invoke_is_dropped() -> None:
    assert content(parse("Before.\n\n<｜DSML｜tool_calls>\n")) == "Before."


def test_stray_closers_in_content_are_dropped() -> None:
    raw = "Analysis done.\n\n</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>"
    run = parse(raw)
    assert calls(run) == [] and content(run) == "Analysis done."


def test_bare_invoke_of_a_declared_tool_is_recovered() -> None:
    run = parse("Checking.\n" + OSLO + inv("get_time") + "</｜DSML｜tool_calls>")
    assert calls(run) == [("get_weather", {"city": "Oslo", "days": 3}), ("get_time", {})]
    assert content(run) == "Checking."


def test_bare_invoke_of_an_undeclared_tool_is_content() -> None:
    raw = inv("delete_all", p("path", "/")).strip()
    run = parse("Hi.\n" + raw)
    assert calls(run) == [] and content(run) == "Hi.\n" + raw


def test_bare_invoke_needs_its_own_closer() -> None:
    raw = '<｜DSML｜invoke name="get_time">\n</｜DSML｜tool_calls>'
    run = parse(raw)
    assert calls(run) == [] and content(run) == '<｜DSML｜invoke name="get_time">'


def test_the_invoke_tag_in_prose_is_text() -> None:
    raw = "Write <｜DSML｜invoke tags> like this."
    assert content(parse(raw)) == raw


@pytest.mark.parametrize(
    "wrapper",
    [
        p("arguments", '{"city": "Oslo", "days": 3}', string=False),
        p("arguments", '{"city": "Oslo", "days": 3}'),
        p("input", '"{\\"city\\": \\"Oslo\\", \\"days\\": 3}"', string=False),
    ],
)
def test_lone_wrapper_parameter_is_unwrapped(wrapper: str) -> None:
    run = parse(block(inv("get_weather", wrapper)))
    assert calls(run) == [("get_weather", {"city": "Oslo", "days": 3})]


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (  # `arguments` is a schema field of `run`
            inv("run", p("arguments", '{"a": 1}')),
            ("run", {"arguments": '{"a": 1}'}),
        ),
        (  # not the only parameter
            inv("get_weather", p("arguments", '{"city": "x"}', string=False), p("city", "Oslo")),
            ("get_weather", {"arguments": {"city": "x"}, "city": "Oslo"}),
        ),
        (  # keys that are not schema fields
            inv("get_weather", p("arguments", '{"town": "x"}', string=False)),
            ("get_weather", {"arguments": {"town": "x"}}),
        ),
    ],
)
def test_wrapper_kept_when_it_is_no_wrapper(raw: str, expected: tuple[str, Any]) -> None:
    assert calls(parse(block(raw))) == [expected]


def test_duplicate_parameter_keeps_the_first() -> None:
    raw = block(inv("get_weather", p("city", "Oslo"), p("days", "1", False), p("city", "Rome")))
    run = parse(raw)
    assert calls(run) == [("get_weather", {"city": "Oslo", "days": 1})]
    assert run.message["tool_calls"][0]["function"]["arguments"].count('"city"') == 1


def test_text_after_the_block_is_content() -> None:
    run = parse("Before." + block(OSLO) + "\n\nAfter the block.")
    assert content(run) == "Before.\n\nAfter the block."


def test_missing_invoke_closer_is_closed_by_the_block_closer() -> None:
    raw = '\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name="get_weather">\n' + p("city", "Oslo")
    run = parse(raw + "</｜DSML｜tool_calls>")
    assert calls(run) == [("get_weather", {"city": "Oslo"})] and content(run) is None


def test_missing_block_closer_then_text() -> None:
    raw = "\n\n<｜DSML｜tool_calls>\n" + OSLO + "Now wait.</｜DSML｜tool_calls>"
    run = parse(raw)
    assert calls(run) == [("get_weather", {"city": "Oslo", "days": 3})]
    assert content(run) == "Now wait."


def test_text_inside_a_block_without_a_call_is_all_text() -> None:
    raw = "\n\n<｜DSML｜tool_calls>\nnot an invoke\n</｜DSML｜tool_calls>"
    assert content(parse(raw)) == raw.strip()


def test_json_body_instead_of_parameters() -> None:
    raw = block('<｜DSML｜invoke name="get_weather">\n{"city": "Oslo"}\n</｜DSML｜invoke>\n')
    assert calls(parse(raw)) == [("get_weather", {"city": "Oslo"})]
    bad = '<｜DSML｜invoke name="get_weather">\n{"city": "Oslo"}\n' + p("days", "3", False)
    run = parse(block(bad + "</｜DSML｜invoke>\n"))
    assert calls(run) == [] and run.voided == {0}


# Hostile output: never an exception, never quadratic.


@pytest.mark.parametrize(
    ("name", "value", "kept"),
    [
        ("units", "[" * 3000 + "]" * 3000, True),  # deeper than json.loads can recurse
        ("units", "{'a': " * 300 + "1" + "}" * 300, True),  # a Python literal as deep
        ("days", "1" * 5000, True),  # an integer over Python's 4,300 digits
        ("units", "[" + "1" * 5000 + "]", True),
        ("days", "12", False),
    ],
)
def test_values_no_client_could_read_stay_text(name: str, value: str, kept: bool) -> None:
    run = parse(block(inv("get_weather", p(name, value, string=False))))
    assert calls(run) == [("get_weather", {name: value if kept else 12})]


@pytest.mark.parametrize(
    "raw",
    [
        "\n\n<｜DSML｜tool_calls>\n" + "text in a block " * 1250,  # a block without a call
        "\n\n<｜DSML｜tool_calls>\n" + inv("nope", p("a", "x" * 20_000)),  # no call: raw text
        '<｜DSML｜invoke name="get_time">\n' + "prose " * 3500,  # a bare invoke, then text
    ],
)
def test_text_held_in_markup_is_scanned_once(raw: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Fed one character at a time, markup that turns out to be text is searched from where the
    last search stopped, not from its start again (that was quadratic: minutes at 1 MB)."""
    scanned = 0
    find_first = dsml.find_first

    def counting(buf: str, markers: Any, start: int) -> tuple[int, str] | None:
        nonlocal scanned
        scanned += len(buf) - start
        return find_first(buf, markers, start)

    monkeypatch.setattr(dsml, "find_first", counting)
    run = run_chunks("deepseek_v4", TOOLS, list(raw), CHAT)
    assert content(run) == raw.strip() and not run.message["tool_calls"]
    assert scanned < 4 * len(raw)


# Property: what the prompt encoder writes, the parser reads back, in any chunking.

_KEYS = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,8}", fullmatch=True)
_TEXT = st.text(
    alphabet=st.sampled_from(list('ab <>/"\\&\n｜DSMLparmet杭州{}')), max_size=40
).filter(lambda s: "</｜DSML｜parameter>" not in s)
_SCALARS = (
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
)
_JSON = st.recursive(_SCALARS | _TEXT, lambda inner: st.lists(inner, max_size=3), max_leaves=6)
_ARGUMENTS = st.dictionaries(
    _KEYS.filter(lambda k: k not in ("arguments", "input")), _TEXT | _JSON, max_size=4
)


@settings(max_examples=150, deadline=None)
@given(
    calls_written=st.lists(_ARGUMENTS, min_size=1, max_size=3),
    content_text=_TEXT.filter(lambda s: "<" not in s),
    seed=st.integers(0, 2**16),
)
def test_encoder_output_round_trips(
    calls_written: list[dict[str, Any]], content_text: str, seed: int
) -> None:
    body = "\n".join(write_invoke(f"tool_{i}", a) for i, a in enumerate(calls_written))
    raw = f"{content_text}\n\n<｜DSML｜tool_calls>\n{body}\n</｜DSML｜tool_calls>"
    rng = random.Random(seed)
    for chunks in ([raw], random_chunks(raw, rng, rng.choice((1, 3, 16)))):
        run = run_chunks("deepseek_v4", None, chunks, CHAT)
        assert calls(run) == [(f"tool_{i}", a) for i, a in enumerate(calls_written)]
        assert content(run) == (content_text.strip() or None)
        assert summary(accumulate(run.deltas)) == summary(run.message)
        assert not run.voided and not any(
            isinstance(e, ToolCallAbort) for b in run.feeds for e in b
        )


@pytest.mark.parametrize(
    "tail", ["\n</", "\n</\ufffd", "\n</｜DSML\ufffd", "\n\ufffd", "\n</｜DSML｜tool"]
)
def test_block_closer_cut_by_the_output_end_is_dropped(tail: str) -> None:
    """`max_tokens` ends the output inside the block's closer, after the last invoke; a `｜` cut
    in half decodes as U+FFFD. The finished call stays, and no piece of the closer is content."""
    run = parse("\n\n<｜DSML｜tool_calls>\n" + OSLO + tail)
    assert calls(run) == [("get_weather", {"city": "Oslo", "days": 3})]
    assert content(run) is None


def test_text_ending_in_a_cut_character_after_a_call_stays_content() -> None:
    run = parse("\n\n<｜DSML｜tool_calls>\n" + OSLO + "\nDone \ufffd")
    assert content(run) == "Done \ufffd"
