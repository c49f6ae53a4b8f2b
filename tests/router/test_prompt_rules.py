"""The router's prompt rules (gateway preprocessing): scopes, system-prompt modes, whitespace
compaction."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from configs.model_config import RouterAppConfig
from configs.preprocessing import Preprocessing, PreprocessRules, SystemPrompt, Truncation
from deployments.protocol.requests import ChatCompletionRequest, CompletionRequest
from router.prompt_rules import apply_prompt_rules, compact_text
from router.prompt_rules.system_prompt import apply_system_prompt

CODE = "```python\ndef f(x):\n\n\n    return  x   +  1    \n```"
TOOL_ARGS = '{"query":  "two   spaces",\n\n\n "n": 1}'


def chat(*messages: dict[str, Any], **fields: Any) -> ChatCompletionRequest:
    return ChatCompletionRequest.model_validate({"messages": list(messages), **fields})


def test_compaction_collapses_spaces_and_blank_lines_outside_fences() -> None:
    text = "Hello   there,  \n\n\n\n  indented   line\t\t end\n" + CODE + "\n\n\n\nbye   now"
    out = compact_text(text)
    assert out == "Hello there,\n\n  indented line end\n" + CODE + "\n\nbye now"
    assert CODE in out, "a fenced code block must survive byte for byte"


def test_unclosed_and_tilde_fences_are_kept_to_the_end() -> None:
    text = "a  b\n~~~~\nx   y\n\n\n~~~\nstill   code\n~~~~\nc   d\n```\nz    w"
    assert compact_text(text) == "a b\n~~~~\nx   y\n\n\n~~~\nstill   code\n~~~~\nc d\n```\nz    w"


@given(st.text(alphabet=" \t\n`~ab", max_size=80))
def test_compaction_is_idempotent_and_only_removes_whitespace(text: str) -> None:
    once = compact_text(text)
    assert compact_text(once) == once
    assert once.replace(" ", "").replace("\t", "").replace("\n", "").replace("\r", "") == (
        text.replace(" ", "").replace("\t", "").replace("\n", "").replace("\r", "")
    )


def test_compaction_touches_user_text_only() -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "search", "arguments": TOOL_ARGS}}
    req = chat(
        {"role": "system", "content": "sys   text\n\n\n\nend"},
        {"role": "user", "content": "find   it\n\n\n\nplease\n" + CODE},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "result   with\n\n\n\ngaps"},
        {"role": "user", "content": [{"type": "text", "text": "and   this"}]},
    )
    out, plan = apply_prompt_rules(req, PreprocessRules(compact_whitespace=True), fit_context=False)
    assert plan is not None and len(plan.compacted) == 2
    assert out.messages[0] == req.messages[0] and out.messages[2:4] == req.messages[2:4]
    assert out.messages[2].tool_calls[0].function.arguments == TOOL_ARGS  # type: ignore[index]
    assert out.messages[1].content == "find it\n\nplease\n" + CODE
    assert out.messages[4].content[0].text == "and this"  # type: ignore[index,union-attr]
    assert req.messages[1].content == "find   it\n\n\n\nplease\n" + CODE, "the input is copied"


@pytest.mark.parametrize(
    ("mode", "messages", "edit", "expected"),
    [
        ("default", [{"role": "user", "content": "hi"}], "injected", ["S", "hi"]),
        ("default", [{"role": "system", "content": "mine"}, {"role": "user", "content": "hi"}],
         None, ["mine", "hi"]),
        ("prepend", [{"role": "system", "content": "mine"}, {"role": "user", "content": "hi"}],
         "prepended", ["S\n\nmine", "hi"]),
        ("prepend", [{"role": "user", "content": "hi"}], "injected", ["S", "hi"]),
        ("replace", [{"role": "developer", "content": "d"}, {"role": "user", "content": "hi"},
                     {"role": "system", "content": "late"}], "replaced", ["S", "hi"]),
    ],
)  # fmt: skip
def test_system_prompt_modes(
    mode: str, messages: list[dict[str, Any]], edit: str | None, expected: list[str]
) -> None:
    req = chat(*messages)
    out, got = apply_system_prompt(req.messages, SystemPrompt(text="S", mode=mode))  # type: ignore[arg-type]
    assert got == edit
    assert [m.text() for m in out] == expected
    assert out[0].role in ("system", "developer")


def test_prepend_keeps_content_parts() -> None:
    req = chat({"role": "system", "content": [{"type": "text", "text": "mine"}]},
               {"role": "user", "content": "hi"})  # fmt: skip
    out, edit = apply_system_prompt(req.messages, SystemPrompt(text="S", mode="prepend"))
    assert edit == "prepended" and out[0].text() == "S\n\nmine"


def test_most_specific_scope_wins_per_rule_and_false_turns_off() -> None:
    rules = Preprocessing(
        aliases={"auto": PreprocessRules(system_prompt=SystemPrompt(text="alias"),
                                         compact_whitespace=True)},
        models={"m": PreprocessRules(system_prompt=SystemPrompt(text="model"),
                                     truncation=Truncation(min_output_tokens=8))},
        tenants={"t": PreprocessRules(system_prompt=SystemPrompt(text="tenant"),
                                      compact_whitespace=False, truncation=False)},
    )  # fmt: skip
    assert rules.resolve("auto", "m", "t") == PreprocessRules(
        system_prompt=SystemPrompt(text="tenant")
    )
    model = rules.resolve("auto", "m", None)
    assert model.system_prompt == SystemPrompt(text="model") and model.compact_whitespace
    assert model.truncation == Truncation(min_output_tokens=8)
    assert rules.resolve(None, "other", None) == PreprocessRules()
    assert rules.resolve("auto", "other", "unknown").system_prompt == SystemPrompt(text="alias")


def test_nothing_to_do_sends_the_request_as_is() -> None:
    req = chat({"role": "system", "content": "s"}, {"role": "user", "content": "hi"})
    rules = PreprocessRules(system_prompt=SystemPrompt(text="S"))
    assert apply_prompt_rules(req, rules, True) == (req, None)
    legacy = CompletionRequest(prompt="a    b")
    compact = PreprocessRules(compact_whitespace=True)
    assert apply_prompt_rules(legacy, compact, True) == (legacy, None)
    out, plan = apply_prompt_rules(req, PreprocessRules(truncation=Truncation()), True)
    assert out is req and plan is not None and plan.fit_context and plan.truncation is not None


def _config(preprocessing: dict[str, Any]) -> dict[str, Any]:
    model = {"model_id": "m", "source": {"path": "x.gguf"}, "engine": {"max_model_len": 64}}
    return {"models": [model], "preprocessing": preprocessing}


@pytest.mark.parametrize(
    ("preprocessing", "names"),
    [
        ({"models": {"nope": {}}}, "preprocessing.models.nope"),
        ({"aliases": {"fast": {}}}, "preprocessing.aliases.fast"),
        ({"tenants": {"t": {"system_prompt": {"text": ""}}}}, "system_prompt.rule.text"),
        ({"models": {"m": {"system_prompt": {"text": "s", "mode": "append"}}}}, "mode"),
        ({"models": {"m": {"truncation": {"max_prompt_tokens": 0}}}}, "max_prompt_tokens"),
        ({"models": {"m": {"whitespace": True}}}, "whitespace"),
    ],
)
def test_config_errors_name_the_rule(preprocessing: dict[str, Any], names: str) -> None:
    with pytest.raises(ValidationError, match=names.replace(".", r"\.")):
        RouterAppConfig.model_validate(_config(preprocessing))
